"""TCP listener: length-prefixed messages, several per connection (RFC 7766).

Limits: at most `max_conns` open connections (new ones beyond are closed),
an idle connection is closed after `idle_timeout`, and a message must arrive
whole within `read_timeout` of its first byte (slow-client defence).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from ..stats import Put, define
from . import bound_socket

log = logging.getLogger("mcsdns.tcp")

Respond = Callable[[bytes, bool], "bytes | None"]
# (query, peer address) -> a stream of response messages (zone transfers), or None
Stream = Callable[[bytes, Any], "Iterator[bytes] | None"]
PUMP_BATCH = 8  # transfer messages sent per event-loop turn


REJECTED = define("mcsdns_tcp_connections_rejected_total", "counter", "TCP connections closed at the limit.")
TIMED_OUT = define("mcsdns_tcp_connections_timed_out_total", "counter",
                   "TCP connections closed idle or slow.")
OPEN = define("mcsdns_tcp_connections", "gauge", "Open TCP connections.")


class TCPLimits:
    def __init__(self, max_conns: int = 1000, idle_timeout: float = 10.0,
                 read_timeout: float = 5.0) -> None:
        self.max_conns = max_conns
        self.idle_timeout = idle_timeout
        self.read_timeout = read_timeout


class TCPServerState:
    def __init__(self, respond: Respond, limits: TCPLimits) -> None:
        self.respond = respond
        self.limits = limits
        self.conns: set[TCPConnection] = set()
        self.rejected = 0
        self.timed_out = 0
        self.sweeper: asyncio.Task[None] | None = None
        self.stream: Stream | None = None  # zone transfers (mcsdns.xfr)

    def publish(self, put: Put) -> None:
        put(REJECTED, self.rejected)
        put(TIMED_OUT, self.timed_out)
        put(OPEN, len(self.conns))

    def sweep(self) -> None:
        now = time.monotonic()
        lim = self.limits
        for c in list(self.conns):
            if c.pending_since is not None and now - c.pending_since > lim.read_timeout:
                self.timed_out += 1
                c.close()
            elif c.pending_since is None and now - c.last_active > lim.idle_timeout:
                # (a transfer counts as active while the client keeps reading it)
                self.timed_out += 1
                c.close()


class TCPConnection(asyncio.Protocol):
    def __init__(self, state: TCPServerState) -> None:
        self.state = state
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.last_active = time.monotonic()
        self.pending_since: float | None = None
        self.out: Iterator[bytes] | None = None  # a transfer being sent
        self.paused = False
        self.scheduled = False  # a _pump call is pending
        self.peer: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        if len(self.state.conns) >= self.state.limits.max_conns:
            self.state.rejected += 1
            self.transport.abort()
            return
        self.state.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.conns.discard(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.state.conns.discard(self)

    def pause_writing(self) -> None:  # client not reading: stop reading its queries
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None:
            self.transport.resume_reading()
        if self.out is not None and not self.scheduled:
            self._pump()

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
                        self.data_received(b"")
                    return
                self.transport.write(len(msg).to_bytes(2, "big") + msg)
        except Exception:
            log.exception("error sending a zone transfer")
            self.close()
            return
        self.scheduled = True
        asyncio.get_running_loop().call_soon(self._pump)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        now = time.monotonic()
        self.last_active = now
        if self.out is not None:  # a transfer is being sent: queue
            self.buf = buf
            return
        out: list[bytes] = []
        stream = self.state.stream
        while len(buf) >= 2:
            n = (buf[0] << 8) | buf[1]
            if len(buf) < 2 + n:
                break
            msg, buf = buf[2:2 + n], buf[2 + n:]
            if stream is not None:
                try:
                    xfr = stream(msg, self.peer)
                except Exception:
                    log.exception("error starting a zone transfer")
                    self.close()
                    return
                if xfr is not None:
                    if out and self.transport is not None:
                        self.transport.write(b"".join(out))
                    self.buf = buf
                    self.pending_since = None
                    self.out = xfr
                    self._pump()
                    return
            try:
                resp = self.state.respond(msg, True)
            except Exception:
                log.exception("error answering %d-byte TCP query", len(msg))
                resp = None
            if resp is None:
                self.close()
                return
            out.append(len(resp).to_bytes(2, "big") + resp)
        self.buf = buf
        self.pending_since = (self.pending_since or now) if buf else None
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


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
