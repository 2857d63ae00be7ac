"""The UDP hot path on both implementations (recvmmsg/sendmmsg, and plain
recvfrom/sendto with MCSDNS_BATCHIO=0): bursts from many sockets each get
their own answers, counts and the request duration histogram add up."""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.message
import dns.rcode
import pytest
from support.helpers import EXAMPLE, UDP_PATHS, Server, drain, example_app, run_server_on_path

from mcsdns.nameserver.handler import Handler

SVC = "web.shop.svc.clusterset.local."
NX = "nope.shop.svc.clusterset.local."


@pytest.fixture(params=UDP_PATHS)
def srv(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    with run_server_on_path(request.param, ["--manifests", str(EXAMPLE)], tmp_path, monkeypatch) as s:
        s.path = request.param  # type: ignore[attr-defined]
        yield s


def test_the_chosen_path_is_reported(srv: Server) -> None:
    # scripts/test builds the extension: where it runs, the batched path must be in use
    assert srv.metric("mcsdns_udp_batch_io") == (1 if srv.path == "batched" else 0)  # type: ignore[attr-defined]


def test_burst_from_many_sockets_each_gets_its_own_answers(srv: Server) -> None:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(8)]
    sent: dict[tuple[int, int], tuple[str, int, bool]] = {}  # (socket, id) -> (name, EDNS size, EDNS?)
    try:
        for i in range(300):  # fired without waiting: the server reads them in batches
            k = i % len(socks)
            name = (SVC, NX, "db.shop.svc.clusterset.local.")[i % 3]
            edns = i % 2 == 0
            q = dns.message.make_query(name, "A", use_edns=0 if edns else False, payload=512 + i)
            q.id = i
            q.flags &= ~dns.flags.RD
            socks[k].sendto(q.to_wire(), srv.addr)
            sent[(k, i)] = (name, 512 + i, edns)
        got: dict[tuple[int, int], dns.message.Message] = {}
        deadline = time.monotonic() + 10
        while len(got) < len(sent) and time.monotonic() < deadline:
            ready, _, _ = select.select(socks, [], [], 0.5)
            for s in ready:
                wire = s.recv(65535)
                got[(socks.index(s), struct.unpack("!H", wire[:2])[0])] = dns.message.from_wire(wire)
    finally:
        for s in socks:
            s.close()
    assert set(got) == set(sent)  # every answer came back to the socket that asked, with its ID
    for key, (name, _, edns) in sent.items():
        r = got[key]
        assert r.question[0].name.to_text() == name
        assert r.rcode() == (dns.rcode.NXDOMAIN if name == NX else dns.rcode.NOERROR)
        assert (r.edns >= 0) == edns
    udp = sum(srv.metric(f'mcsdns_dns_responses_total{{proto="udp",rcode="{rc}",type="A"}}')
              for rc in ("NOERROR", "NXDOMAIN"))
    assert udp >= 300
    assert srv.metric('mcsdns_dns_request_duration_seconds_count{proto="udp"}') == udp
    assert srv.metric('mcsdns_dns_request_duration_seconds_bucket{le="+Inf",proto="udp"}') == udp
    assert 0 < srv.metric('mcsdns_dns_request_duration_seconds_sum{proto="udp"}') < udp



@contextmanager
def _udp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A non-blocking server socket on 127.0.0.1 and a client with a 2 s timeout."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        server.bind(("127.0.0.1", 0))
        server.setblocking(False)
        client.settimeout(2)
        yield server, client


def test_extension_survives_a_failing_answer_and_drops_none() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.transport import _batchio as batchio
    with _udp_pair() as (server, client):
        for msg in (b"ok-1", b"boom", b"none", b"ok-2"):
            client.sendto(msg, server.getsockname())
        time.sleep(0.1)
        errors: list[tuple[bytes, BaseException]] = []

        def respond(data: bytes, tcp: bool) -> bytes | None:
            if data == b"boom":
                raise ValueError("bad packet")
            return None if data == b"none" else data.upper()

        n, elapsed, unsent = batchio.serve(server.fileno(), respond, lambda d, e: errors.append((d, e)))
        assert (n, unsent) == (4, None) and elapsed > 0
        assert [client.recv(100) for _ in range(2)] == [b"OK-1", b"OK-2"]
        assert len(errors) == 1 and errors[0][0] == b"boom" and isinstance(errors[0][1], ValueError)
        assert batchio.serve(server.fileno(), respond, lambda d, e: errors.append((d, e))) == (0, 0, None)


