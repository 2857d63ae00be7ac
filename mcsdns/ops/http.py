"""A small HTTP endpoint for /health (liveness), /ready (first full sync done)
and /metrics (Prometheus text format), on non-blocking sockets of the event loop.

A connection flood must not keep a probe from its answer, so a place in the
connection table is only for a request that is not whole when accepted (a probe
or a scrape sends its request at once and is answered at accept, before the
next connection is taken). The table holds at most MAX_CONNS; when full, a new
connection takes the place of the oldest one not yet answered if that one has
had MIN_AGE seconds, else it is closed (one that had sent nothing is read once
more before: PROBATION seconds later, or at once when MAX_PENDING are waiting).

The port has LISTENERS sockets (SO_REUSEPORT), each with an accept queue of
BACKLOG: a client's SYN is dropped by the kernel only when its queue is full, so
together they hold more connections in flight than a flood of 10,000.

Limits: a request line or header line of at most MAX_LINE octets (414, 431), at
most MAX_HEADERS header lines (431), and DEADLINE seconds from accept to the last
octet of the answer, however the client trickles its request. A connection closed
unanswered, or failing, is counted in mcsdns_http_errors_total, never logged.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
from collections.abc import Callable

from .stats import Put, define

log = logging.getLogger("mcsdns.http")

MetricsFn = Callable[[], bytes]

MAX_CONNS = 64
MIN_AGE = 1.0  # seconds a connection keeps its place in the table
PROBATION = 0.02  # seconds before a connection that came without its request is read again
MAX_PENDING = 256  # such connections waiting to be read again (then they are, at once)
ACCEPT_BATCH = 64  # connections accepted per loop turn
BACKLOG = 4096  # per listening socket (the kernel caps it at net.core.somaxconn, 4096 by default)
LISTENERS = 4  # listening sockets on the port (SO_REUSEPORT), an accept queue each
MAX_LINE = 8192
MAX_HEADERS = 100
DEADLINE = 5.0
ACCEPT_PAUSE = 0.1  # seconds without accepting after accept() fails (no fds left)
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 414: "URI Too Long",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}
ERRORS = define("mcsdns_http_errors_total", "counter",
                "HTTP connections closed unanswered, or failed: rejected (new, the connection table "
                "full), evicted (oldest, for a new one), timeout (request deadline), io (a socket "
                "error reading or writing), accept (accept() failed, e.g. no file descriptors left).",
                ("error",))
_ERROR_KINDS = ("rejected", "evicted", "timeout", "io", "accept")
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close with RST, no TIME_WAIT


def reset(sock: socket.socket) -> None:
    """Close `sock` with a reset."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    except OSError:
        pass
    sock.close()


