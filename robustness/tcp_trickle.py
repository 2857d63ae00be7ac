#!/usr/bin/env python3
"""TCP connections held mid-message, and a client pipelining in writes that end
mid-message, against a live server.

trickle: connections from a few addresses fill the table; each holds part of a
query, completes it every `--period` seconds and at once starts the next, and
is reopened as soon as the server closes it. Meanwhile another client (another
address, another /24) asks over TCP every 50 ms, one connection per query, 1 s
timeout. Its answer rate is the figure.

pipeline: one connection sends `--queries` queries in writes of `--chunk`
queries each, every write ending in the middle of a query, at `--rate` queries
a second, while reading the answers. The answers received before the connection closes are the figure.

    python robustness/tcp_trickle.py trickle --conns 1000 --addresses 11 --duration 60
    python robustness/tcp_trickle.py pipeline --queries 200000
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import dns.message  # noqa: E402
import dns.query  # noqa: E402
from support.helpers import EXAMPLE, run_server  # noqa: E402

NAME = "web.shop.svc.clusterset.local."
LEGIT = "127.0.200.3"  # the other client: an address and a /24 no trickler uses


def frame(name: str = NAME) -> bytes:
    """One length-prefixed A query."""
    msg = dns.message.make_query(name, "A").to_wire()
    return len(msg).to_bytes(2, "big") + msg


def addresses(n: int, same_net: bool) -> list[str]:
    """`n` loopback source addresses: in one /24, or each in its own."""
    return [f"127.0.0.{i + 2}" if same_net else f"127.{(i + 1) >> 8}.{(i + 1) & 255}.2" for i in range(n)]


class Trickler(threading.Thread):
    """Holds up to `conns` connections, spread over `sources`, each with part of a query
    queued; completes each every `period` seconds; reopens those the server closes."""

    def __init__(self, port: int, sources: list[str], conns: int, period: float) -> None:
        super().__init__(daemon=True)
        self.port, self.sources, self.conns, self.period = port, sources, conns, period
        self.stop = threading.Event()
        self.opened = threading.Event()  # the first `conns` connections were tried
        self.sel = selectors.DefaultSelector()
        self.due: dict[socket.socket, float] = {}  # when to complete its query
        self.source: dict[socket.socket, str] = {}
        self.closed = 0  # connections the server closed
        self.answers = 0  # whole answers' octets are not parsed: answer bytes read
        self.frame = frame()

    def _open(self, src: str, due: float) -> bool:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=1, source_address=(src, 0))
            s.setblocking(False)
            s.send(self.frame[:1])
        except OSError:
            return False
        self.sel.register(s, selectors.EVENT_READ)
        self.due[s], self.source[s] = due, src
        return True

    def _drop(self, s: socket.socket) -> str:
        self.sel.unregister(s)
        s.close()
        del self.due[s]
        self.closed += 1
        return self.source.pop(s)

    def held(self) -> int:
        return len(self.due)

    def run(self) -> None:
        now = time.monotonic()
        lost: list[str] = []
        for i in range(self.conns):
            src = self.sources[i % len(self.sources)]
            if not self._open(src, now + self.period * i / self.conns):
                lost.append(src)
        self.opened.set()
        rest = self.frame[1:] + self.frame[:1]  # completes the query, starts the next
        while not self.stop.is_set():
            for key, _ in self.sel.select(0.02):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    data = s.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    self.answers += len(data)
                else:
                    lost.append(self._drop(s))
            now = time.monotonic()
            for s, due in list(self.due.items()):
                if due <= now:
                    try:
                        s.send(rest)
                        self.due[s] = due + self.period
                    except OSError:
                        lost.append(self._drop(s))
            retry, lost = lost, []
            for src in retry:
                if not self._open(src, now + self.period):
                    lost.append(src)
        for s in list(self.due):
            self.sel.unregister(s)
            s.close()


@dataclass
class Asked:
    """The other client's queries: latencies of those answered, count of those not."""
    lat: list[float] = field(default_factory=list)
    failed: int = 0
    why: Counter[str] = field(default_factory=Counter)  # failures by exception type

    def rate(self) -> float:
        return len(self.lat) / max(1, len(self.lat) + self.failed)


def ask(port: int, duration: float, src: str = LEGIT, interval: float = 0.05,
        timeout: float = 1.0) -> Asked:
    """Ask over TCP (a new connection per query) every `interval` seconds."""
    q = dns.message.make_query(NAME, "A")
    out = Asked()
    end = time.monotonic() + duration
    while time.monotonic() < end:
        t = time.perf_counter()
        try:
            r = dns.query.tcp(q, "127.0.0.1", port=port, timeout=timeout, source=src)
            assert r.answer
            out.lat.append(time.perf_counter() - t)
        except Exception as e:
            out.failed += 1
            out.why[type(e).__name__] += 1
        time.sleep(interval)
    return out