def test_extension_returns_what_the_socket_would_not_take() -> None:
    # A Unix datagram pair with the smallest send buffer: answers beyond it get EAGAIN.
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.transport import _batchio as batchio
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with server, client:
        server.setblocking(False)
        client.setblocking(False)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
        for i in range(40):
            client.send(b"%02d" % i)
        n, _, unsent = batchio.serve(server.fileno(), lambda d, tcp: d * 500, print)
        assert n == 40 and unsent and len(unsent) < 40
        got = drain(client)
        while unsent:
            done = batchio.send(server.fileno(), unsent)
            assert done > 0
            del unsent[:done]
            got += drain(client)
        assert got == [b"%02d" % i * 500 for i in range(40)]  # all of them, in order


def test_listener_waits_for_a_full_socket_and_sends_everything() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.nameserver.panics import Panics
    from mcsdns.transport import _batchio as batchio
    from mcsdns.transport.udp import BatchedUDP, RequestTimer

    async def run() -> list[bytes]:
        server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        server.setblocking(False)
        client.setblocking(False)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
        listener = BatchedUDP(asyncio.get_running_loop(), server, lambda d, tcp: d * 500, Panics(),
                              RequestTimer(), batchio)
        got: list[bytes] = []
        try:
            for i in range(100):
                client.send(b"%03d" % i)
                if i % 30 == 29:
                    await asyncio.sleep(0.01)  # let the listener answer into a full socket
            await asyncio.sleep(0.02)
            assert listener.unsent  # nothing read yet: answers wait for the socket
            deadline = time.monotonic() + 5
            while len(got) < 100 and time.monotonic() < deadline:
                got += drain(client)
                await asyncio.sleep(0.005)
        finally:
            listener.close()
            client.close()
        return got

    assert asyncio.run(run()) == [b"%03d" % i * 500 for i in range(100)]


def _example_handler() -> Handler:
    return example_app().handler


def test_cache_hits_are_answered_in_c_as_respond_would() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.transport import _batchio as batchio
    handler = _example_handler()
    calls: list[bytes] = []

    def respond(data: bytes, tcp: bool) -> bytes | None:
        calls.append(data)
        return handler.respond(data, tcp)

    db = "db.shop.svc.clusterset.local."
    asks = [(SVC, "A", False), (SVC, "A", True), (NX, "A", False), (SVC, "SRV", True), (db, "A", False),
            (db, "A", True)]
    rounds: list[list[dns.message.Message]] = []
    with _udp_pair() as (server, client):
        for rnd in range(4):
            for i, (name, rtype, edns) in enumerate(asks):
                q = dns.message.make_query(name, rtype, use_edns=0 if edns else False)
                q.id = 100 * rnd + i
                client.sendto(q.to_wire(), server.getsockname())
            time.sleep(0.05)
            n, _, unsent = batchio.serve(server.fileno(), respond, print, handler.cache.tables[False],
                                         handler.cache.serial)
            assert (n, unsent) == (len(asks), None)
            got = sorted((dns.message.from_wire(client.recv(4096)) for _ in asks), key=lambda m: m.id)
            assert [m.id for m in got] == [100 * rnd + i for i in range(len(asks))]
            rounds.append(got)
    for m, (name, _, _) in zip(rounds[0], asks, strict=True):  # answers from the data, not SERVFAIL
        assert m.rcode() == (dns.rcode.NXDOMAIN if name == NX else dns.rcode.NOERROR)
        assert bool(m.answer) == (name != NX)
    assert len(calls) == len(asks)  # only the first round reached respond(): the rest were cache hits
    first = rounds[0]
    for got in rounds[1:]:
        for i, (name, _, edns) in enumerate(asks):
            assert got[i].question == first[i].question and got[i].rcode() == first[i].rcode()
            assert (got[i].edns >= 0) == edns and got[i].flags == first[i].flags
            if name != db:
                assert got[i].answer == first[i].answer and got[i].authority == first[i].authority
    for i in (4, 5):  # the headless answer rotates through its endpoints, hit after hit
        orders = [tuple(rd.to_text() for rr in got[i].answer for rd in rr) for got in rounds]
        assert len(set(orders)) > 1 and len({frozenset(o) for o in orders}) == 1
    counts = handler.cache.responses(False)
    assert sum(counts.values()) == 4 * len(asks)  # hits in C count like any other response
    assert handler.cache.hits() == 3 * len(asks)


