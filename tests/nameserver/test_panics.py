"""An internal error while answering is never silent: the query gets SERVFAIL (its ID,
question and EDNS echoed), `mcsdns_panics_total` counts it, and a flood of them
logs one traceback, not one per query. An answer that fails to render is kept as
that SERVFAIL, so asking again costs a lookup; a zone transfer that fails to start
is that SERVFAIL too. The faults are bugs planted in a
real `mcsdns serve` process (a sitecustomize), asked over real UDP (batched and
plain) and TCP sockets."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.helpers import EXAMPLE, Server, run_server  # noqa: E402

BOOM = "boom.shop.svc.clusterset.local"  # looking it up raises: every query
CRASH = "crash.shop.svc.clusterset.local"  # rendering its answer raises: once
FAULT = """\
import os, sys
sys.path.insert(0, os.getcwd())  # the checkout the server runs from
from mcsdns.nameserver import cache, xfr
from mcsdns.zone import zone

_lookup, _answer, _stream = cache.ResponseCache.lookup, zone.Zone.answer, xfr.Transfers.stream

def lookup(self, q):
    if q.startswith(b"\\x04boom"):
        raise RuntimeError("planted lookup bug")
    return _lookup(self, q)

def answer(self, qname, tail):
    if qname.startswith(b"\\x05crash"):
        raise RuntimeError("planted render bug")
    return _answer(self, qname, tail)

def stream(self, msg, peer):
    if b"\\x05crash" in msg and msg.endswith(b"\\x00\\xfc\\x00\\x01"):  # AXFR, no EDNS
        raise RuntimeError("planted transfer bug")
    return _stream(self, msg, peer)

cache.ResponseCache.lookup = lookup
zone.Zone.answer = answer
xfr.Transfers.stream = stream
"""


def _flood(srv: Server, name: str, n: int) -> int:
    """SERVFAIL answers with the right ID to `n` UDP queries for `name`."""
    q = dns.message.make_query(name, "A", use_edns=0, payload=1232)
    got = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        for i in range(n):
            q.id = i
            s.sendto(q.to_wire(), srv.addr)
            r = dns.message.from_wire(s.recv(4096))
            got += r.id == i and r.rcode() == dns.rcode.SERVFAIL and r.question == q.question
    return got


@pytest.mark.parametrize("batchio", ["1", "0"])
def test_internal_error_answers_servfail_counted_and_logged_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batchio: str) -> None:
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(FAULT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fault"))
    monkeypatch.setenv("MCSDNS_BATCHIO", batchio)
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        for name in (BOOM, CRASH):
            for tcp in (False, True):
                r = srv.query(name, tcp=tcp, edns=0)  # dnspython checks the ID and question
                assert r.rcode() == dns.rcode.SERVFAIL and r.flags & dns.flags.QR, r
                assert r.edns == 0 and not r.answer
        n = 200
        assert _flood(srv, BOOM, n) == n
        assert srv.metric("mcsdns_panics_total") == n + 2 + 1  # and the one render
        assert _flood(srv, CRASH, n) == n
        assert srv.metric("mcsdns_panics_total") == n + 2 + 1  # kept: not rendered again
        # a zone transfer that fails to start: SERVFAIL, and the connection goes on
        axfr = dns.message.make_query(CRASH, "AXFR")
        with socket.create_connection(srv.addr, timeout=3) as c:
            for m in (axfr, dns.message.make_query(CRASH, "A")):
                dns.query.send_tcp(c, m)
                r, _ = dns.query.receive_tcp(c)
                assert r.id == m.id and r.rcode() == dns.rcode.SERVFAIL, r
        assert srv.metric("mcsdns_panics_total") == n + 2 + 1 + 1
        ok = srv.query("web.shop.svc.clusterset.local")
        assert ok.rcode() == dns.rcode.NOERROR and ok.answer
        logs = srv.logs()
        # one traceback for 204 errors (the second within a minute is counted, not logged)
        assert logs.count("RuntimeError: planted") == 1, logs
        assert "internal error answering" in logs


def test_batched_io_sends_what_on_error_returns() -> None:
    """_batchio.serve(): when respond raises, on_error's bytes are sent to that client, its
    None sends nothing, and the other queries of the batch are answered as usual."""
    batchio = pytest.importorskip("mcsdns.transport._batchio")
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with server, client:
        server.setblocking(False)
        client.settimeout(1)

        def respond(data: bytes, tcp: bool) -> bytes | None:
            if data.startswith(b"boom"):
                raise RuntimeError(data.decode())
            return b"ok " + data

        seen: list[str] = []

        def on_error(data: bytes, exc: BaseException) -> bytes | None:
            seen.append(str(exc))
            return None if data.endswith(b"quiet") else b"failed " + data

        for q in (b"one", b"boom loud", b"boom quiet", b"two"):
            client.send(q)
        n, _, unsent = batchio.serve(server.fileno(), respond, on_error, None, None)
        assert n == 4 and unsent is None
        assert [client.recv(100) for _ in range(3)] == [b"ok one", b"failed boom loud", b"ok two"]
        assert seen == ["boom loud", "boom quiet"]
        client.send(b"boom again")
        with pytest.raises(TypeError):
            batchio.serve(server.fileno(), respond, lambda d, e: 42, None, None)
