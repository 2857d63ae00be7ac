"""Graceful shutdown (--lameduck): after SIGTERM /ready answers 503 at once, queries are
answered for the lameduck period, then the port is handed to the rest of its SO_REUSEPORT
group and the process exits 0, without a query lost or answered wrongly."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
from support.helpers import EXAMPLE, LIVENESS, REPO, Server, drain, stop_process, wait_for
from support.ports import free_port

from mcsdns.transport.sockets import stop_tcp_intake, stop_udp_intake

# name -> (rcode, A addresses) in examples/clusterset
EXPECTED = {
    "api.shop.svc.clusterset.local.": (dns.rcode.NOERROR, {"10.42.0.20"}),
    "db.shop.svc.clusterset.local.": (dns.rcode.NOERROR, {"10.1.1.10", "10.1.1.11", "10.2.1.10"}),
    "cache.shop.svc.clusterset.local.": (dns.rcode.NOERROR, {"10.1.2.10", "10.3.2.10"}),
    "nothing.shop.svc.clusterset.local.": (dns.rcode.NXDOMAIN, set()),
}
PROTOS = ("udp", "tcp", "kept")
TIMEOUT = 3.0  # a query unanswered this long is lost (a TCP SYN dropped at handoff takes 1 s)


def start(port: int, tmp: Path, *args: str) -> Server:
    """`mcsdns serve` sharing 127.0.0.1:port (--reuse-port), not waited for."""
    http_port = free_port()
    log = tmp / f"mcsdns-{http_port}.log"
    cmd = [sys.executable, "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{port}", "--reuse-port",
           "--health", f"127.0.0.1:{http_port}", "--manifests", str(EXAMPLE), *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return Server(proc, port, http_port, log)


def ready(srv: Server) -> bool:
    try:
        return srv.http("/ready")[0] == 200
    except OSError:
        return False


@contextmanager
def servers(port: int, tmp: Path, n: int, *args: str) -> Iterator[list[Server]]:
    started = [start(port, tmp, *args) for _ in range(n)]
    try:
        for s in started:
            assert wait_for(lambda s=s: ready(s)), s.logs()
        yield started
    finally:
        for s in started:
            if s.proc.poll() is None:
                stop_process(s.proc)


def check(wire: bytes, qid: int, name: str) -> bool:
    """The answer to query `qid` for `name`, and the right one."""
    m = dns.message.from_wire(wire)
    rcode, addrs = EXPECTED[name]
    got = {r.address for rr in m.answer if rr.rdtype == dns.rdatatype.A for r in rr}
    return (m.id == qid and bool(m.flags & dns.flags.QR) and str(m.question[0].name) == name
            and m.rcode() == rcode and got == addrs)


class Load:
    """A steady stream of A queries to one port: UDP from 16 source ports at once, TCP on
    a new connection per query, and TCP on one kept connection ("kept"). Counts sent,
    answered, wrong and lost; a kept connection closed by the server before an answer
    is reopened and the query sent again once, as RFC 7766 asks of clients ("retried")."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.counts: Counter[str] = Counter()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=f) for f in (self._udp, self._tcp, self._kept)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def _count(self, proto: str, outcome: str) -> None:
        with self.lock:
            self.counts[f"{proto} {outcome}"] += 1

    def answered(self) -> int:
        with self.lock:
            return sum(self.counts[f"{p} answered"] for p in PROTOS)

    def by_proto(self) -> dict[str, int]:
        """Answers so far, per protocol."""
        with self.lock:
            return {p: self.counts[f"{p} answered"] for p in PROTOS}

    def flowing(self, since: dict[str, int], n: int = 1) -> bool:
        """At least `n` more answers on every protocol than `since`."""
        now = self.by_proto()
        return all(now[p] >= since[p] + n for p in PROTOS)

    def _queries(self) -> Iterator[tuple[int, str, bytes]]:
        for i, name in zip(itertools.count(), itertools.cycle(EXPECTED)):
            q = dns.message.make_query(name, "A", use_edns=False)
            q.id = i & 0xFFFF
            q.flags &= ~dns.flags.RD
            yield q.id, name, q.to_wire()

    def _udp(self) -> None:
        """Rounds of 16 queries in flight, one per source port, so that the servers'
        sockets have datagrams queued when one of them is closed."""
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
        queries = self._queries()
        try:
            while not self.stop.is_set():
                batch = [(s, *next(queries)) for s in socks]
                for s, _qid, _name, wire in batch:
                    self._count("udp", "sent")
                    s.sendto(wire, ("127.0.0.1", self.port))
                deadline = time.monotonic() + TIMEOUT
                for s, qid, name, _wire in batch:
                    try:
                        while True:  # skip a late answer to an earlier query
                            s.settimeout(max(0.001, deadline - time.monotonic()))
                            data = s.recv(65535)
                            if dns.message.from_wire(data).id == qid:
                                break
                        self._count("udp", "answered" if check(data, qid, name) else "wrong")
                    except TimeoutError:
                        self._count("udp", "lost")
                time.sleep(0.002)
        finally:
            for s in socks:
                s.close()

    def _tcp(self) -> None:
        for qid, name, wire in self._queries():
            if self.stop.is_set():
                return
            self._count("tcp", "sent")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT) as s:
                    s.sendall(len(wire).to_bytes(2, "big") + wire)
                    f = s.makefile("rb")
                    n = int.from_bytes(f.read(2), "big")
                    data = f.read(n)
                ok = len(data) == n > 0 and check(data, qid, name)
                self._count("tcp", "answered" if ok else "wrong")
            except OSError:
                self._count("tcp", "lost")
            time.sleep(0.005)


    def _kept(self) -> None:
        conn: socket.socket | None = None
        try:
            for qid, name, wire in self._queries():
                if self.stop.is_set():
                    return
                self._count("kept", "sent")
                for attempt in range(2):
                    try:
                        if conn is None:
                            conn = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
                        conn.sendall(len(wire).to_bytes(2, "big") + wire)
                        head = conn.recv(2, socket.MSG_WAITALL)
                        data = conn.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL) if head else b""
                        if len(head) == 2 and data:
                            self._count("kept", "answered" if check(data, qid, name) else "wrong")
                            break
                        raise ConnectionResetError
                    except OSError:
                        if conn is not None:
                            conn.close()
                            conn = None
                        if attempt == 0:
                            self._count("kept", "retried")
                        else:
                            self._count("kept", "lost")
                time.sleep(0.005)
        finally:
            if conn is not None:
                conn.close()


