"""Shared fixtures; tests/ on sys.path so tests import helpers and controller_env."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_env import IDS, Cluster  # noqa: E402


@pytest.fixture
def clusters2(tmp_path: Path) -> Iterator[list[Cluster]]:
    """Two member clusters (test API servers), closed afterwards."""
    cl = [Cluster(n, i, tmp_path) for n, i in IDS[:2]]
    yield cl
    for c in cl:
        c.close()