def test_cache_entries_the_c_path_cannot_send_go_to_respond() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.nameserver.response import Canned
    from mcsdns.transport import _batchio as batchio

    table: dict[bytes, object] = {b"-big": Canned(b"x" * 70_000, ("A", "NOERROR"), 70_002),
                                  b"-odd": "not a Canned", b"-ok": Canned(b"cached", ("A", "NOERROR"), 8)}
    with _udp_pair() as (server, client):
        for msg in (b"01-big", b"02-odd", b"03-ok", b"04"):
            client.sendto(msg, server.getsockname())
        time.sleep(0.05)
        # a table entry that is no Canned, on purpose: the C side must pass it by
        n, _, _ = batchio.serve(server.fileno(), lambda d, tcp: b"R" + d, print, table)  # type: ignore[type-var]
        assert n == 4
        assert sorted(client.recv(100) for _ in range(4)) == [b"03cached", b"R01-big", b"R02-odd", b"R04"]
        with pytest.raises(TypeError):
            batchio.serve(server.fileno(), print, print, [])  # type: ignore[arg-type]  # on purpose


def test_hits_counter_saturates_instead_of_overflowing() -> None:
    """An entry at sys.maxsize hits (as after 2**63 answers) is still sent from C and its
    counter stays there (was: a signed overflow, undefined; UBSan aborts, else it wraps
    to a negative count)."""
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.nameserver.response import Canned
    from mcsdns.transport import _batchio as batchio

    c = Canned(b"cached", ("A", "NOERROR"), 8)
    c.hits = sys.maxsize - 1
    with _udp_pair() as (server, client):
        for i in range(3):
            client.sendto(b"%02d-ok" % i, server.getsockname())
        time.sleep(0.05)
        n, _, _ = batchio.serve(server.fileno(), lambda d, tcp: None, print, {b"-ok": c})
        assert n == 3
        assert sorted(client.recv(100) for _ in range(3)) == [b"00cached", b"01cached", b"02cached"]
    assert c.hits == sys.maxsize


def test_response_cache_works_without_the_extension() -> None:
    # where _batchio is not built, response.Canned gets its fields from mcsdns.nameserver._canned
    code = """
import sys
sys.modules["mcsdns.transport._batchio"] = None  # as if it were not built
sys.path.insert(0, "tests")
import dns.message
from mcsdns.nameserver import response
from support.helpers import example_app
assert response.Canned.__mro__[1].__module__ == "mcsdns.nameserver._canned"
h = example_app().handler
orders = set()
for i in range(4):
    q = dns.message.make_query("db.shop.svc.clusterset.local.", "A")
    q.id = i
    r = dns.message.from_wire(h.respond(q.to_wire(), False))
    assert r.id == i and r.answer
    orders.add(tuple(rd.to_text() for rr in r.answer for rd in rr))
assert len(orders) > 1 and h.cache.hits() == 3 and sum(h.cache.responses(False).values()) == 4
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_zone_change_keeps_other_cached_answers_and_negatives_get_the_new_serial() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.transport import _batchio as batchio
    app = example_app()
    handler = app.handler
    calls: list[bytes] = []

    def respond(data: bytes, tcp: bool) -> bytes | None:
        calls.append(data)
        return handler.respond(data, tcp)

    new = "new.shop.svc.clusterset.local."
    asks = [(SVC, "A", False), (SVC, "AAAA", True), (NX, "A", False), (new, "A", True)]

    def ask(server: socket.socket, client: socket.socket) -> list[dns.message.Message]:
        for i, (name, rtype, edns) in enumerate(asks):
            q = dns.message.make_query(name, rtype, use_edns=0 if edns else False)
            q.id = i
            client.sendto(q.to_wire(), server.getsockname())
        time.sleep(0.05)
        cache = handler.cache
        n, _, _ = batchio.serve(server.fileno(), respond, print, cache.tables[False], cache.serial)
        assert n == len(asks)
        return sorted((dns.message.from_wire(client.recv(4096)) for _ in asks), key=lambda m: m.id)

    with _udp_pair() as (server, client):
        ask(server, client)
        before = ask(server, client)  # all four from the cache now
        assert len(calls) == len(asks)
        serial0 = app.zone.serial
        assert [m.rcode() for m in before] == [dns.rcode.NOERROR, dns.rcode.NOERROR, dns.rcode.NXDOMAIN,
                                               dns.rcode.NXDOMAIN]
        assert all(m.authority[0][0].serial == serial0 for m in before[1:])
        app.store.apply([{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                          "metadata": {"name": "new", "namespace": "shop"},
                          "spec": {"type": "ClusterSetIP", "ips": ["10.42.9.9"],
                                   "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}], [])
        assert app.zone.serial != serial0
        calls.clear()
        after = ask(server, client)
    # the new name was NXDOMAIN in the cache: now it answers; nothing else was asked again
    assert after[3].rcode() == dns.rcode.NOERROR and after[3].answer[0][0].address == "10.42.9.9"
    assert len(calls) == 1 and b"\x03new" in calls[0]
    assert after[0].answer == before[0].answer
    # the negative answers still cached (NODATA, NXDOMAIN) carry the new serial
    assert [m.rcode() for m in after[1:3]] == [dns.rcode.NOERROR, dns.rcode.NXDOMAIN]
    assert [m.authority[0][0].serial for m in after[1:3]] == [app.zone.serial] * 2
    # and so does the Python path (TCP, and the plain UDP path)
    q = dns.message.make_query(NX, "A")
    for tcp in (False, True, True):
        r = dns.message.from_wire(handler.respond(q.to_wire(), tcp) or b"")
        assert r.rcode() == dns.rcode.NXDOMAIN and r.authority[0][0].serial == app.zone.serial


def _sockaddr(sock: socket.socket) -> bytes:
    """The raw struct sockaddr_in of a bound socket's port on 127.0.0.1, as serve() reports addresses."""
    port = sock.getsockname()[1]
    return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton("127.0.0.1"))


