"""The project names only itself: no file refers to reference material outside the
repository or to a path on one machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.helpers import REPO

FORBIDDEN = ("DESIGN.md", "../shared", "shared/reference", "/work/")
# CI alone may put the workplace's real peers (../shared/peers) to use when they exist.
ALLOWED = {".ci/run": ("../shared",)}


def test_no_tracked_file_names_material_outside_the_project() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True,
                           ).stdout.decode().split("\0")
    me = Path(__file__).resolve().relative_to(REPO).as_posix()
    hits = []
    for name in files:
        path = REPO / name
        if not name or name == me or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        allowed = ALLOWED.get(name, ())
        hits += [f"{name}: {word}" for word in FORBIDDEN if word in text and word not in allowed]
    assert len(files) > 100 and not hits, hits