def trickle(port: int, conns: int, sources: list[str], period: float, duration: float,
            settle: float = 1.0, timeout: float = 1.0) -> tuple[Asked, Trickler]:
    """Fill the table with tricklers, wait `settle` s, then ask for `duration` s."""
    t = Trickler(port, sources, conns, period)
    t.start()
    try:
        t.opened.wait(60)
        time.sleep(settle)
        asked = ask(port, duration, timeout=timeout)
    finally:
        t.stop.set()
        t.join()
    return asked, t


@dataclass
class Piped:
    """A pipelined run: queries sent, answers read, whether the server closed first."""
    sent: int = 0
    answered: int = 0
    cut: bool = False
    seconds: float = 0.0


def pipeline(port: int, queries: int, chunk: int, rate: float, timeout: float = 10.0) -> Piped:
    """Send `queries` queries on one connection in writes of `chunk` queries, each write
    but the last ending half-way through a query, at `rate` queries a second (0: as
    fast as the server reads), reading the answers meanwhile."""
    one = frame()
    data = one * queries
    step, first = chunk * len(one), len(one) // 2
    out = Piped()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()

    def read() -> None:
        buf = b""
        try:
            while out.answered < queries:
                got = s.recv(1 << 20)
                if not got:
                    out.cut = True
                    return
                buf += got
                pos = 0
                while len(buf) - pos >= 2:
                    n = int.from_bytes(buf[pos:pos + 2], "big")
                    if len(buf) - pos < 2 + n:
                        break
                    pos += 2 + n
                    out.answered += 1
                buf = buf[pos:]
        except OSError:
            out.cut = True

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for pos in (0, *range(first, len(data), step)):
            end = first if pos == 0 else pos + step
            s.sendall(data[pos:end])
            out.sent = min(queries, end // len(one))
            if rate:
                ahead = out.sent / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
    except OSError:
        out.cut = True
    reader.join()
    out.seconds = time.monotonic() - t0
    s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("trickle")
    tr.add_argument("--conns", type=int, default=1000, help="trickling connections")
    tr.add_argument("--addresses", type=int, default=11, help="their source addresses")
    tr.add_argument("--same-net", action="store_true",
                    help="all addresses in one /24 (default: one /24 each)")
    tr.add_argument("--period", type=float, default=4.0,
                    help="seconds between a connection's completed queries")
    tr.add_argument("--duration", type=float, default=60.0, help="seconds the other client asks")
    tr.add_argument("--limit", type=int, default=1000, help="server --tcp-max-conns")
    pp = sub.add_parser("pipeline")
    pp.add_argument("--queries", type=int, default=200_000)
    pp.add_argument("--chunk", type=int, default=80, help="queries per write")
    pp.add_argument("--rate", type=float, default=20_000, help="queries a second (0: unpaced)")
    for p in (tr, pp):
        p.add_argument("--server-args", default="", help="more `serve` arguments, space-separated")
    args = ap.parse_args()
    extra = args.server_args.split()
    with tempfile.TemporaryDirectory() as tmp:
        if args.cmd == "trickle":
            with run_server(["--manifests", str(EXAMPLE), "--tcp-max-conns", str(args.limit), *extra],
                            Path(tmp)) as srv:
                sources = addresses(args.addresses, args.same_net)
                asked, t = trickle(srv.port, args.conns, sources, args.period, args.duration)
                evicted = srv.metric_sum("mcsdns_tcp_connections_evicted_total")
                timed_out = srv.metric("mcsdns_tcp_connections_timed_out_total")
                alive = srv.proc.poll() is None
            lat = sorted(asked.lat)
            spread = (f", p50 {statistics.median(lat) * 1000:.1f} ms, max {lat[-1] * 1000:.0f} ms"
                      if lat else "")
            print(f"{args.conns} trickling connections from {args.addresses} addresses "
                  f"({'one /24' if args.same_net else 'one /24 each'}), a query completed every "
                  f"{args.period:g} s each, table {args.limit}")
            print(f"other client ({LEGIT}), {args.duration:g} s: {len(lat)} of {len(lat) + asked.failed} "
                  f"answered ({asked.rate():.1%})"
                  + spread
                  + (f"; failures: {dict(asked.why)}" if asked.why else ""))
            print(f"tricklers: {t.closed} connections closed by the server (evicted {evicted:.0f}, "
                  f"timed out {timed_out:.0f}), {t.held()} held at the end")
            ok = alive and asked.rate() >= 0.99
        else:
            with run_server(["--manifests", str(EXAMPLE), *extra], Path(tmp)) as srv:
                got = pipeline(srv.port, args.queries, args.chunk, args.rate)
                alive = srv.proc.poll() is None
            print(f"pipelined {args.queries} queries, {args.chunk} a write ending mid-query, at "
                  f"{args.rate:g}/s: {got.sent} sent, {got.answered} answered in {got.seconds:.1f} s"
                  + (", connection closed by the server" if got.cut else ""))
            ok = alive and got.answered == args.queries
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
