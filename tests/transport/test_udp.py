"""The UDP hot path on both implementations (recvmmsg/sendmmsg, and plain
recvfrom/sendto with MCSDNS_BATCHIO=0): bursts from many sockets each get
their own answers, counts and the request duration histogram add up."""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import pytest
from support.helpers import EXAMPLE, LIVENESS, UDP_PATHS, Server, drain, run_server_on_path, udp_pair

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
        deadline = time.monotonic() + LIVENESS
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



def test_extension_survives_a_failing_answer_and_drops_none() -> None:
    pytest.importorskip("mcsdns.transport._batchio")
    from mcsdns.transport import _batchio as batchio
    with udp_pair() as (server, client):
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
            deadline = time.monotonic() + LIVENESS
            while len(got) < 100 and time.monotonic() < deadline:
                got += drain(client)
                await asyncio.sleep(0.005)
        finally:
            listener.close()
            client.close()
        return got

    assert asyncio.run(run()) == [b"%03d" % i * 500 for i in range(100)]
