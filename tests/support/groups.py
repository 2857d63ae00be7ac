"""How `pytest -n 3 --dist loadgroup` (pytest-xdist; `./scripts/test`) shares the tests out:
which run together on one worker, and which start first. tests/conftest.py calls `arrange`.

A group is the mark `xdist_group(name)`; one worker runs all of a group, one test after another.
Groups are whole modules, set here in one place:

- a module using a session-scoped fixture of tests/ joins that fixture's group: `real_k8s`
  (the session's real control plane, started once; the tests writing its cluster-wide objects,
  the ClusterProperty, take turns as without -n), `servers` (test_specs's servers); a module
  that starts control planes of its own is free to run beside them;
- a module with a module-scoped fixture of tests/ is a group of its own, so that its set-up (two
  releases from fresh clones, a second control plane, the real resolvers) runs once;
- a module whose tests carry an `xdist_group` mark of their own is in that group.

`SLOW` modules (and their groups) are handed out first, longest first, so that no long test
starts when the other workers have nothing left (measured with `--durations`; the order matters
only for the wall time).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
WIDE = {"session": 2, "package": 1, "module": 1}
SLOW = ("controller/test_real_faults.py", "project/test_release_run.py",
        "controller/test_real_member_queues.py", "members/test_real_join.py",
        "project/test_serve_example.py", "deploy/test_monitoring_coredns.py",
        "controller/test_real_writers.py", "controller/test_real_kube_proxy.py",
        "controller/test_real_probe.py", "controller/test_real_local.py", "project/test_conformance.py",
        "deploy/test_monitoring.py", "controller/test_real_outage.py", "show/test_real_show.py",
        "controller/test_real_locality.py", "nameserver/test_answer_limits.py",
        "controller/test_real_apiserver_controller.py", "cli/test_config_errors.py")


def _module(item: pytest.Item) -> str:
    return item.path.relative_to(TESTS).as_posix()


def _shared(item: pytest.Item) -> list[tuple[int, str]]:
    """(width, group) of each session- or module-scoped fixture of tests/ that `item` uses: the
    fixture's name for a session's, the module's path for a module's."""
    if not isinstance(item, pytest.Function):
        return []
    out = []
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        for d in defs:
            width, source = WIDE.get(d.scope, 0), inspect.getsourcefile(d.func)
            if width and source and Path(source).resolve().is_relative_to(TESTS):
                out.append((width, name if width == 2 else _module(item)))
    return out


def _group(members: list[pytest.Item]) -> str | None:
    marked = sorted({str(m.args[0]) for it in members for m in it.iter_markers("xdist_group")})
    if marked:
        return marked[0]
    wanted = sorted((w for it in members for w in _shared(it)), reverse=True)
    return wanted[0][1] if wanted else None


def arrange(items: list[pytest.Item], reorder: bool) -> None:
    """Mark every test with its module's group, if any (see above); with `reorder`, put the SLOW
    modules' groups first."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    rank: dict[str, int] = {}  # group or module -> place in SLOW
    for name, members in modules.items():
        group = _group(members)
        for it in members:
            if group and not any(it.iter_markers("xdist_group")):
                it.add_marker(pytest.mark.xdist_group(group))
        if name in SLOW:
            key = group or name
            rank[key] = min(rank.get(key, len(SLOW)), SLOW.index(name))
    if not reorder:
        return
    first = {name: rank.get(_group(members) or name, len(SLOW)) for name, members in modules.items()}
    items.sort(key=lambda it: first[_module(it)])  # stable: collection order otherwise


def check_grouped(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker under --dist loadgroup, after pytest-xdist named each test's group in its id:
    a UsageError if it did not (pytest-xdist 3.8 under pytest 9.2, pytest-xdist#1386: then every
    test would run anywhere, silently)."""
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    lost = [it.nodeid for it in items if any(it.iter_markers("xdist_group")) and "@" not in it.nodeid]
    if lost:
        why = (f"pytest-xdist did not group {lost[0]} (and {len(lost) - 1} more): this pytest and "
               "pytest-xdist do not work together (pyproject.toml's test extra)")
        print(f"\n{why}", file=sys.__stderr__, flush=True)  # a worker's error reaches the run as a crash
        raise pytest.UsageError(why)
