"""The tests' servers get ports nothing else takes before they bind them (tests/support/ports.py):
from below the kernel's ephemeral range, where no outgoing connection or bind(0) lands, and a
slice per pytest-xdist worker, so two workers never pick the same one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from support import ports
from support.helpers import REPO

PICK = "from support.ports import free_port; print(*(free_port() for _ in range(200)))"


def picks(worker: str, count: str) -> set[int]:
    env = dict(os.environ, PYTEST_XDIST_WORKER=worker, PYTEST_XDIST_WORKER_COUNT=count)
    out = subprocess.run([sys.executable, "-c", PICK], env=env, cwd=REPO / "tests",
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return {int(p) for p in out.split()}


def test_workers_pick_apart_and_below_the_ephemeral_range() -> None:
    sets = [picks(f"gw{i}", "3") for i in range(3)]
    assert [len(s) for s in sets] == [200, 200, 200]  # no port twice in one process
    assert not (sets[0] & sets[1] or sets[1] & sets[2] or sets[0] & sets[2])
    sets.append(picks("gw3", "3"))  # xdist's id for a worker started in a crashed one's place
    low = ports._ephemeral_low()
    assert all(ports.POOL[0] <= p < min(ports.POOL[1], low) for s in sets for p in s)


def test_a_port_in_use_for_tcp_or_udp_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        t.bind(("127.0.0.1", 0))
        u.bind(("127.0.0.1", 0))
        tcp, udp = t.getsockname()[1], u.getsockname()[1]
        free = ports.free_port()
        monkeypatch.setattr(ports, "_NEXT", iter([tcp, udp, free]))
        assert ports.free_port() == free


def test_without_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: ports.POOL[0])
    assert not ports._slice()
    given = ports._candidates()
    assert len({next(given) for _ in range(50)}) == 50
