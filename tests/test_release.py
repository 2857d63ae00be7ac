"""Releases: one version source, a changelog entry per version, the image's dependencies pinned
with hashes in a lock made from pyproject.toml, a CycloneDX SBOM listing every locked package,
and scripts/release building a tag's sdist, wheel and SBOM from the tagged tree.

The image itself (built from the lock, with its OCI labels) is built and checked by
scripts/container-test, which CI runs; its Containerfile is checked statically here."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import REPO
from packaging.requirements import Requirement

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
                                       ("requirements-build.lock", PYPROJECT["build-system"]["requires"])])
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
    for name in ("version", "revision", "source"):
        assert f'org.opencontainers.image.{name}="${{{name.upper()}}}"' in final, name
        assert re.search(rf"^ARG {name.upper()}\b", final, re.M), name
    default_source = re.search(r"^ARG SOURCE=(\S+)", final, re.M)
    assert default_source and default_source[1] == PYPROJECT["project"]["urls"]["Source"]
    args = run("scripts/image-args", "HEAD").stdout.split()
    assert args[:1] == [f"--build-arg=VERSION={mcsdns.__version__}"] and len(args) == 3
    assert args[2] == f"--build-arg=SOURCE={PYPROJECT['project']['urls']['Source']}"
    assert "mapfile -t LABEL_ARGS < <(scripts/image-args)" in (REPO / "scripts/container-test").read_text()


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
    root = bom["metadata"]["component"]
    assert (root["name"], root["version"]) == ("mcsdns", mcsdns.__version__)
    direct = {norm(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    refs = {c["bom-ref"]: norm(c["name"]) for c in bom["components"]}
    root_deps = next(d for d in bom["dependencies"] if d["ref"] == root["bom-ref"])["dependsOn"]
    assert {refs[r] for r in root_deps} == direct


def test_sbom_check_fails_when_a_locked_package_is_missing_or_at_another_version(sbom: Path,
                                                                                  tmp_path: Path) -> None:
    bom = json.loads(sbom.read_text())
    for i, change in enumerate(("drop", "version")):
        bad = json.loads(json.dumps(bom))
        if change == "drop":
            gone = bad["components"].pop(0)["name"]
        else:
            bad["components"][0]["version"] = "0.0.0"
            gone = bad["components"][0]["name"]
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(bad))
        r = run(REPO / ".venv/bin/python", "scripts/sbom-finish", "requirements.lock", path)
        assert r.returncode == 1 and norm(gone) in r.stderr, (change, r.stderr)


# --- scripts/release ------------------------------------------------------------------------------------
def git(cwd: Path, *args: str) -> str:
    r = run("git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture
def tagged(tmp_path: Path) -> tuple[Path, str]:
    """A git repository of this work tree's tracked files, its CHANGELOG dated, tagged vVERSION."""
    repo = tmp_path / "repo"
    files = run("git", "ls-files", "-co", "--exclude-standard").stdout.split()
    for f in files:
        src = REPO / f
        if src.is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f)
    v = mcsdns.__version__
    log = repo / "CHANGELOG.md"
    dated = re.sub(rf"^## {re.escape(v)} \(.*\)$", f"## {v} (2026-11-26)", log.read_text(), flags=re.M)
    log.write_text(dated)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release")
    git(repo, "tag", f"v{v}")
    (repo / ".venv").symlink_to(REPO / ".venv")  # the SBOM tool
    return repo, v


def test_release_builds_sdist_wheel_and_sbom_of_the_tag(tagged: tuple[Path, str], tmp_path: Path) -> None:
    repo, v = tagged
    (repo / "mcsdns" / "__init__.py").write_text('__version__ = "9.9.9"\n')  # the work tree is not used
    out = tmp_path / "out"
    r = run("scripts/release", f"v{v}", "--out", out, "--no-image", cwd=repo, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    names = sorted(p.name for p in out.iterdir())
    wheel = next(out.glob(f"mcsdns-{v}-cp3*.whl"))
    assert names == sorted(["SHA256SUMS", f"mcsdns-{v}.tar.gz", wheel.name, f"mcsdns-{v}.cdx.json"])
    sums = {name: digest for digest, name in (line.split("  ") for line in
                                              (out / "SHA256SUMS").read_text().splitlines())}
    assert set(sums) == set(names) - {"SHA256SUMS"}
    assert all(hashlib.sha256((out / n).read_bytes()).hexdigest() == h for n, h in sums.items())
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"mcsdns-{v}.dist-info/METADATA").decode()
        assert f"\nVersion: {v}\n" in meta and any(n.endswith(".so") for n in z.namelist())
    with tarfile.open(out / f"mcsdns-{v}.tar.gz") as t:
        members = t.getnames()
        assert f"mcsdns-{v}/mcsdns/transport/_batchio.c" in members and f"mcsdns-{v}/PKG-INFO" in members
    sbom = json.loads((out / f"mcsdns-{v}.cdx.json").read_text())
    assert sbom["metadata"]["component"]["version"] == v
    assert len(sbom["components"]) == len(pins(REPO / "requirements.lock"))


def test_release_refuses_a_tag_that_is_not_the_version_or_not_in_the_changelog(tagged: tuple[Path, str],
                                                                                tmp_path: Path) -> None:
    repo, v = tagged
    git(repo, "tag", "v0.0.1")
    r = run("scripts/release", "v0.0.1", "--no-image", "--out", tmp_path / "o", cwd=repo)
    assert r.returncode == 2 and f"mcsdns/__init__.py at the tag says {v}" in r.stderr, r.stderr
    r = run("scripts/release", "v7.7.7", "--no-image", cwd=repo)
    assert r.returncode == 2 and "v7.7.7: no such tag" in r.stderr
    dep = repo / "deploy" / "server" / "deployment.yaml"
    dep.write_text(dep.read_text().replace(f"mcsdns/mcsdns:{v}", "mcsdns/mcsdns:0.0.9"))
    git(repo, "commit", "-qam", "old image")
    git(repo, "tag", "-f", f"v{v}")
    r = run("scripts/release", f"v{v}", "--no-image", "--out", tmp_path / "o", cwd=repo)
    assert r.returncode == 2, r.stderr
    assert "deploy/ at the tag still names ghcr.io/mcsdns/mcsdns:0.0.9" in r.stderr, r.stderr
    git(repo, "revert", "--no-edit", "HEAD")
    log = repo / "CHANGELOG.md"
    log.write_text(log.read_text().replace(f"## {v} (2026-11-26)", f"## {v} (unreleased)"))
    git(repo, "commit", "-qam", "undated")
    git(repo, "tag", "-f", f"v{v}")
    r = run("scripts/release", f"v{v}", "--no-image", "--out", tmp_path / "o", cwd=repo)
    assert r.returncode == 2 and "no dated heading" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
