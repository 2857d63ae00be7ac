"""The Containerfile, the CoreDNS and NodeLocal DNSCache snippets of deploy/coredns, and the
example custom resources: checked without a cluster or a container engine."""

from __future__ import annotations

import fnmatch
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema  # a dependency of kubernetes-validate
import kubernetes_validate  # the `test` extra; bundles the schemas, works offline
import pytest
import yaml
from support.deploy_env import (
    DEPLOY,
    K8S_VERSION,
    MCS,
    render,
)
from support.helpers import EXAMPLE, REPO

from mcsdns.cli import build_parser
from mcsdns.sources.manifest import load_file


# --- Containerfile ----------------------------------------------------------------------------------
def containerfile() -> list[list[str]]:
    """Instructions of the Containerfile as [INSTRUCTION, rest] (comments and continuations joined)."""
    text = (REPO / "Containerfile").read_text().replace("\\\n", " ")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return [[ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]] for ln in lines]


def base_args() -> dict[str, str]:
    """ARG defaults declared before the first FROM (the only ones a FROM line can use)."""
    inst = containerfile()
    first = next(i for i, (k, _) in enumerate(inst) if k == "FROM")
    return dict(v.split("=", 1) for k, v in inst[:first] if k == "ARG")


def test_containerfile_bases_are_build_args_with_matching_public_defaults() -> None:
    """scripts/container-test (CI) replaces both bases with ones made by debootstrap, passed by
    digest (scripts/image-args); the defaults are a build image with a compiler and a slim runtime
    of the same Python."""
    args = base_args()
    froms = [v.split() for k, v in containerfile() if k == "FROM"]
    assert [f[0] for f in froms] == ["${BUILD_BASE}", "${BASE}"] and froms[0][1:] == ["AS", "build"]
    assert args == {"BUILD_BASE": "docker.io/library/python:3.11",
                    "BASE": "docker.io/library/python:3.11-slim"}
    script = (REPO / "scripts" / "container-test").read_text()
    assert 'scripts/image-args HEAD "$BASE" "$BUILD_BASE"' in script


def test_containerfile_runs_mcsdns_non_root_on_unprivileged_ports() -> None:
    inst = containerfile()
    stages = [i for i, (k, _) in enumerate(inst) if k == "FROM"]
    assert len(stages) >= 2
    final = inst[stages[-1]:]
    assert [v for k, v in final if k == "COPY"] == ["--from=build /opt/mcsdns /opt/mcsdns"]
    users = [v for k, v in final if k == "USER"]
    assert users and users[-1].split(":")[0] == "65532"
    exposed = {p for k, v in final if k == "EXPOSE" for p in v.split()}
    assert exposed == {"5353/udp", "5353/tcp", "8080/tcp", "9153/tcp"}
    assert all(int(p.split("/")[0]) >= 1024 for p in exposed)
    entry = yaml.safe_load(next(v for k, v in final if k == "ENTRYPOINT"))
    cmd = yaml.safe_load(next(v for k, v in final if k == "CMD"))
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == ["mcsdns"] and entry[0] in scripts
    ns = build_parser().parse_args(cmd)
    assert cmd[0] == "serve" and ns.listen == [("0.0.0.0", 5353)] and ns.health == ("0.0.0.0", 8080)
    assert ns.metrics == ("0.0.0.0", 9153)


def test_containerfile_copies_only_what_exists_and_is_not_dockerignored() -> None:
    ignored = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    sources = [s for k, v in containerfile() if k == "COPY" and not v.startswith("--from")
               for s in shlex.split(v)[:-1]]
    assert "pyproject.toml" in sources and "mcsdns" in sources
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["readme"] in sources  # setuptools reads it while building the wheel
    build_files = {"setup.py", "setup.cfg", "MANIFEST.in"}  # read by setuptools too, where present
    assert {f for f in build_files if (REPO / f).exists()} <= set(sources)
    assert not [p for p in ignored if p.startswith("!")]  # the check below has no negation

    def excluded(rel: Path) -> bool:  # docker: the path or one of its parents matches a pattern
        return any(fnmatch.fnmatch(str(p), pat.removeprefix("**/")) or fnmatch.fnmatch(str(p), pat)
                   for p in (rel, *rel.parents) if str(p) != "." for pat in ignored)

    for s in sources:
        src = REPO / s
        assert src.exists() and not excluded(Path(s)), s
        files = [f for f in src.rglob("*.py") if "__pycache__" not in f.parts] if src.is_dir() else []
        assert all(not excluded(f.relative_to(REPO)) for f in files), s
    assert excluded(Path("mcsdns/__pycache__/cli.cpython-311.pyc")) and excluded(Path(".git/config"))


