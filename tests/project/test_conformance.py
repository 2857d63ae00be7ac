"""The dig-based conformance suite (conformance/run) against mcsdns, as a user runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import EXAMPLE, REPO, run_server

RUN = REPO / "conformance" / "run"
SPECS = sorted((REPO / "specs").glob("*.yaml"))

pytestmark = pytest.mark.skipif(shutil.which("dig") is None, reason="dig (bind9-dnsutils) is not installed")


def conformance(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout)


def table(out: str) -> dict[str, tuple[int, int]]:
    """section -> (passed, total) from the printed table."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(\S+)\s.*?\s(\d+)/(\d+)\s+(ok|FAIL)$", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return rows


def sections(files: list[Path] = SPECS, configured: bool = True) -> set[str]:
    """Sections of the spec files; `configured=False` leaves out those that need their own
    server arguments (only runnable with --start)."""
    import yaml

    docs = [yaml.safe_load(p.read_text()) for p in files]
    return {str(d["section"]) for d in docs if configured or not d.get("server_args")}


def test_start_runs_every_section_and_passes() -> None:
    p = conformance("--start")
    rows = table(p.stdout)
    assert set(rows) == sections(), p.stdout + p.stderr
    assert all(total > 0 for _, total in rows.values())
    failed = {s: r for s, r in rows.items() if r[0] != r[1]}
    assert p.returncode == 0 and not failed, p.stdout + p.stderr


def test_spec_rows_pass_with_locality_on() -> None:
    """Issue 8: a locality-aware server (cluster-a, regions known) still meets every spec row;
    only SRV priority/weight, which the spec leaves open, are not compared."""
    args = ["--start", "--any-srv-priority"]
    for a in ("--cluster-id", "cluster-a", "--cluster-region", "cluster-a=eu",
              "--cluster-region", "cluster-b=eu", "--cluster-region", "cluster-c=us"):
        args.append(f"--server-arg={a}")
    p = conformance(*args)
    assert p.returncode == 0, p.stdout + p.stderr
    got = table(p.stdout)
    assert set(got) == sections() and all(ok == n for ok, n in got.values())


def test_manifests_mode_loads_fixtures_into_a_running_server(tmp_path: Path) -> None:
    mdir = tmp_path / "m"
    mdir.mkdir()
    spec = REPO / "specs" / "2.4.2-headless-srv.yaml"
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        p = conformance("--server", f"127.0.0.1:{srv.port}", "--manifests", str(mdir),
                        "--spec", str(spec), str(REPO / "specs" / "2.2-schema-version.yaml"))
        rows = table(p.stdout)
        assert set(rows) == {"2.4.2", "2.2"}, p.stdout + p.stderr
        # both fixture sets were loaded in turn: every answer matched them
        assert p.returncode == 0 and all(a == b > 0 for a, b in rows.values()), p.stdout + p.stderr
        # the fixture file is removed afterwards, and the server follows
        assert list(mdir.iterdir()) == []
        r = srv.query("db.shop.svc.clusterset.local.")
        assert r.rcode() == 3  # NXDOMAIN


def test_a_server_with_other_data_fails(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        p = conformance("--server", f"127.0.0.1:{srv.port}",
                        "--spec", str(REPO / "specs" / "2.3.1-clustersetip-a-aaaa.yaml"))
    assert p.returncode == 1
    rows = table(p.stdout)
    passed, total = rows["2.3.1"]
    assert 0 < passed < total, p.stdout
    # the example's web service matches the spec; its "six" service does not exist there
    assert "six.shop.svc.clusterset.local. AAAA" in p.stdout and "got NXDOMAIN" in p.stdout


def _kube_run(tmp_path: Path, *extra: str, specs: tuple[str, ...] = ()) -> None:
    """Spec files (default all) through a Kubernetes API: both ServiceImport versions, several
    namespaces, a cluster-scoped ClusterProperty, and objects from one file that must be
    gone (deleted through the API) before the next."""
    from fakeapi import KubeAPI

    with KubeAPI() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
            p = conformance("--server", f"127.0.0.1:{srv.port}", "--kubeconfig", str(kubeconfig),
                            *extra, *(["--spec", *(str(REPO / "specs" / f) for f in specs)] if specs else []))
        rows = table(p.stdout)
        files = [REPO / "specs" / f for f in specs] or SPECS
        assert set(rows) == sections(files, configured=False), p.stdout + p.stderr
        assert p.returncode == 0 and all(a == b > 0 for a, b in rows.values()), p.stdout + p.stderr
        # everything the suite created is gone again, namespaces included
        for kind in ("ServiceImport", "EndpointSlice", "ClusterProperty", "Namespace"):
            assert api.objects(kind) == [], kind


def test_kubeconfig_mode_against_the_test_api_server(tmp_path: Path) -> None:
    _kube_run(tmp_path)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_mode_against_the_test_api_server(tmp_path: Path) -> None:
    # the test API server has no OpenAPI document for kubectl's client-side validation
    # (kubectl takes ~0.3 s per call: three files keep this test short)
    _kube_run(tmp_path, "--kubectl", "--kubectl-apply-flags=--validate=false",
              specs=("2.3.1-clustersetip-a-aaaa.yaml", "2.4.4-headless-no-cluster-records.yaml",
                     "negative.yaml"))
