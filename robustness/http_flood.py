#!/usr/bin/env python3
"""A connection flood against the HTTP port, with a kubelet-like probe: figures
for the probe's pass rate and the tracebacks the server logs.

    python robustness/http_flood.py --conns 10000 --seconds 30

One process keeps `--conns` connections open to the server's /health port,
sending nothing (`--partial`: half a request), and reopens each as soon as the
server closes it. Meanwhile this process probes GET /ready every `--interval`
seconds with a 1 s timeout (connect to last octet), as kubelet does.
"""

from __future__ import annotations

import argparse
import errno
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.helpers import EXAMPLE, Server, run_server  # noqa: E402

PROBE = b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\n\r\n"
PARTIAL = b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def flood(port: int, conns: int, seconds: float, partial: bool = False) -> int:
    """Keep `conns` connections to 127.0.0.1:`port` open for `seconds`, reopening
    each the server closes; the number of connections opened."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, conns + 256)), hard))
    ep = select.epoll()
    socks: dict[int, socket.socket] = {}
    opened = 0

    def open_one() -> None:
        nonlocal opened
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            return
        socks[s.fileno()] = s
        ep.register(s.fileno(), select.EPOLLOUT | select.EPOLLIN | select.EPOLLRDHUP)
        opened += 1

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while len(socks) < conns:
            n = len(socks)
            open_one()
            if len(socks) == n:  # out of ports or fds for now
                break
        for fd, ev in ep.poll(0.05):
            s = socks[fd]
            if ev & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
                ep.unregister(fd)
                del socks[fd]
                s.close()
            elif ev & select.EPOLLOUT:  # connected: send half a request, or nothing
                ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)
                if partial:
                    try:
                        s.send(PARTIAL)
                    except OSError:
                        pass
    for s in socks.values():
        s.close()
    return opened


def probe(port: int, timeout: float = 1.0) -> float | None:
    """Seconds for GET /ready to answer 200 (connect to close), None when it does not
    within `timeout`."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(PROBE)
            got = b""
            while True:
                left = timeout - (time.monotonic() - t0)
                if left <= 0:
                    return None
                s.settimeout(left)
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
    except OSError:
        return None
    return time.monotonic() - t0 if got.startswith(b"HTTP/1.1 200") else None


@dataclass
class Probes:
    """Probe outcomes: each one's start time and seconds to answer (None: failed)."""

    results: list[tuple[float, float | None]] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(1 for _, t in self.results if t is not None)

    def longest_failure(self) -> float:
        """Seconds from the first to the end of the last failed probe of the longest run."""
        worst, start = 0.0, None
        for t0, t in self.results:
            if t is None:
                start = t0 if start is None else start
                worst = max(worst, t0 + 1.0 - start)
            else:
                start = None
        return worst

    def slowest(self) -> float:
        return max((t for _, t in self.results if t is not None), default=0.0)


def probe_during_flood(srv: Server, conns: int, seconds: float, interval: float = 0.2,
                       partial: bool = False, warmup: float = 1.0) -> tuple[Probes, int]:
    """Flood `srv`'s HTTP port from another process while probing /ready; the probes
    (from `warmup` seconds into the flood) and the connections the flood opened."""
    cmd = [sys.executable, __file__, "--flood-port", str(srv.http_port), "--conns", str(conns),
           "--seconds", str(seconds + warmup), *(["--partial"] if partial else [])]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    probes = Probes()
    try:
        time.sleep(warmup)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            probes.results.append((t0, probe(srv.http_port)))
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))
        out, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return probes, int(out or 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between probe starts")
    ap.add_argument("--partial", action="store_true", help="flood connections send half a request")
    ap.add_argument("--flood-port", type=int, help=argparse.SUPPRESS)  # the flooding process
    args, extra = ap.parse_known_args()
    if args.flood_port:
        print(flood(args.flood_port, args.conns, args.seconds, args.partial))
        return 0
    with tempfile.TemporaryDirectory() as tmp, run_server(
            ["--manifests", str(EXAMPLE), *extra], Path(tmp)) as srv:
        probes, opened = probe_during_flood(srv, args.conns, args.seconds, args.interval, args.partial)
        alive = srv.proc.poll() is None
        after = probe(srv.http_port)
        logs = srv.logs()
    n = len(probes.results)
    print(f"flood: {args.conns} connections, {opened} opened in {args.seconds + 1:.0f} s "
          f"({opened / (args.seconds + 1):.0f}/s)")
    print(f"probe: {probes.passed} of {n} passed ({100 * probes.passed / max(n, 1):.1f}%), "
          f"longest failure run {probes.longest_failure():.1f} s, "
          f"slowest pass {probes.slowest() * 1000:.0f} ms")
    print(f"server: {'alive' if alive else 'DEAD'}, probe after: {'ok' if after is not None else 'FAILED'}, "
          f"tracebacks logged: {logs.count('Traceback')}, log lines: {logs.count(chr(10))}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