def test_corefile_snippet_forwards_the_zone_to_a_placeholder_for_the_service_ip() -> None:
    text = (DEPLOY / "coredns" / "Corefile.snippet").read_text()
    lines = [ln.split("#")[0].strip() for ln in text.splitlines()]
    body = [ln for ln in lines if ln]
    assert body[0] == "clusterset.local:53 {" and body[-1] == "}"
    assert set(body[1:-1]) == {"errors", "cache 5", "forward . MCSDNS_SERVICE_IP", "prometheus :9153"}
    docs = (REPO / "docs" / "deploy.md").read_text()
    assert "MCSDNS_SERVICE_IP" in docs and "jsonpath='{.spec.clusterIP}'" in docs


def _corefile_block(name: str) -> list[str]:
    """The snippet's server block: its lines without comments, indentation or blank lines."""
    text = (DEPLOY / "coredns" / name).read_text()
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_nodelocaldns_snippet_forwards_the_zone_over_tcp_and_caches_no_longer_than_the_ttl() -> None:
    body = _corefile_block("nodelocaldns.snippet")
    assert body[0] == "clusterset.local:53 {" and body[-1] == "}"
    assert sum(ln.endswith("{") for ln in body) == sum(ln == "}" for ln in body)
    fwd = body.index("forward . MCSDNS_SERVICE_IP {")
    assert body[fwd + 1:fwd + 3] == ["force_tcp", "}"]
    # node-cache binds the link-local address (and the kube-dns address in iptables mode)
    assert "bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__" in body
    ttl = serve_default_ttl()
    cache = body.index("cache {")
    for line in body[cache + 1:body.index("}", cache)]:
        kind, _, seconds = line.split()
        assert kind in {"success", "denial"} and int(seconds) <= ttl, line
    assert {"errors", "reload", "loop"} <= set(body)


def serve_default_ttl() -> int:
    """`mcsdns serve`'s default --ttl, as its --help states it."""
    out = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--help"],
                         capture_output=True, text=True, check=True).stdout
    return int(" ".join(out.split()).split("TTL of every record (default ")[1].split(")")[0])


@pytest.mark.parametrize("name", ["Corefile.snippet", "nodelocaldns.snippet"])
def test_operations_guide_quotes_each_forwarding_snippet_as_shipped(name: str) -> None:
    docs = (REPO / "docs" / "operations.md").read_text()
    shipped = "\n".join(ln for ln in (DEPLOY / "coredns" / name).read_text().splitlines()
                        if not ln.startswith("#"))
    assert f"```\n{shipped}\n```" in docs and f"deploy/coredns/{name}" in docs


def test_example_custom_resources_match_the_crd_schemas() -> None:
    """The example clusterset: CRD-typed objects against the openAPIV3Schema of their CRD version
    (structural schemas are JSON Schema; x-kubernetes-* keys are ignored), the rest against
    the Kubernetes schemas."""
    schemas = {(crd["spec"]["group"], v["name"], crd["spec"]["names"]["kind"]): v["schema"]["openAPIV3Schema"]
               for crd in render(DEPLOY / "crds") for v in crd["spec"]["versions"]}
    example = [o for p in sorted(EXAMPLE.glob("*.yaml")) for o in load_file(p)]
    checked = 0
    for o in example:
        group, _, version = o["apiVersion"].rpartition("/")
        schema = schemas.get((group, version, o["kind"]))
        if schema is None:  # a built-in kind (EndpointSlice)
            assert group not in {g for g, _, _ in schemas}, f"{o['apiVersion']} {o['kind']} has no CRD"
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
            continue
        jsonschema.validate(o, schema)
        checked += 1
    assert checked >= 3
    bad = next(o for o in example if o["kind"] == "ServiceImport")
    bad = dict(bad, spec=dict(bad["spec"], type="LoadBalancer"))  # not in the CRD's enum
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas[(MCS, bad["apiVersion"].rpartition("/")[2], "ServiceImport")])