def figures(c: Counter[str]) -> str:
    return ", ".join(f"{p} {k} {c[f'{p} {k}']}" for p in PROTOS
                     for k in ("sent", "answered", "wrong", "lost")) + f", kept retried {c['kept retried']}"


def sigterm_and_wait(srv: Server, load: Load, lameduck: float) -> float:
    """SIGTERM `srv`: /ready 503 at once, queries answered meanwhile, exit 0. Its run time."""
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: srv.http("/ready")[0] == 503), srv.logs()
    before = load.answered()
    assert srv.proc.wait(lameduck + 10) == 0, srv.logs()
    assert load.answered() > before
    assert "/ready answers 503" in srv.logs()
    return time.monotonic() - t0


def through_lameduck(srv: Server, load: Load, period: float, exit_within: float,
                     tcp_query: bool = False) -> None:
    """SIGTERM to `srv` under `load`: /ready says 503, queries keep being answered (UDP and
    TCP) while well within `period`, then exit 0, no sooner than its end."""
    time.sleep(0.3)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: srv.http("/ready")[0] == 503), srv.logs()
    before = load.by_proto()
    time.sleep(period / 2)
    if time.monotonic() - t0 < period * 0.75:  # well within the period (a busy machine may be past it)
        assert srv.proc.poll() is None
        if tcp_query:
            assert srv.query("api.shop.svc.clusterset.local", tcp=True).answer
    assert load.flowing(before), figures(load.counts)  # still answering, UDP and TCP
    assert srv.proc.wait(exit_within) == 0, srv.logs()
    assert time.monotonic() - t0 >= period  # not before the period ended (load only delays this)


def test_one_server_answers_through_lameduck(tmp_path: Path) -> None:
    """Alone on its port: answered for the whole period after SIGTERM, then exit 0."""
    port = free_port()
    with servers(port, tmp_path, 1, "--lameduck", "2") as (srv,), Load(port) as load:
        through_lameduck(srv, load, 2.0, 10, tcp_query=True)
    assert not any(load.counts[f"{p} wrong"] for p in PROTOS), figures(load.counts)


def test_second_signal_stops_at_once(tmp_path: Path) -> None:
    port = free_port()
    with servers(port, tmp_path, 1, "--lameduck", "30") as (srv,):
        srv.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: srv.http("/ready")[0] == 503), srv.logs()
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGINT)
        assert srv.proc.wait(20) == 0, srv.logs()  # well before the 30 s lameduck period ends
        print(f"\nexited {time.monotonic() - t0:.2f} s after the second signal")


def test_sigterm_one_of_two_loses_nothing(tmp_path: Path) -> None:
    """Traffic on every protocol before the signal, through the hand-over and after it, as
    much as this machine sends (no fixed floor: a slow run sends fewer, and must lose none)."""
    port = free_port()
    with servers(port, tmp_path, 2, "--lameduck", "1") as (a, b), Load(port) as load:
        assert wait_for(lambda: load.flowing(dict.fromkeys(PROTOS, 0), 20)), figures(load.counts)
        at_signal = load.by_proto()
        sigterm_and_wait(a, load, 1)
        assert load.flowing(at_signal), figures(load.counts)  # answered through the hand-over
        after = load.by_proto()
        assert wait_for(lambda: load.flowing(after, 20)) and ready(b)  # the other one answers on
    print(f"\nSIGTERM one of two: {figures(load.counts)}")
    for proto in PROTOS:
        assert load.counts[f"{proto} lost"] == load.counts[f"{proto} wrong"] == 0, figures(load.counts)


