"""Free loopback ports for the servers the tests and benches start."""

from __future__ import annotations

import collections
import os
import socket
from collections.abc import Iterator
from pathlib import Path

POOL = (10000, 20000)  # free_port's ports: below the kernel's ephemeral range and realk8s.sh's 20000-47999


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (to connect() and bind(0))."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> range:
    """This process's share of POOL: one slice per pytest-xdist worker, so two workers never
    pick the same port (a worker started in a crashed one's place, gw3 of three, shares a
    slice); empty when the kernel's ephemeral range reaches into POOL."""
    low, high = POOL[0], min(POOL[1], _ephemeral_low())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    index = int(worker[2:]) % count if worker[2:].isdigit() else 0
    size = (high - low) // count if high > low else 0
    return range(low + index * size, low + (index + 1) * size) if size >= 64 else range(0)


def _candidates() -> Iterator[int]:
    """Ports to try: this process's slice in turn from a random start (a port comes round
    again only after the whole slice), or the kernel's pick when there is no slice (not one of
    the last 256 it gave: it may give a port again once its socket is closed)."""
    ports = _slice()
    start = int.from_bytes(os.urandom(2), "big") % len(ports) if ports else 0
    recent: collections.deque[int] = collections.deque(maxlen=256)
    while True:
        if ports:
            yield from (ports[(start + i) % len(ports)] for i in range(len(ports)))
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind(("127.0.0.1", 0))
            port = int(t.getsockname()[1])
        if port not in recent:
            recent.append(port)
            yield port


_NEXT = _candidates()


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 that nothing else should take before the
    caller's server binds it. The kernel's own pick would not do: it hands the same ports to
    outgoing connections and to other processes' bind(0) (a CI run lost a server's --health port
    so), so the ports come from below the ephemeral range, one slice per test worker."""
    while True:
        port = next(_NEXT)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t, \
                    socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                t.bind(("127.0.0.1", port))
                u.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
