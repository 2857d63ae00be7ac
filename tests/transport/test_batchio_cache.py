"""The response cache answered in C (transport/_batchio.c) as `respond` would, and the
extension's guards: entries it cannot send, a saturating hit counter, re-entry from respond
and a second thread refused."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import dns.message
import dns.rcode
import pytest
from support.helpers import drain, example_app, udp_pair

from mcsdns.nameserver.handler import Handler

SVC = "web.shop.svc.clusterset.local."
NX = "nope.shop.svc.clusterset.local."


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
    with udp_pair() as (server, client):
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
    with udp_pair() as (server, client):
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
    with udp_pair() as (server, client):
        for i in range(3):
            client.sendto(b"%02d-ok" % i, server.getsockname())
        time.sleep(0.05)
        n, _, _ = batchio.serve(server.fileno(), lambda d, tcp: None, print, {b"-ok": c})
        assert n == 3
        assert sorted(client.recv(100) for _ in range(3)) == [b"00cached", b"01cached", b"02cached"]
    assert c.hits == sys.maxsize


def test_response_cache_works_without_the_extension() -> None:
    # where the C type is not built, response.Canned gets its fields from mcsdns.nameserver._canned,
    # and _batchio (which reads that type) does not load: UDP takes the plain path
    code = """
import sys
sys.modules["mcsdns.nameserver._cannedtype"] = None  # as if it were not built
sys.path.insert(0, "tests")
import dns.message
from mcsdns.nameserver import response
from mcsdns.transport import udp
assert udp.batch_module() is None and udp.io_description() == "plain; extension not built"
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
    env = {k: v for k, v in os.environ.items() if k != "MCSDNS_BATCHIO"}  # not switched off: missing
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=60, env=env)
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

    with udp_pair() as (server, client):
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
    with udp_pair() as (server, client), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
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
    with udp_pair() as (server, client), udp_pair() as (server2, client2):
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
