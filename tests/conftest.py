"""Shared fixtures. tests/ is on sys.path (pyproject.toml: pythonpath): tests import support.*, fakeapi."""

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.controller_env import IDS, Cluster
from support.groups import arrange, check_grouped
from support.real_fleet import reals  # noqa: F401 - fixture: two real control planes (MCSDNS_REALK8S)
from support.realk8s import real_k8s  # noqa: F401 - the session's real control plane (MCSDNS_REALK8S)


@pytest.fixture
def clusters2(tmp_path: Path) -> Iterator[list[Cluster]]:
    """Two member clusters (test API servers), closed afterwards."""
    cl = [Cluster(n, i, tmp_path) for n, i in IDS[:2]]
    yield cl
    for c in cl:
        c.close()


@pytest.fixture
def clusters3(tmp_path: Path) -> Iterator[list[Cluster]]:
    """Three member clusters (test API servers), closed afterwards."""
    cl = [Cluster(n, i, tmp_path) for n, i in IDS]
    yield cl
    for c in cl:
        c.close()


def _live_children() -> list[tuple[int, str]]:
    """This process's children that have not exited (pid, command line)."""
    me, out = os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            state, ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if int(ppid) == me and state != "Z":
            out.append((int(d.name), cmd))
    return out


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The groups one pytest-xdist worker runs (`pytest -n 3 --dist loadgroup`), the slow first."""
    arrange(items, reorder=hasattr(config, "workerinput"))


@pytest.hookimpl(tryfirst=True)  # pytest-xdist named the groups in the ids (modifyitems)
def pytest_collection_finish(session: pytest.Session) -> None:
    check_grouped(session.config, session.items)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A process a test started and never stopped (e.g. a server left answering on a port)
    fails the run; it is killed. (Under pytest -n each worker checks its own; the
    controller's children are the workers.)"""
    if session.config.pluginmanager.has_plugin("dsession"):
        return
    leaked = _live_children()
    for pid, cmd in leaked:
        print(f"\nleaked process {pid}, killed: {cmd}", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if leaked:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
