"""A small HTTP endpoint for /health (liveness), /ready (first full sync done)
and /metrics (Prometheus text format).

Limits: at most MAX_CONNS connections (a new one beyond closes the oldest),
a request line or header line of at most MAX_LINE octets (414, 431), at most
MAX_HEADERS header lines (431), and DEADLINE seconds from accept to the last
octet of the answer, however the client trickles its request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("mcsdns.http")

MetricsFn = Callable[[], bytes]

MAX_CONNS = 64
MAX_LINE = 8192
MAX_HEADERS = 100
DEADLINE = 5.0
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 414: "URI Too Long",
           431: "Request Header Fields Too Large", 503: "Service Unavailable"}


class BadRequest(Exception):
    """A request refused with `status` (400, 414 or 431)."""

    def __init__(self, status: int) -> None:
        self.status = status


class HTTPEndpoints:
    """/health, /ready and /metrics, with bounded connections, lines and time."""

    def __init__(self, ready: Callable[[], bool], metrics: MetricsFn | None,
                 max_conns: int = MAX_CONNS, deadline: float = DEADLINE) -> None:
        self.ready = ready
        self.metrics = metrics
        self.max_conns = max_conns
        self.deadline = deadline
        self.open: dict[asyncio.StreamWriter, None] = {}  # oldest first

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

    async def read_head(self, reader: asyncio.StreamReader) -> list[str]:
        """The request line's words; BadRequest when it or the headers break a limit."""
        line = await self.read_line(reader, 414)
        for _ in range(MAX_HEADERS + 1):
            if (await self.read_line(reader, 431)) in (b"\r\n", b"\n", b""):
                return line.decode("latin-1").split()
        raise BadRequest(431)

    async def read_line(self, reader: asyncio.StreamReader, too_long: int) -> bytes:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            return e.partial
        except asyncio.LimitOverrunError:
            raise BadRequest(too_long) from None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.open) >= self.max_conns:
            oldest = next(iter(self.open))  # it had most of its deadline
            del self.open[oldest]
            oldest.transport.abort()
        self.open[writer] = None
        try:
            async with asyncio.timeout(self.deadline):
                try:
                    parts = await self.read_head(reader)
                    if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                        raise BadRequest(400)
                    status, ctype, body = self.route(parts[1])
                except BadRequest as e:
                    parts, (status, ctype, body) = [], (e.status, "text/plain", b"bad request\n")
                head = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
                writer.write(head + (body if parts[:1] != ["HEAD"] else b""))
                await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self.open.pop(writer, None)
            writer.close()


async def serve_http(host: str, port: int, endpoints: HTTPEndpoints) -> asyncio.AbstractServer:
    return await asyncio.start_server(endpoints.handle, host, port, limit=MAX_LINE)
