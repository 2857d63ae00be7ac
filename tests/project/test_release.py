"""Releases: one version source, a changelog entry per version, the Apache-2.0 licence, the image's
dependencies pinned with hashes in a lock made from pyproject.toml, a CycloneDX SBOM listing every
locked package with its licence. scripts/release itself: tests/project/test_release_run.py.

The image itself (built from the lock, with its OCI labels) is built and checked by
scripts/container-test, which CI runs; its Containerfile is checked statically here."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from support.helpers import REPO

import mcsdns

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^\s;\\]+)")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of a `pip --require-hashes` requirements file."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in lock.read_text().splitlines():
        if m := PIN.match(line):
            name = norm(m["name"])
            out[name] = (m["version"], [])
        if name:
            out[name][1].extend(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return out


def run(*cmd: str | Path, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)


# --- one version source -----------------------------------------------------------------------------
def test_the_version_is_written_once_and_everything_reads_it() -> None:
    v = mcsdns.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", v)
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mcsdns.__version__"}
    assert importlib.metadata.version("mcsdns") == v  # the installed metadata, from the same place
    images = [c["image"] for f in sorted((REPO / "deploy").rglob("*.yaml"))
              for d in yaml.safe_load_all(f.read_text())
              if isinstance(d, dict) and d.get("kind") == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]]
    assert images and all(i == f"ghcr.io/mcsdns/mcsdns:{v}" for i in images), images
    assert re.search(rf"^## {re.escape(v)} \(", (REPO / "CHANGELOG.md").read_text(), re.M)


def test_changelog_has_upgrade_notes_for_flags_crds_and_metrics() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    section = text.split(f"## {mcsdns.__version__} ")[1].split("\n## ")[0]
    notes = section.split("### Upgrade notes")[1].split("\n### ")[0]
    for topic in ("**Flags.**", "**CRDs.**", "**Metrics.**", "**Image.**"):
        assert topic in notes, topic
    assert "--concurrent-reconciles" in notes and "--workers" in notes


# --- the locks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("lock,reqs", [("requirements.lock", PYPROJECT["project"]["dependencies"]),
                                       ("requirements-build.lock", PYPROJECT["build-system"]["requires"]),
                                       ("requirements-release.lock",
                                        PYPROJECT["project"]["optional-dependencies"]["release"])])
def test_lock_is_made_from_pyproject_and_pins_every_requirement_with_hashes(lock: str,
                                                                             reqs: list[str]) -> None:
    """A change of pyproject.toml's requirements without `scripts/lock` fails here (the digest)."""
    path = REPO / lock
    digest = hashlib.sha256("".join(r + "\n" for r in reqs).encode()).hexdigest()
    assert f"# inputs: sha256:{digest}" in path.read_text().splitlines(), f"{lock} is stale: run scripts/lock"
    locked = pins(path)
    assert locked and all(len(h) >= 1 for _, h in locked.values())
    for r in map(Requirement, reqs):
        assert norm(r.name) in locked, f"{r.name} is not in {lock}"
        assert r.specifier.contains(locked[norm(r.name)][0]), (r, locked[norm(r.name)][0])


def test_lock_inputs_digest_is_the_one_scripts_lock_writes() -> None:
    r = run("python3", "scripts/lock-inputs", "runtime", "--digest")
    assert r.returncode == 0, r.stderr
    assert f"# inputs: {r.stdout.strip()}" in (REPO / "requirements.lock").read_text()


