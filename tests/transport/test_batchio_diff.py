"""Differential test of the UDP paths: one hostile datagram stream, sent to a socket
served by the C extension (cache hits answered in C, as BatchedUDP does) and to
one served by handler.respond per datagram (as UDPProtocol does), gets the same
answers, byte for byte, in the same order, from each client's point of view.

The two handlers load the same data and see the same sequence of queries and
SOA serial changes, so their caches and the rotation of headless answers stay
in step."""

from __future__ import annotations

import random
import shutil
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import dns.flags
import dns.message
import dns.rdatatype
import pytest
from support.helpers import EXAMPLE, REPO, drain, example_app, example_handlers, headless

from mcsdns.nameserver.handler import Handler

sys.path.insert(0, str(REPO))
from robustness.packets import hostile, query, variant, wire_name  # noqa: E402

pytest.importorskip("mcsdns.transport._batchio")

from mcsdns.transport import _batchio as batchio

MAX_UDP = 65_507  # the largest UDP payload over IPv4
CLIENTS = 3  # per side: answers must go back to the socket that asked
BUF = 4 << 20  # socket buffers: a burst is read, and answered, whole


def bursts(rng: random.Random, total: int,
           fresh: Callable[[random.Random], bytes] = query) -> Iterator[list[tuple[int, bytes]]]:
    """Bursts of (client, datagram), `total` datagrams in all: mostly queries seen
    before (cache hits) and their variants, `fresh` and hostile queries, random bytes
    of any length up to MAX_UDP; many bursts longer than a batch."""
    seen: list[bytes] = []
    edges = [0, 1, 2, 3, 11, 12, 13, MAX_UDP - 1, MAX_UDP]  # each once, then random lengths
    sent = 0
    while sent < total:
        size = min(rng.choice([1, 7, 63, 64, 65, 128, 150, 200]), total - sent)
        burst, big = [], 0
        for _ in range(size):
            r = rng.random()
            if (edges or r < 0.02) and big < 3:  # at most 3 large datagrams a burst
                n = edges.pop() if edges else rng.randrange(MAX_UDP + 1)
                big += n > 1500
                msg = rng.randbytes(n)
                if n > 12 and rng.random() < 0.5 and seen:  # a known query padded out to n
                    msg = (rng.choice(seen) + msg)[:n]
            elif r < 0.45 and seen:
                msg = rng.choice(seen)
                msg = rng.randbytes(2) + msg[2:]  # a new ID: the cached answer, in C on one side
            elif r < 0.65 and seen:
                msg = variant(rng, rng.choice(seen))
                if rng.random() < 0.3:
                    seen.append(msg)
            elif r < 0.85:
                msg = fresh(rng)
                seen.append(msg)
            else:
                msg = hostile(rng)
            burst.append((rng.randrange(CLIENTS), msg))
        sent += len(burst)
        yield burst


def udp_socket(stack: ExitStack) -> socket.socket:
    s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUF)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUF)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    return s


def serve_c(sock: socket.socket, h: Handler, errors: list[tuple[bytes, str]]) -> int:
    """Read and answer until the socket is empty, as BatchedUDP does; datagrams read."""
    fd, got = sock.fileno(), 0
    while True:
        n, _, unsent = batchio.serve(fd, h.respond, lambda d, e: errors.append((d, repr(e))),
                                     h.cache.tables[False], h.cache.serial)
        got += n
        for _ in range(100):  # what the socket would not take at once (BatchedUDP waits for POLLOUT)
            if not unsent:
                break
            del unsent[:batchio.send(fd, unsent)]
        assert not unsent
        if n < batchio.BATCH:
            return got


def serve_python(sock: socket.socket, h: Handler, errors: list[tuple[bytes, str]]) -> int:
    """Read and answer until the socket is empty, one datagram at a time, as UDPProtocol does."""
    got = 0
    while True:
        try:
            data, addr = sock.recvfrom(65_536)
        except BlockingIOError:
            return got
        got += 1
        try:
            out = h.respond(data, False)
        except Exception as e:
            errors.append((data, repr(e)))
            continue
        if out is not None:
            sock.sendto(out, addr)


