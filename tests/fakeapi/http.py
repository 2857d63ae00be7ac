"""The test API server's HTTP side: HTTP/1.1 on 127.0.0.1, JSON bodies, watches as chunked
streams, and the bookkeeping of open connections that outages and `drop_watches` close."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from .status import HTTPError, RawJSON, status

if TYPE_CHECKING:
    from .server import KubeAPI


class Connections:
    """The open connections of one server, and which of them stream a watch (sets kept under
    the server's lock)."""

    def __init__(self, lock: threading.Condition) -> None:
        self.lock = lock
        self.open: set[socket.socket] = set()
        self.watching: set[socket.socket] = set()

    def close(self, watches_only: bool) -> None:
        """Shut down every open connection (or every watch); call without the lock."""
        with self.lock:
            socks = list(self.watching if watches_only else self.open)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    """One connection to a `KubeAPI` (subclassed per server with its `api`)."""

    protocol_version = "HTTP/1.1"
    api: KubeAPI

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns = self.api.connections
        with conns.lock:
            conns.open.add(self.connection)

    def handle(self) -> None:
        """The connection's requests; a client that resets it or stops reading (a controller
        stopped mid-request or mid-watch) ends it quietly, as a real API server does."""
        try:
            super().handle()
        except ConnectionError:  # reset, broken pipe, aborted
            self.close_connection = True

    def finish(self) -> None:
        conns = self.api.connections
        with conns.lock:
            conns.open.discard(self.connection)
            conns.watching.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _reply(self, code: int, obj: Any) -> None:
        data = obj if isinstance(obj, RawJSON) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _do(self) -> None:
        started = time.perf_counter()
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.command != "GET" and self.api.write_latency:
            time.sleep(self.api.write_latency)
        slow = [t for p, t in self.api.slow_gets.items() if self.command == "GET" and self.path.startswith(p)]
        if slow:
            time.sleep(max(slow))
        try:
            body = json.loads(raw) if raw else None
            code, out = self.api.handle(self.command, self.path, body, dict(self.headers.items()))
        except HTTPError as e:
            code, out = e.code, e.body
        except (ValueError, KeyError, IndexError, TypeError) as e:
            code, out = 400, status(400, "BadRequest", str(e))
        if isinstance(out, tuple) and out[0] == "WATCH":
            self._watch(*out[1:])
        else:
            self._reply(code, out)
            with self.api.cond:
                self.api.serving += time.perf_counter() - started

    def _watch(self, *args: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        conns = self.api.connections
        with conns.lock:
            conns.watching.add(self.connection)

        def send(b: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()

        try:
            self.api.watch(send, *args)
            send(b"")  # the terminating zero-length chunk
        except OSError:
            self.close_connection = True
        finally:
            with conns.lock:
                conns.watching.discard(self.connection)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass
