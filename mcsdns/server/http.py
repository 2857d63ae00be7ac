"""A small HTTP endpoint for /health (liveness), /ready (first full sync done)
and /metrics (Prometheus text format)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("mcsdns.http")

MetricsFn = Callable[[], bytes]


class HTTPEndpoints:
    def __init__(self, ready: Callable[[], bool], metrics: MetricsFn | None) -> None:
        self.ready = ready
        self.metrics = metrics

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

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = 400, "text/plain", b"bad request\n"
            else:
                status, ctype, body = self.route(parts[1])
            reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}[status]
            head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            writer.write(head + (body if parts and parts[0] != "HEAD" else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()


async def serve_http(host: str, port: int, endpoints: HTTPEndpoints) -> asyncio.AbstractServer:
    return await asyncio.start_server(endpoints.handle, host, port)