def test_respond_that_calls_the_extension_again_gets_runtime_error() -> None:
    # serve() and send() share static buffers: a nested call would overwrite the queries,
    # addresses and answers of the batch in progress
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.transport import _batchio as batchio
    with _udp_pair() as (server, client), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(("127.0.0.1", 0))
        other.settimeout(2)
        addr = server.getsockname()

        def ask(first: int) -> None:
            for i in range(first, first + 3):
                client.sendto(b"c%d" % i, addr)
                other.sendto(b"o%d" % i, addr)

        errors: list[str] = []

        def respond(data: bytes, tcp: bool) -> bytes | None:
            if data == b"c1":  # more queries arrive; respond() tries to answer them itself
                ask(3)
                for call in (lambda: batchio.serve(server.fileno(), respond, print),
                             lambda: batchio.send(server.fileno(), [(b"stray", _sockaddr(other))])):
                    try:
                        call()
                    except RuntimeError as e:
                        errors.append(str(e))
            return b"R" + data

        ask(0)
        time.sleep(0.05)
        assert batchio.serve(server.fileno(), respond, print)[::2] == (6, None)
        assert batchio.serve(server.fileno(), respond, print)[::2] == (6, None)  # the ones that came later
        other.setblocking(False)
        assert [client.recv(100) for _ in range(6)] == [b"Rc%d" % i for i in range(6)]
        assert drain(other) == [b"Ro%d" % i for i in range(6)]  # and no b"stray"
        assert len(errors) == 2 and all("running" in e for e in errors)


def test_a_second_thread_cannot_use_the_extension_while_the_first_is_in_respond() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    import threading

    from mcsdns.transport import _batchio as batchio

    inside, go = threading.Event(), threading.Event()
    result: list[tuple[int, int, object]] = []

    def respond(data: bytes, tcp: bool) -> bytes | None:
        if data == b"a2":  # two answers of this batch are ready to send
            inside.set()
            go.wait(5)  # releases the GIL: the other thread runs meanwhile
        return b"R" + data

    def serve2() -> tuple[int, int, list[tuple[bytes, bytes]] | None]:
        return batchio.serve(server2.fileno(), lambda d, tcp: b"S" + d, print)

    outcomes: list[object] = []
    with _udp_pair() as (server, client), _udp_pair() as (server2, client2):
        client.setblocking(False)
        client2.setblocking(False)
        for i in range(4):
            client.sendto(b"a%d" % i, server.getsockname())
            client2.sendto(b"b%d" % i, server2.getsockname())
        time.sleep(0.05)
        t = threading.Thread(target=lambda: result.append(batchio.serve(server.fileno(), respond, print)))
        t.start()
        try:
            assert inside.wait(5)
            for call in (serve2, lambda: batchio.send(server2.fileno(), [(b"stray", _sockaddr(client))])):
                try:
                    outcomes.append(call())
                except RuntimeError as e:
                    outcomes.append(e)
        finally:
            go.set()
            t.join(5)
        assert result and result[0][::2] == (4, None)
        time.sleep(0.05)
        assert drain(client) == [b"Ra%d" % i for i in range(4)]  # its own answers, and no b"stray"
        assert [type(o) for o in outcomes] == [RuntimeError, RuntimeError]
        assert serve2()[::2] == (4, None)
        assert drain(client2) == [b"Sb%d" % i for i in range(4)]
