"""UDP listener: each datagram in gets at most one datagram out.

Two implementations, chosen by `serve_udp`:
- batched (the C extension `_batchio`, Linux): on readable, one recvmmsg
  reads up to 64 queries, each is answered from the handler's response
  cache in C or else by the handler, and one sendmmsg sends the answers; a
  batch of 64 is followed by another read (at most `ROUNDS` before the loop
  runs other callbacks);
- plain: uvloop's datagram transport, one recvfrom/sendto per query. Used
  when the extension is not built, MCSDNS_BATCHIO=0, or with --log-queries
  (the query log needs each client's address).
Both time each request into the `mcsdns_dns_request_duration_seconds`
histogram: a batch's queries each count the batch's time from the end of
its read to the end of its send. (mcsdns.transport.tcp times TCP queries in
the same histogram.) MCSDNS_REQUEST_HISTOGRAM=0 turns the timing
off (only to measure what it costs; see BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
import os
import socket
from bisect import bisect_left
from collections.abc import Callable
from time import perf_counter_ns
from types import ModuleType
from typing import cast

from ..nameserver.cache import Table
from ..ops.querylog import log_query
from ..ops.stats import Put, define, put_histogram
from .sockets import bound_socket

Respond = Callable[[bytes, bool], "bytes | None"]
OnError = Callable[[bytes, BaseException], "bytes | None"]  # what respond raised -> the response

DURATION = define("mcsdns_dns_request_duration_seconds", "histogram",
                  "Time from reading a query (a UDP datagram, a whole TCP message) to sending its "
                  "response (batched: the batch's).",
                  ("proto",))
BATCHED = define("mcsdns_udp_batch_io", "gauge", "1 when UDP uses recvmmsg/sendmmsg, 0 for recvfrom/sendto.")
# CoreDNS' request duration buckets (0.25 ms doubling to 8.192 s), with three finer ones below.
DURATION_BOUNDS_NS = tuple(31_250 << i for i in range(19))
ROUNDS = 16  # batches per readable event before yielding to the loop


class RequestTimer:
    """The request duration histogram of one process and transport (all its
    listeners); for UDP also whether the batched path is in use."""

    __slots__ = ("proto", "buckets", "total_ns", "batched")

    def __init__(self, proto: str = "udp") -> None:
        self.proto = proto
        self.buckets = [0] * (len(DURATION_BOUNDS_NS) + 1)
        self.total_ns = 0
        self.batched = False

    def observe(self, elapsed_ns: int, n: int) -> None:
        """`n` requests that each took `elapsed_ns`."""
        self.buckets[bisect_left(DURATION_BOUNDS_NS, elapsed_ns)] += n
        self.total_ns += elapsed_ns * n

    def publish(self, put: Put) -> None:
        put_histogram(put, DURATION, [b / 1e9 for b in DURATION_BOUNDS_NS], self.buckets,
                      self.total_ns / 1e9, proto=self.proto)
        if self.proto == "udp":
            put(BATCHED, 1 if self.batched else 0)


def batch_module() -> ModuleType | None:
    """The batched-I/O extension, or None (not built here, or MCSDNS_BATCHIO=0)."""
    if os.environ.get("MCSDNS_BATCHIO", "1") == "0":
        return None
    try:
        from . import _batchio
    except ImportError:
        return None
    return _batchio


def io_description() -> str:
    """How UDP is read and written here, for --version."""
    if os.environ.get("MCSDNS_BATCHIO", "1") == "0":
        return "plain; extension disabled by MCSDNS_BATCHIO=0"
    return "recvmmsg/sendmmsg extension" if batch_module() is not None else "plain; extension not built"


def timing() -> bool:
    return os.environ.get("MCSDNS_REQUEST_HISTOGRAM", "1") != "0"


class UDPProtocol(asyncio.DatagramProtocol):
    """The plain path: one datagram per callback, sent through the transport."""

    def __init__(self, respond: Respond, on_error: OnError, timer: RequestTimer,
                 log_queries: bool = False) -> None:
        self.respond = respond
        self.on_error = on_error  # never let one packet stop the listener
        self.timer = timer
        self.transport: asyncio.DatagramTransport | None = None
        if log_queries:
            self.datagram_received = self._logged  # type: ignore[method-assign]
        elif not timing():
            self.datagram_received = self._answer  # type: ignore[method-assign,assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        t0 = perf_counter_ns()
        self._answer(data, addr)
        dt = perf_counter_ns() - t0  # RequestTimer.observe(dt, 1), inlined: this runs per query
        timer = self.timer
        timer.buckets[bisect_left(DURATION_BOUNDS_NS, dt)] += 1
        timer.total_ns += dt

    def _answer(self, data: bytes, addr: tuple[str, int]) -> bytes | None:
        """Answer one datagram; the answer sent (None: none)."""
        try:
            out = self.respond(data, False)
        except Exception as e:
            out = self.on_error(data, e)
        if out is not None and self.transport is not None:
            self.transport.sendto(out, addr)
        return out

    def _logged(self, data: bytes, addr: tuple[str, int]) -> None:
        t0 = perf_counter_ns()
        out = self._answer(data, addr)
        dt = perf_counter_ns() - t0
        self.timer.observe(dt, 1)
        log_query(data, out, "udp", addr, dt)

    def error_received(self, exc: Exception) -> None:  # ICMP errors etc.
        pass


class BatchedUDP:
    """The batched path on a non-blocking socket watched with `loop.add_reader`.
    Answers the socket will not take (EAGAIN) wait for it to be writable, and
    no query is read meanwhile."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, respond: Respond,
                 on_error: OnError, timer: RequestTimer, batchio: ModuleType, cache: Table | None = None,
                 serial: bytearray | None = None) -> None:
        self.loop, self.sock, self.respond, self.timer, self.io = loop, sock, respond, timer, batchio
        self.on_error = on_error  # its response to a query respond raised on is sent (by _batchio)
        self.cache = cache  # query after its ID -> Canned: answered in C without calling respond
        self.serial = serial  # the zone's SOA serial, which negative answers from `cache` carry
        self.fd = sock.fileno()
        self.unsent: list[tuple[bytes, bytes]] = []
        self.observe = timer.observe if timing() else None
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        serve, fd, respond, batch, observe = self.io.serve, self.fd, self.respond, self.io.BATCH, self.observe
        cache, serial, on_error = self.cache, self.serial, self.on_error
        for _ in range(ROUNDS):
            n, elapsed, unsent = serve(fd, respond, on_error, cache, serial)
            if n and observe is not None:
                observe(elapsed, n)
            if unsent:
                self.unsent = unsent
                self.loop.remove_reader(fd)
                self.loop.add_writer(fd, self._writable)
                return
            if n < batch:  # drained; epoll reports the socket again when more arrives
                return

    def _writable(self) -> None:
        done = self.io.send(self.fd, self.unsent)
        del self.unsent[:done]
        if not self.unsent:
            self.loop.remove_writer(self.fd)
            self.loop.add_reader(self.fd, self._readable)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.sock.close()


def bind_udp(host: str, port: int, reuse_port: bool) -> socket.socket:
    return bound_socket(host, port, socket.SOCK_DGRAM, reuse_port)


async def serve_udp(loop: asyncio.AbstractEventLoop, sock: socket.socket, respond: Respond,
                    on_error: OnError, timer: RequestTimer, cache: Table | None = None,
                    serial: bytearray | None = None,
                    log_queries: bool = False) -> asyncio.DatagramTransport | BatchedUDP:
    """Answer queries on `sock`, batched when the extension is available and
    queries are not logged; what `respond` raises, `on_error` answers. `cache`
    is the dict `respond` keeps its UDP responses in (ResponseCache.tables[False]),
    `serial` the SOA serial it writes into negative answers (ResponseCache.serial)."""
    batchio = None if log_queries else batch_module()
    timer.batched = batchio is not None
    if batchio is not None:
        return BatchedUDP(loop, sock, respond, on_error, timer, batchio, cache, serial)
    transport, _ = await loop.create_datagram_endpoint(
        lambda: UDPProtocol(respond, on_error, timer, log_queries), sock=sock)
    return transport