class HTTPErrors:
    """mcsdns_http_errors_total of every endpoint of a process (`stats.Publisher`)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(_ERROR_KINDS, 0)

    def publish(self, put: Put) -> None:
        for kind, n in self.counts.items():
            put(ERRORS, n, error=kind)


class _Conn:
    """One connection: what is read of its request, then what is left to send."""

    __slots__ = ("sock", "fd", "since", "line", "request", "headers", "out", "timer")

    def __init__(self, sock: socket.socket, since: float) -> None:
        self.sock, self.fd, self.since = sock, sock.fileno(), since
        self.line = b""  # the line being read
        self.request: bytes | None = None  # the request line, once read
        self.headers = 0
        self.out: memoryview | None = None  # the answer not yet sent
        self.timer: asyncio.TimerHandle | None = None


class HTTPEndpoints:
    """/health, /ready and /metrics, with bounded connections, lines and time."""

    def __init__(self, ready: Callable[[], bool], metrics: MetricsFn | None,
                 max_conns: int = MAX_CONNS, deadline: float = DEADLINE,
                 errors: HTTPErrors | None = None) -> None:
        self.ready = ready
        self.metrics = metrics
        self.max_conns = max_conns
        self.deadline = deadline
        self.errors = errors or HTTPErrors()
        self.open: dict[_Conn, None] = {}  # the table, oldest first
        self.pending: list[_Conn] = []  # accepted without their request, the table full
        self.sweeping: asyncio.TimerHandle | None = None

    def route(self, path: str) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0]
        if path in ("/health", "/healthz"):
            return 200, "text/plain", b"OK\n"
        if path in ("/ready", "/readyz"):
            if self.ready():
                return 200, "text/plain", b"OK\n"
            return 503, "text/plain", b"not synced\n"
        if path == "/metrics" and self.metrics is not None:
            return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics()
        return 404, "text/plain", b"not found\n"

    def answer(self, request: bytes | None, status: int = 0) -> bytes:
        """The whole response to a request line (`status`: the request broke a limit)."""
        parts = [] if request is None else request.decode("latin-1").split()
        if not status and (len(parts) < 2 or parts[0] not in ("GET", "HEAD")):
            status = 400
        if status:
            ctype, body = "text/plain", b"bad request\n"
        else:
            try:
                status, ctype, body = self.route(parts[1])
            except Exception:
                log.exception("HTTP %s failed", parts[1][:64])
                status, ctype, body = 500, "text/plain", b"internal error\n"
        head = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        return head + (body if parts[:1] != ["HEAD"] else b"")

    # ---- connections ----

    def accepted(self, sock: socket.socket) -> None:
        """A new connection: answered now if its request is whole, else given a place."""
        sock.setblocking(False)
        c = _Conn(sock, asyncio.get_running_loop().time())
        if self.read(c):
            self.admit(c, fresh=True)

    def admit(self, c: _Conn, fresh: bool) -> None:
        """Give `c`, still reading or writing, a place in the table (see the module)."""
        loop = asyncio.get_running_loop()
        if len(self.open) >= self.max_conns:
            oldest = next((o for o in self.open if o.out is None), None)
            if c.out is None and (oldest is None or loop.time() - oldest.since < MIN_AGE):
                if fresh and c.request is None and not c.line:
                    self.pending.append(c)  # it may not have had the time to send
                    if len(self.pending) >= MAX_PENDING:
                        self.sweep()
                    elif self.sweeping is None:
                        self.sweeping = loop.call_later(PROBATION, self.sweep)
                else:
                    self.errors.counts["rejected"] += 1
                    reset(c.sock)
                return
            self.close(oldest or next(iter(self.open)), "evicted")
        self.open[c] = None
        c.timer = loop.call_at(c.since + self.deadline, self.close, c, "timeout")
        if c.out is None:
            loop.add_reader(c.fd, self.readable, c)
        else:
            loop.add_writer(c.fd, self.writable, c)

    def sweep(self) -> None:
        """Read again the connections that came without their request."""
        if self.sweeping is not None:
            self.sweeping.cancel()
            self.sweeping = None
        pending, self.pending = self.pending, []
        for c in pending:
            if self.read(c):
                self.admit(c, fresh=False)

    def readable(self, c: _Conn) -> None:
        if not self.read(c):
            self.close(c)
        elif c.out is not None:  # answered in part: the rest when the socket takes it
            loop = asyncio.get_running_loop()
            loop.remove_reader(c.fd)
            loop.add_writer(c.fd, self.writable, c)

    def writable(self, c: _Conn) -> None:
        if not self.send(c):
            self.close(c)

    def read(self, c: _Conn) -> bool:
        """Read what `c` sent and answer once its request is whole (or breaks a limit);
        False once `c` is done with (answered in full, or failed; closed here if it has
        no place in the table)."""
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return self.fail(c)
        if not data:  # the client is done sending: answer what came, if anything did
            if c.request is None and not c.line:
                return self.done(c)
            return self.respond(c, self.answer(c.request if c.request is not None else c.line))
        line = c.line + data
        start = 0
        while (end := line.find(b"\n", start)) >= 0:
            if c.request is None:
                if end - start >= MAX_LINE:
                    return self.respond(c, self.answer(None, 414))
                c.request = line[start:end + 1]
            elif line[start:end + 1] in (b"\r\n", b"\n"):  # the empty line: the request is whole
                return self.respond(c, self.answer(c.request))
            elif end - start >= MAX_LINE or c.headers >= MAX_HEADERS:
                return self.respond(c, self.answer(None, 431))
            else:
                c.headers += 1
            start = end + 1
        c.line = line[start:]
        if len(c.line) >= MAX_LINE:
            return self.respond(c, self.answer(None, 414 if c.request is None else 431))
        return True

    def respond(self, c: _Conn, response: bytes) -> bool:
        c.out = memoryview(response)
        return self.send(c)

    def send(self, c: _Conn) -> bool:
        """Send what is left of the answer; False once all of it is sent (or failed)."""
        assert c.out is not None
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return self.fail(c)
        c.out = c.out[n:]
        return bool(c.out) or self.done(c)

    def fail(self, c: _Conn) -> bool:
        self.errors.counts["io"] += 1
        return self.done(c)

    def done(self, c: _Conn) -> bool:
        if c not in self.open:
            c.sock.close()
        return False

    def close(self, c: _Conn, error: str | None = None) -> None:
        """Close a connection of the table, counting `error` (None: it is done)."""
        if c not in self.open:
            return
        del self.open[c]
        assert c.timer is not None
        c.timer.cancel()
        loop = asyncio.get_running_loop()
        loop.remove_reader(c.fd)
        loop.remove_writer(c.fd)
        if error is None:
            c.sock.close()
        else:
            self.errors.counts[error] += 1
            reset(c.sock)

    def close_all(self) -> None:
        self.sweep()
        for c in list(self.open):
            self.close(c)


class HTTPServer:
    """Listening sockets of one port that hand each accepted connection to their endpoints."""

    def __init__(self, socks: list[socket.socket], endpoints: HTTPEndpoints,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.socks, self.endpoints, self.loop = socks, endpoints, loop
        self.paused: dict[socket.socket, asyncio.TimerHandle] = {}
        for sock in socks:
            loop.add_reader(sock.fileno(), self.accept, sock)

    def accept(self, sock: socket.socket) -> None:
        """Accept at most ACCEPT_BATCH connections."""
        ep = self.endpoints
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                ep.errors.counts["accept"] += 1
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.loop.remove_reader(sock.fileno())  # readable until one is accepted
                    self.paused[sock] = self.loop.call_later(ACCEPT_PAUSE, self.resume, sock)
                return
            ep.accepted(conn)

    def resume(self, sock: socket.socket) -> None:
        del self.paused[sock]
        self.loop.add_reader(sock.fileno(), self.accept, sock)

    def close(self) -> None:
        """Stop accepting and close every connection."""
        for sock in self.socks:
            paused = self.paused.pop(sock, None)
            if paused is not None:
                paused.cancel()
            else:
                self.loop.remove_reader(sock.fileno())
            sock.close()
        self.endpoints.close_all()


async def serve_http(host: str, port: int, endpoints: HTTPEndpoints) -> HTTPServer:
    """Serve `endpoints` on host:port (IPv6 when host has a colon) with LISTENERS sockets;
    OSError when it cannot be bound or is in use (also by another SO_REUSEPORT group)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family) as alone:  # no one else on it
        port = alone.getsockname()[1]  # port 0: the one it was given
    socks: list[socket.socket] = []
    try:
        for _ in range(LISTENERS):
            socks.append(socket.create_server((host, port), family=family, backlog=BACKLOG, reuse_port=True))
            socks[-1].setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return HTTPServer(socks, endpoints, asyncio.get_running_loop())
