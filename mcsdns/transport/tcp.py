"""TCP listener: length-prefixed messages, several per connection (RFC 7766).

Connections are admitted, evicted and timed out as mcsdns.transport.tcpconns says.

Memory per connection is bounded: at most one whole message + 2 octets of
input is queued (reading pauses while a transfer is being sent or the client
is not reading its answers), and answering stops while the client is not
reading them.

Each answered query is timed into `mcsdns_dns_request_duration_seconds{proto="tcp"}`
from when its whole message is taken up (at the read that completed it, or
when a transfer or a client pause that held it queued ends) to the write of
its answer; answers to pipelined queries are written together, and each
counts that time.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any, cast

from ..dns.answer import MAX_TCP
from ..nameserver.panics import Panics
from ..ops.querylog import log_query
from ..ops.stats import Put
from .sockets import bound_socket
from .tcpconns import ConnectionTable, TCPLimits, client_of
from .udp import DURATION_BOUNDS_NS, RequestTimer, timing

log = logging.getLogger("mcsdns.tcp")

Respond = Callable[[bytes, bool], "bytes | None"]
# (query, peer address) -> a stream of response messages (zone transfers), or None
Stream = Callable[[bytes, Any], "Iterator[bytes] | None"]
PUMP_BATCH = 8  # transfer messages sent per event-loop turn
QUEUED = 2 + MAX_TCP  # input octets a connection may queue: one whole message
FLUSH = 1 << 16  # answers to pipelined queries are written in batches of this size


class TCPServerState(ConnectionTable["TCPConnection"]):
    """What every TCP connection shares: the responder, limits, the open connections and counters."""

    def __init__(self, respond: Respond, limits: TCPLimits, panics: Panics) -> None:
        super().__init__(limits)
        self.respond = respond
        self.panics = panics  # the response to a query respond (or a transfer) raised on
        self.sweeper: asyncio.Task[None] | None = None
        self.stream: Stream | None = None  # zone transfers (mcsdns.nameserver.xfr)
        self.scratch = memoryview(bytearray(QUEUED))  # every connection reads into it
        self.draining = False  # shutting down: close each connection once answered
        self.timer = RequestTimer("tcp")
        self.timed = timing()
        self.log_queries = False  # --log-queries

    def drain(self) -> None:
        """Shutting down: close the idle connections that were answered; the others
        after the answers to the queries they send."""
        self.draining = True
        for c in list(self.conns):
            if c.answered and c.idle() and c.transport is not None:
                c.transport.close()

    def publish(self, put: Put) -> None:
        self.timer.publish(put)
        self.publish_table(put)


class TCPConnection(asyncio.BufferedProtocol):
    """One client connection: length-prefixed messages in, answers (or a transfer) out."""

    def __init__(self, state: TCPServerState) -> None:
        self.state = state
        self.buf = bytearray()  # input not answered yet: at most QUEUED octets
        self.transport: asyncio.Transport | None = None
        self.last_active = time.monotonic()
        self.out: Iterator[bytes] | None = None  # a transfer being sent
        self.paused = False  # the client is not reading (pause_writing)
        self.reading = True
        self.scheduled = False  # a _pump call is pending
        self.peer: Any = None
        self.client = self.net = ""
        self.answered = False  # at least one answer written

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        self.client, self.net = client_of(self.peer)
        if not self.state.admit(self):
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.forget(self)

    def idle(self) -> bool:
        """No query pending, no transfer or answer being sent."""
        t = self.transport
        return (not self.buf and self.out is None and not self.paused
                and t is not None and t.get_write_buffer_size() == 0)

    def close(self) -> None:
        t = self.transport
        if t is not None:
            if t.get_write_buffer_size():
                t.abort()  # a client not reading must not keep its socket after we forget it
            else:
                t.close()
        self.state.forget(self)

    def _flow(self) -> None:
        """Read while the client reads its answers and the queued input is under QUEUED."""
        want = not self.paused and len(self.buf) < QUEUED
        t = self.transport
        if want != self.reading and t is not None and not t.is_closing():
            self.reading = want
            if want:
                t.resume_reading()
            else:
                t.pause_reading()

    def pause_writing(self) -> None:  # client not reading: stop reading its queries
        self.paused = True
        self._flow()

    def resume_writing(self) -> None:
        self.paused = False
        if self.out is not None:
            if not self.scheduled:
                self._pump()
        elif self.buf:
            self._answer_queued()
        self._flow()

    def _pump(self) -> None:
        """Send up to PUMP_BATCH transfer messages, then let other work run; stop while
        the client is not reading. When the transfer ends, answer queued queries."""
        self.scheduled = False
        if self.out is None:
            return
        self.last_active = time.monotonic()
        try:
            for _ in range(PUMP_BATCH):
                if self.paused or self.transport is None or self.transport.is_closing():
                    return
                msg = next(self.out, None)
                if msg is None:
                    self.out = None
                    if self.buf:
                        self._answer_queued()
                    self._flow()
                    return
                self.transport.write(len(msg).to_bytes(2, "big") + msg)
        except Exception as e:  # too late to answer
            self.state.panics.note(e, "a zone transfer being sent (connection closed)")
            self.close()
            return
        self.scheduled = True
        asyncio.get_running_loop().call_soon(self._pump)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.state.scratch[:QUEUED - len(self.buf)]

    def buffer_updated(self, nbytes: int) -> None:
        data = bytes(self.state.scratch[:nbytes])
        self.last_active = time.monotonic()
        if self.buf or self.out is not None or self.paused:
            self.buf += data
            if self.out is None and not self.paused:
                self._answer_queued()
            self._flow()
            return
        done = self._answer(data)  # (the buffer was empty: no read deadline running)
        if 0 <= done < len(data):
            self.buf += data[done:]
            self._flow()
            self._timing(done)

    def _answer_queued(self) -> None:
        done = self._answer(self.buf)
        if done >= 0:
            del self.buf[:done]
            self._timing(done)

    def _timing(self, took: int) -> None:
        """Input left after `took` octets of whole messages: the read deadline runs from
        the end of the last whole message; none left: no deadline. (A transfer has none.)"""
        if self.out is None:
            if self.buf:
                if took or self not in self.state.partial:
                    self.state.hold(self)
            else:
                self.state.release(self)

    def _transfer(self, stream: Stream, msg: bytes) -> Iterator[bytes] | None:
        """The zone transfer answering `msg` (None: `msg` is no transfer query); one that
        fails to start is sent as its SERVFAIL alone (`TCPServerState.panics`)."""
        try:
            return stream(msg, self.peer)
        except Exception as e:
            err = self.state.panics(msg, e)
            return iter(() if err is None else (err,))

    def _answer(self, buf: bytes | bytearray) -> int:
        """Answer the whole messages at the start of `buf` until a transfer starts or
        the client stops reading; the octets used, or -1 when the connection closed."""
        out: list[bytes] = []
        size = pos = 0
        end = len(buf)
        state = self.state
        stream, log_queries = state.stream, state.log_queries
        t0 = perf_counter_ns()
        while end - pos >= 2:
            n = (buf[pos] << 8) | buf[pos + 1]
            if end - pos < 2 + n:
                break
            msg = bytes(buf[pos + 2:pos + 2 + n])
            pos += 2 + n
            if stream is not None:
                xfr = self._transfer(stream, msg)
                if xfr is not None:
                    if out and self.transport is not None:
                        self.transport.write(b"".join(out))
                        self._observe(t0, len(out))
                    self.state.release(self)
                    self.out = xfr
                    asyncio.get_running_loop().call_soon(self._pump)
                    self.scheduled = True
                    return pos
            try:
                resp = state.respond(msg, True)
            except Exception as e:
                resp = state.panics(msg, e)
            if log_queries:
                log_query(msg, resp, "tcp", self.peer, perf_counter_ns() - t0)
            if resp is None:
                self.close()
                return -1
            out.append(len(resp).to_bytes(2, "big") + resp)
            size += 2 + len(resp)
            if size >= FLUSH and self.transport is not None:
                self.transport.write(b"".join(out))
                self._observe(t0, len(out))
                out.clear()
                size = 0
                if self.paused:
                    return pos
        if out and self.transport is not None:
            self.transport.write(b"".join(out))
            if state.timed:  # self._observe(t0, len(out)), inlined: this runs per read
                dt = perf_counter_ns() - t0
                timer = state.timer
                timer.buckets[bisect_left(DURATION_BOUNDS_NS, dt)] += len(out)
                timer.total_ns += dt * len(out)
            self.answered = True
            if self.state.draining and pos == end:
                self.transport.close()  # after the answers are flushed
        return pos

    def _observe(self, t0: int, n: int) -> None:
        """`n` answers written, for queries read at `t0` (perf_counter_ns)."""
        if self.state.timed:
            self.state.timer.observe(perf_counter_ns() - t0, n)


def bind_tcp(host: str, port: int, reuse_port: bool) -> socket.socket:
    sock = bound_socket(host, port, socket.SOCK_STREAM, reuse_port)
    sock.listen(1024)
    return sock


async def serve_tcp(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                    state: TCPServerState) -> asyncio.AbstractServer:
    server = await loop.create_server(lambda: TCPConnection(state), sock=sock)

    async def sweeper() -> None:
        while True:
            await asyncio.sleep(0.5)
            state.sweep()

    if state.sweeper is None:
        state.sweeper = loop.create_task(sweeper())
    return server