def differential(hc: Handler, hp: Handler, stream: Iterator[list[tuple[int, bytes]]],
                 rng: random.Random) -> tuple[list[list[bytes]], int]:
    """Send `stream` to both sides (a new SOA serial every tenth burst); the answers
    each client got, checked equal on both sides, and the bursts longer than a batch."""
    errors_c: list[tuple[bytes, str]] = []
    errors_p: list[tuple[bytes, str]] = []
    answers: list[list[bytes]] = []
    over_batch = 0
    with ExitStack() as stack:
        srv_c, srv_p = udp_socket(stack), udp_socket(stack)
        cli_c = [udp_socket(stack) for _ in range(CLIENTS)]
        cli_p = [udp_socket(stack) for _ in range(CLIENTS)]
        for b, burst in enumerate(stream):
            if b % 10 == 9:  # a new SOA serial, which cached negative answers must carry from now on
                serial = rng.randbytes(4)
                for h in (hc, hp):
                    h.cache.invalidate(())
                    h.cache.set_serial(int.from_bytes(serial, "big"))
            for j, msg in burst:
                cli_c[j].sendto(msg, srv_c.getsockname())
                cli_p[j].sendto(msg, srv_p.getsockname())
            over_batch += len(burst) > batchio.BATCH
            # loopback delivers as sendto returns: each server has the whole burst queued
            assert (serve_c(srv_c, hc, errors_c), serve_python(srv_p, hp, errors_p)) == (len(burst),) * 2
            for j in range(CLIENTS):
                got_c, got_p = drain(cli_c[j]), drain(cli_p[j])
                asked = [m.hex() for k, m in burst if k == j]
                assert got_c == got_p, f"burst {b}, client {j}: queries {asked}"
                answers.append(got_c)
    assert errors_c == errors_p
    return answers, over_batch


def test_c_and_python_paths_answer_a_hostile_stream_identically() -> None:
    hc, hp = example_handlers()
    rng = random.Random(18)
    answers, over_batch = differential(hc, hp, bursts(rng, 3000), rng)
    answered = sum(map(len, answers))
    assert answered > 1500 and over_batch >= 5  # most of the stream was answered; many long bursts
    hits = hc.cache.hits()
    assert hits > 500 and hits == hp.cache.hits()  # many answers came from the cache in C


BIG = [(f"big{n}", n) for n in (6, 8, 16, 40)]  # headless services of n endpoints


def big_query(rng: random.Random) -> bytes:
    """A query (EDNS or not, any size) for A, SRV or ANY of a BIG service's names."""
    name, _ = rng.choice(BIG)
    name = rng.choice(("", "_http._tcp.")) + name + ".big.svc.clusterset.local."
    msg = bytearray(query(rng, name))
    end = 12 + len(wire_name(name))
    msg[end:end + 4] = struct.pack("!HH", rng.choice((1, 33, 255)), 1)
    return bytes(msg)


def big_handlers(tmp: Path) -> tuple[Handler, Handler]:
    """Two loads (same serial) of the example plus headless services whose A, SRV and
    ANY answers do not fit 512 octets: sent without Additional, or truncated."""
    d = tmp / "m"
    shutil.copytree(EXAMPLE, d)
    (d / "big.yaml").write_text("---\n".join(headless(name, n) for name, n in BIG))
    for _ in range(3):
        a, b = example_app(d), example_app(d)
        if a.zone.serial == b.zone.serial:
            return a.handler, b.handler
    raise AssertionError("no two loads within the same second")


def test_c_and_python_paths_agree_on_answers_too_large_for_the_client(tmp_path: Path) -> None:
    """Answers cut to their fallback (no Additional) or truncated, rotating or not,
    kept and answered in C or in Python: the same bytes."""
    hc, hp = big_handlers(tmp_path)
    rng = random.Random(28)
    answers, _ = differential(hc, hp, bursts(rng, 2000, big_query), rng)
    msgs = [dns.message.from_wire(m) for got in answers for m in got if len(m) > 12 and not m[3] & 0xF]
    srv = [m for m in msgs if m.question and m.question[0].rdtype == dns.rdatatype.SRV and m.answer]
    assert sum(1 for m in msgs if m.flags & dns.flags.TC) > 10  # truncated
    assert sum(1 for m in srv if not m.flags & dns.flags.TC and not m.additional) > 10  # fallback
    assert sum(1 for m in srv if m.additional) > 10  # whole
    assert hc.cache.hits() > 200 and hc.cache.hits() == hp.cache.hits()