def test_licence_is_apache_2_in_the_licence_file_the_metadata_and_the_image() -> None:
    assert (REPO / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    meta = importlib.metadata.metadata("mcsdns")
    assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE"
    assert "--build-arg=LICENSES=Apache-2.0" in run("scripts/image-args").stdout.split()


def containerfile() -> str:
    return (REPO / "Containerfile").read_text().replace("\\\n", " ")


def test_image_installs_only_the_hash_checked_locks_and_carries_oci_labels() -> None:
    text = containerfile()
    runs = [ln for ln in text.splitlines() if ln.startswith("RUN")]
    pip_installs = [p for ln in runs for p in ln.split("&&") if "pip install" in p]
    for p in pip_installs:  # every install is of a lock with --require-hashes, or the wheel alone
        assert ("--require-hashes -r requirements" in p) or ("--no-deps --no-index /wheels/" in p), p
    assert any("requirements.lock" in p for p in pip_installs)
    assert any("--no-build-isolation" in ln for ln in runs)  # setuptools from the build lock, not PyPI
    assert any("pip check" in ln for ln in runs)
    final = text[text.rindex("\nFROM "):]
    for name in ("version", "revision", "source", "licenses", "created", "base.name", "base.digest"):
        arg = name.upper().replace(".", "_")
        assert f'org.opencontainers.image.{name}="${{{arg}}}"' in final, name
        assert re.search(rf"^ARG {arg}\b", final, re.M), name
    default_source = re.search(r"^ARG SOURCE=(\S+)", final, re.M)
    assert default_source and default_source[1] == PYPROJECT["project"]["urls"]["Source"]


def test_image_args_date_the_image_by_its_commit_and_name_its_bases_by_digest() -> None:
    args = dict(a.removeprefix("--build-arg=").split("=", 1)
                for a in run("scripts/image-args", "HEAD", "b@sha256:" + "1" * 64, "bb@sha256:" + "2" * 64
                             ).stdout.split())
    commit = run("git", "log", "-1", "--format=%ct %cI", "HEAD").stdout.split()
    assert args["VERSION"] == mcsdns.__version__
    assert args["SOURCE"] == PYPROJECT["project"]["urls"]["Source"]
    assert args["CREATED"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(commit[0])))
    assert (args["BASE"], args["BASE_NAME"], args["BASE_DIGEST"]) == ("b@sha256:" + "1" * 64, "b",
                                                                      "sha256:" + "1" * 64)
    assert args["BUILD_BASE"] == "bb@sha256:" + "2" * 64
    sde = dict(a.removeprefix("--build-arg=").split("=", 1) for a in subprocess.run(
        ["scripts/image-args"], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": "86400"}).stdout.split())
    assert sde["CREATED"] == "1970-01-02T00:00:00Z"
    assert 'scripts/image-args HEAD "$BASE" "$BUILD_BASE"' in (REPO / "scripts/container-test").read_text()


# --- the SBOM -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sbom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sbom") / "sbom.cdx.json"
    r = run("scripts/sbom", out, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "every one of the" in r.stdout
    return out


def test_sbom_lists_every_locked_package_at_its_version(sbom: Path) -> None:
    bom: dict[str, Any] = json.loads(sbom.read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] >= "1.5"
    comps = {norm(c["name"]): c for c in bom["components"]}
    locked = pins(REPO / "requirements.lock")
    assert set(comps) == set(locked)
    for name, (version, hashes) in locked.items():
        c = comps[name]
        assert c["version"] == version and c["purl"] == f"pkg:pypi/{name}@{version}", c
        got = {h["content"] for ref in c["externalReferences"] for h in ref.get("hashes", [])}
        assert got == set(hashes), name
    assert all(c["licenses"] for c in bom["components"])  # from the packages' installed metadata
    assert [c["licenses"] for c in bom["components"] if norm(c["name"]) == "pyyaml"] == [
        [{"license": {"acknowledgement": "declared", "id": "MIT"}}]]
    root = bom["metadata"]["component"]
    assert (root["name"], root["version"]) == ("mcsdns", mcsdns.__version__)
    assert root["licenses"] == [{"license": {"acknowledgement": "declared", "id": "Apache-2.0"}}]
    direct = {norm(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    refs = {c["bom-ref"]: norm(c["name"]) for c in bom["components"]}
    root_deps = next(d for d in bom["dependencies"] if d["ref"] == root["bom-ref"])["dependsOn"]
    assert {refs[r] for r in root_deps} == direct


def test_sbom_check_fails_when_a_locked_package_is_missing_or_at_another_version(sbom: Path,
                                                                                  tmp_path: Path) -> None:
    """The good SBOM stands in for the environment's (it carries each package's licences)."""
    bom = json.loads(sbom.read_text())
    for i, change in enumerate(("drop", "version", "licence")):
        bad, env = json.loads(json.dumps(bom)), sbom
        gone = bad["components"][0]["name"]
        if change == "drop":
            bad["components"].pop(0)
        elif change == "version":
            bad["components"][0]["version"] = "0.0.0"
        else:  # not installed where the licences are read
            env = tmp_path / "env.json"
            env.write_text(json.dumps({"components": bom["components"][1:]}))
            del bad["components"][0]["licenses"]
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(bad))
        r = run(REPO / ".venv/bin/python", "scripts/sbom-finish", "requirements.lock", path, env)
        assert r.returncode == 1 and norm(gone) in r.stderr, (change, r.stderr)