def test_rolling_restart_loses_nothing(tmp_path: Path) -> None:
    """3 times: start a server on the port, wait until ready, SIGTERM the oldest."""
    port = free_port()
    live: list[Server] = []
    try:
        with servers(port, tmp_path, 1, "--lameduck", "1") as first, Load(port) as load:
            live += first
            for _ in range(3):
                new = start(port, tmp_path, "--lameduck", "1")
                live.append(new)
                assert wait_for(lambda new=new: ready(new)), new.logs()
                time.sleep(0.3)
                sigterm_and_wait(live.pop(0), load, 1)
            time.sleep(0.3)
    finally:  # after the load stopped: the last one started, and any a failure left
        for s in live:
            if s.proc.poll() is None:
                stop_process(s.proc)
    c = load.counts
    sent, answered = (sum(c[f"{p} {k}"] for p in PROTOS) for k in ("sent", "answered"))
    lost = sum(c[f"{p} lost"] for p in PROTOS)
    print(f"\nrolling restart x3: sent {sent}, answered {answered}, lost {lost} ({figures(c)})")
    assert not any(c[f"{p} {k}"] for p in PROTOS for k in ("lost", "wrong")), figures(c)
    assert answered == sent


def test_workers_lameduck(tmp_path: Path) -> None:
    """--workers: the supervisor's /ready is 503 at once, the workers answer through the
    period, then everything exits 0."""
    port = free_port()
    with servers(port, tmp_path, 1, "--workers", "2", "--lameduck", "2") as (srv,), \
            Load(port) as load:
        through_lameduck(srv, load, 2.0, 15)
    assert not any(load.counts[f"{p} wrong"] for p in PROTOS), figures(load.counts)


def group(kind: socket.SocketKind, port: int, n: int = 2) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", port))
        s.setblocking(False)
        if kind == socket.SOCK_STREAM:
            s.listen(64)
        out.append(s)
    return out


def test_udp_intake_stops_and_the_queue_stays_readable() -> None:
    """What the hand-over relies on: closing a UDP socket of a SO_REUSEPORT group drops its
    queued datagrams; after stop_udp_intake the group's other socket gets every new one,
    and what was queued is still read."""
    port = free_port()
    a, b = group(socket.SOCK_DGRAM, port)
    clients = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(32)]
    try:
        def send(tag: bytes) -> None:
            for i, c in enumerate(clients):
                c.sendto(tag + b"%d" % i, ("127.0.0.1", port))
            time.sleep(0.1)

        send(b"before")
        on_a = len(drain(a))
        assert 0 < on_a < len(clients) and on_a + len(drain(b)) == len(clients)  # spread over both
        send(b"queued")
        stop_udp_intake(a.fileno())
        send(b"after")
        kept, got_b = drain(a), drain(b)
        assert kept and all(d.startswith(b"queued") for d in kept)
        assert len([d for d in got_b if d.startswith(b"after")]) == len(clients)
        assert len(kept) + len(got_b) == 2 * len(clients)  # none lost
        a.close()
        b.close()
        c, d = group(socket.SOCK_DGRAM, port)  # the same without stop_udp_intake
        send(b"dropped")
        c.close()
        assert len(drain(d)) < len(clients)
        d.close()
    finally:
        for s in (a, b, *clients):
            s.close()


def test_tcp_intake_stops_without_resetting_a_handshake() -> None:
    """After stop_tcp_intake a listener accepts nothing new (dropped SYNs are retransmitted
    and reach the other listener once it is closed); connections queued before are kept."""
    port = free_port()
    a, b = group(socket.SOCK_STREAM, port)
    conns: list[socket.socket] = []
    try:
        def connect(n: int) -> None:
            for _ in range(n):
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", port))
                conns.append(c)
            time.sleep(0.1)

        connect(16)
        stop_tcp_intake(a.fileno())
        connect(16)

        def accept(s: socket.socket) -> int:
            n = 0
            while True:
                try:
                    s.accept()[0].close()
                    n += 1
                except BlockingIOError:
                    return n

        on_a, on_b = accept(a), accept(b)
        assert 0 < on_a < 16 and on_a + on_b < 32  # A got none of the second 16
        a.close()
        total = on_a + on_b
        deadline = time.monotonic() + LIVENESS
        while total < 32 and time.monotonic() < deadline:
            total += accept(b)
            time.sleep(0.05)
        assert total == 32  # every attempt accepted once (the dropped SYNs within 1-3 s)
    finally:
        for s in (a, b, *conns):
            s.close()
