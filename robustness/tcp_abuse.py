#!/usr/bin/env python3
"""TCP abuse against a live server, with figures: idle and slow clients, connections
beyond the limit, while UDP queries are timed throughout; then one client
(127.0.0.2) holding as many idle connections as it can, reconnecting as they
close, while another (127.0.0.3) asks over TCP.

    python robustness/tcp_abuse.py --conns 1500 --limit 1000
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import dns.message  # noqa: E402
import dns.query  # noqa: E402
from support.helpers import EXAMPLE, Server, run_server  # noqa: E402


def starve(port: int, conns: int, hold: float, query: bytes) -> tuple[list[float], int]:
    """Client A (127.0.0.2) holds up to `conns` idle connections for `hold` seconds and
    reopens those the server closes; client B (127.0.0.3) asks over TCP every 50 ms.
    B's answer latencies and failures."""
    stop, opened = threading.Event(), threading.Event()
    held: list[socket.socket] = []

    def connect() -> None:
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=1,
                                                 source_address=("127.0.0.2", 0)))
        except OSError:
            pass

    def hog() -> None:
        for _ in range(conns):
            connect()
        opened.set()
        while not stop.is_set():
            for s in list(held):
                s.setblocking(False)
                try:
                    if s.recv(1) != b"":
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                s.close()
                held.remove(s)
                connect()
            stop.wait(0.2)

    th = threading.Thread(target=hog)
    th.start()
    opened.wait(30)
    q = dns.message.from_wire(query)
    lat: list[float] = []
    failed = 0
    end = time.monotonic() + hold
    while time.monotonic() < end:
        t = time.perf_counter()
        try:
            dns.query.tcp(q, "127.0.0.1", port=port, timeout=1, source="127.0.0.3")
            lat.append(time.perf_counter() - t)
        except Exception:
            failed += 1
        time.sleep(0.05)
    stop.set()
    th.join()
    for s in held:
        s.close()
    return lat, failed


class UDPProber:
    """Times a UDP query every 5 ms in a thread until `stop()`."""

    def __init__(self, port: int, q: dns.message.Message) -> None:
        self.port, self.q = port, q
        self.lat: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run)
        self._th.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                r = dns.query.udp(self.q, "127.0.0.1", port=self.port, timeout=1)
                assert r.answer
                self.lat.append(time.perf_counter() - t)
            except Exception:
                self.failures += 1
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._th.join()


def open_conns(addr: tuple[str, int], n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(addr, timeout=2))
        except OSError:
            pass
    return socks


def trickle(slow: list[socket.socket], frame: bytes) -> None:
    """The first three octets of `frame` on each slow connection, one a second."""
    for i in range(3):
        for s in slow:
            try:
                s.send(frame[i:i + 1])
            except OSError:
                pass
        time.sleep(1)


def still_open(socks: list[socket.socket]) -> int:
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                continue
        except BlockingIOError:
            n += 1
        except OSError:
            continue
    return n


def closed_at_limits(srv: Server) -> tuple[float, float]:
    """(refused or evicted at the limits, timed out) from the server's metrics."""
    rejected = sum(srv.metric(m) for m in (
        "mcsdns_tcp_connections_rejected_total", "mcsdns_tcp_connections_client_refused_total",
        'mcsdns_tcp_connections_evicted_total{limit="client"}',
        'mcsdns_tcp_connections_evicted_total{limit="total"}'))
    return rejected, srv.metric("mcsdns_tcp_connections_timed_out_total")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--conns", type=int, default=1500, help="TCP connections to open")
    ap.add_argument("--limit", type=int, default=1000, help="server --tcp-max-conns")
    ap.add_argument("--slow", type=int, default=50, help="slow clients (one byte a second)")
    ap.add_argument("--idle-timeout", type=float, default=3)
    ap.add_argument("--read-timeout", type=float, default=2)
    ap.add_argument("--per-client", type=int, help="server --tcp-max-conns-per-client (default: its own)")
    ap.add_argument("--hold", type=float, default=6, help="seconds the one client holds its connections")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    per_client = ["--tcp-max-conns-per-client", str(args.per_client)] if args.per_client else []
    with tempfile.TemporaryDirectory() as tmp, run_server(
            ["--manifests", str(EXAMPLE), "--tcp-max-conns", str(args.limit),
             "--tcp-idle-timeout", str(args.idle_timeout),
             "--tcp-read-timeout", str(args.read_timeout), *per_client], Path(tmp)) as srv:
        q = dns.message.make_query("web.shop.svc.clusterset.local.", "A")
        prober = UDPProber(srv.port, q)
        t0 = time.monotonic()
        socks = open_conns(srv.addr, args.conns)
        msg = q.to_wire()
        trickle(socks[:args.slow], len(msg).to_bytes(2, "big") + msg)
        time.sleep(max(args.idle_timeout, args.read_timeout) + 1)
        open_after = still_open(socks)
        elapsed = time.monotonic() - t0
        prober.stop()
        rejected, timed_out = closed_at_limits(srv)
        for s in socks:
            s.close()
        b_lat, b_failed = starve(srv.port, args.conns, args.hold, msg)
        alive = srv.proc.poll() is None
    lat = sorted(prober.lat)
    print(f"opened {len(socks)} TCP connections (limit {args.limit}), {args.slow} slow at 1 byte/s")
    print(f"refused or closed at the limits: {rejected:.0f}; closed idle/slow: {timed_out:.0f}; "
          f"still open after {elapsed:.1f} s: {open_after}")
    if lat:
        print(f"UDP during the abuse: {len(lat)} answered, {prober.failures} failed, "
              f"p50 {statistics.median(lat) * 1000:.2f} ms, p99 {lat[int(len(lat) * 0.99)] * 1000:.2f} ms, "
              f"max {lat[-1] * 1000:.2f} ms")
    b_lat.sort()
    print(f"other client's TCP answer while one client holds its limit ({args.hold:g} s, "
          f"{args.conns} connections tried): {len(b_lat)} answered, {b_failed} failed"
          + (f", p50 {statistics.median(b_lat) * 1000:.2f} ms, max {b_lat[-1] * 1000:.2f} ms"
             if b_lat else ""))
    ok = (alive and prober.failures == 0 and open_after == 0 and rejected >= len(socks) - args.limit
          and b_failed == 0)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
