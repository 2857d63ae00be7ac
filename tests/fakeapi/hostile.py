"""The test API server (fakeapi.KubeAPI) with hostile answers on demand, for the client's
defences against a broken or hostile endpoint:

- `watch_body`: every watch answers 200 with these bytes (a chunk each), then ends;
- `bad_items[plural]`: raw item texts put last in every list of that resource;
- `cut_lists[plural]`: every list of it is cut to this many bytes (a complete HTTP answer
  whose JSON ends early); `list_bodies[plural]`: every list of it is these bytes;
- `throttle(n, code, retry_after)`: the next n requests are answered `code` with that
  `Retry-After` header.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from .http import Handler
from .server import KubeAPI
from .status import RawJSON


class HostileAPI(KubeAPI):
    """A KubeAPI whose watches, lists and throttling can be made hostile (module docstring)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.watch_body: Iterable[bytes] | None = None
        self.bad_items: dict[str, list[bytes]] = {}
        self.cut_lists: dict[str, int] = {}
        self.list_bodies: dict[str, bytes] = {}
        self._throttle: list[tuple[int, str]] = []

    def throttle(self, n: int, code: int = 429, retry_after: str = "1") -> None:
        """Answer the next n requests with `code` and `Retry-After: retry_after`."""
        with self.cond:
            self._throttle = [(code, retry_after)] * n

    def next_throttle(self) -> tuple[int, str] | None:
        with self.cond:
            return self._throttle.pop(0) if self._throttle else None

    def watch_requests(self) -> int:
        """Watch requests served so far."""
        with self.cond:
            return sum(1 for _, u in self.requests if "watch=" in u)

    def handle(self, method: str, url: str, body: Any,
               headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        code, out = super().handle(method, url, body, headers)
        plural = urlparse(url).path.rsplit("/", 1)[-1]
        if isinstance(out, RawJSON) and method == "GET":
            bad = self.bad_items.get(plural)
            if bad:
                head, end = out[:-2], out[-2:]  # ...]}
                out = RawJSON(head + (b", " if head[-1:] != b"[" else b"") + b", ".join(bad) + end)
            if plural in self.cut_lists:
                out = RawJSON(out[:self.cut_lists[plural]])
            if plural in self.list_bodies:
                out = RawJSON(self.list_bodies[plural])
        return code, out

    def start(self, port: int | None = None, reset_watch_cache: bool = False) -> None:
        if reset_watch_cache:
            self.compact()
        handler = type("Handler", (_Hostile,), {"api": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port if port is not None else self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True,
                         name=f"hostile-{self.port}").start()


class _Hostile(Handler):
    api: HostileAPI

    def _do(self) -> None:
        api = self.api
        throttled = api.next_throttle()
        if throttled is not None:
            with api.cond:
                api.requests.append((self.command, self.path))
            code, retry_after = throttled
            data = RawJSON(b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                           b'"message":"throttled","reason":"TooManyRequests","code":%d}' % code)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.command == "GET" and "watch=" in self.path and api.watch_body is not None:
            with api.cond:
                api.requests.append((self.command, self.path))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for b in api.watch_body:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
            return
        super()._do()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do

