"""scripts/release: from a fresh clone (no .venv, nothing built), a tag's sdist, manylinux wheel and
SBOM, byte for byte the same on two runs in two clones; and the refusals.

The two runs need the package index (the release installs its hash-checked locks into its own
venvs): they skip, saying so, when it cannot be reached. About 1-2 minutes each on 2 busy cores."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.helpers import REPO, skip_without_package_index

import mcsdns

V = mcsdns.__version__


def run(*cmd: str | Path, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def git(cwd: Path, *args: str) -> str:
    r = run("git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def make_tagged(repo: Path) -> Path:
    """A git repository of this work tree's files (tracked and new), its CHANGELOG dated, tagged vV."""
    for f in run("git", "ls-files", "-co", "--exclude-standard").stdout.split():
        if (REPO / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, repo / f)
    log = repo / "CHANGELOG.md"
    dated = re.sub(rf"^## {re.escape(V)} \(.*\)$", f"## {V} (2026-11-26)", log.read_text(), flags=re.M)
    log.write_text(dated)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release")
    git(repo, "tag", f"v{V}")
    return repo


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Two fresh clones of a tagged repository, each released into its own directory: (origin, out1, out2).
    The first clone's work tree says another version (uncommitted): the release builds the tag."""
    tmp = tmp_path_factory.mktemp("release")
    skip_without_package_index(tmp / "probe")
    origin = make_tagged(tmp / "origin")
    for i in (1, 2):
        clone = tmp / f"clone{i}"
        git(tmp, "clone", "-q", str(origin), str(clone))
        git(clone, "checkout", "-q", f"v{V}")
        if i == 1:
            (clone / "mcsdns" / "__init__.py").write_text('__version__ = "9.9.9"\n')
    with ThreadPoolExecutor(2) as pool:  # at once: each clone works in its own build/release/
        runs = list(pool.map(lambda i: run("scripts/release", f"v{V}", "--no-image", "--out", tmp / f"out{i}",
                                           cwd=tmp / f"clone{i}", timeout=900), (1, 2)))
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
        print(r.stdout)
    return origin, tmp / "out1", tmp / "out2"


def test_two_releases_of_a_tag_from_fresh_clones_are_byte_identical(releases: tuple[Path, Path, Path]
                                                                     ) -> None:
    _, out1, out2 = releases
    sums = (out1 / "SHA256SUMS").read_bytes()
    print(sums.decode())
    assert sums == (out2 / "SHA256SUMS").read_bytes()
    listed = {name: digest for digest, name in (ln.split("  ") for ln in sums.decode().splitlines())}
    names = sorted(p.name for p in out1.iterdir())
    assert set(listed) == set(names) - {"SHA256SUMS"} and len(listed) == 3, names
    for out in (out1, out2):
        assert all(hashlib.sha256((out / n).read_bytes()).hexdigest() == h for n, h in listed.items())


def test_the_wheel_is_manylinux_licensed_and_names_no_build_path(releases: tuple[Path, Path, Path]) -> None:
    _, out, _ = releases
    wheel = next(out.glob(f"mcsdns-{V}-cp311-cp311-*.whl"))
    assert re.search(r"[-.]manylinux_2_\d+_x86_64\.whl$", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        info = f"mcsdns-{V}.dist-info"
        meta = z.read(f"{info}/METADATA").decode()
        assert f"\nVersion: {V}\n" in meta and "\nLicense-Expression: Apache-2.0\n" in meta
        assert z.read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
        assert "Tag: cp311-cp311-manylinux_2_" in z.read(f"{info}/WHEEL").decode()
        sos = [n for n in z.namelist() if n.endswith(".so")]
        assert len(sos) == len(list((REPO / "mcsdns").rglob("*.c"))), sos
        for so in sos:  # neither the clone's path nor this Python's lib directory (-rpath)
            data = z.read(so)
            assert b"/clone1" not in data and sys.base_prefix.encode() + b"/lib" not in data, so


def test_the_sdist_carries_the_commit_time_only(releases: tuple[Path, Path, Path]) -> None:
    origin, out, _ = releases
    epoch = int(git(origin, "log", "-1", "--format=%ct", f"v{V}"))
    with tarfile.open(out / f"mcsdns-{V}.tar.gz") as t:
        members = t.getmembers()
        names = [m.name for m in members]
        assert f"mcsdns-{V}/mcsdns/transport/_batchio.c" in names and f"mcsdns-{V}/LICENSE" in names
        assert {m.mtime for m in members} == {epoch}
        pkg = t.extractfile(f"mcsdns-{V}/PKG-INFO")
        assert pkg and b"\nLicense-Expression: Apache-2.0\n" in pkg.read()
    assert int.from_bytes((out / f"mcsdns-{V}.tar.gz").read_bytes()[4:8], "little") == epoch  # gzip header


def test_the_sbom_is_dated_and_numbered_by_the_commit_and_licensed(releases: tuple[Path, Path, Path]) -> None:
    origin, out, _ = releases
    when = git(origin, "log", "-1", "--format=%cI", f"v{V}").replace("Z", "+00:00")
    sbom = json.loads((out / f"mcsdns-{V}.cdx.json").read_text())
    assert sbom["metadata"]["timestamp"] == when
    assert re.fullmatch(r"urn:uuid:[0-9a-f-]{36}", sbom["serialNumber"])
    root = sbom["metadata"]["component"]
    assert root["version"] == V and root["licenses"][0]["license"]["id"] == "Apache-2.0"
    assert sbom["components"] and all(c["licenses"] for c in sbom["components"])


def test_release_refuses_a_tag_that_is_not_the_version_or_not_in_the_changelog(tmp_path: Path) -> None:
    repo = make_tagged(tmp_path / "repo")
    git(repo, "tag", "v0.0.1")
    r = run("scripts/release", "v0.0.1", "--no-image", "--out", tmp_path / "o", cwd=repo)
    assert r.returncode == 2 and f"mcsdns/__init__.py at the tag says {V}" in r.stderr, r.stderr
    r = run("scripts/release", "v7.7.7", "--no-image", cwd=repo)
    assert r.returncode == 2 and "v7.7.7: no such tag" in r.stderr
    dep = repo / "deploy" / "server" / "deployment.yaml"
    dep.write_text(dep.read_text().replace(f"mcsdns/mcsdns:{V}", "mcsdns/mcsdns:0.0.9"))
    git(repo, "commit", "-qam", "old image")
    git(repo, "tag", "-f", f"v{V}")
    r = run("scripts/release", f"v{V}", "--no-image", "--out", tmp_path / "o", cwd=repo)
    assert r.returncode == 2, r.stderr
    assert "deploy/ at the tag still names ghcr.io/mcsdns/mcsdns:0.0.9" in r.stderr, r.stderr
    git(repo, "revert", "--no-edit", "HEAD")
    log = repo / "CHANGELOG.md"
    log.write_text(log.read_text().replace(f"## {V} (2026-11-26)", f"## {V} (unreleased)"))
    git(repo, "commit", "-qam", "undated")
    git(repo, "tag", "-f", f"v{V}")
    r = run("scripts/release", f"v{V}", "--no-image", "--out", tmp_path / "o", cwd=repo)
    assert r.returncode == 2 and "no dated heading" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
