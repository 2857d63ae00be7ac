"""The API transport's connections (mcsdns/kube/apiclient/transport.py, over http.client): kept and
reused, at most `pool` idle ones, never when a body was not read to its end; a blocked read
of a watch ended from another thread; the connect and the read timeout apart; what each
failure says."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Unreachable, describe
from mcsdns.kube.apiclient.kubeconfig import Identity, Kubeconfig, Server
from mcsdns.kube.apiclient.proxy import from_environment
from mcsdns.kube.apiclient.reflector import is_read_timeout, lines
from mcsdns.kube.apiclient.transport import ConnectError, ConnectionBroken, ReadTimeout, Response, Transport

BIG = 1 << 20
SLOW = 30.0  # how long a stalled answer stalls, unless the test ends first


class _Handler(BaseHTTPRequestHandler):
    """/small: 2 bytes; /big: 1 MiB; /close: 2 bytes, then the connection closes; /short: says 10
    bytes, sends 4 and closes; /stream: a chunked body, one line, then nothing; /silent: no
    answer. The last two stall until the server's `release` is set."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.paths.append(self.path)
        path = self.path.rsplit("/", 1)[-1]
        if path == "silent":
            self.server.release.wait(SLOW)
            self.close_connection = True
            return
        body = b"x" * BIG if path == "big" else b"ok"
        self.send_response(200)
        if path == "stream":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nline\n\r\n")
            self.wfile.flush()
            self.server.release.wait(SLOW)
            self.close_connection = True
            return
        self.send_header("Content-Length", "10" if path == "short" else str(len(body)))
        if path == "close":
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"part" if path == "short" else body)
        self.close_connection = path in ("close", "short")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass


class _Server(ThreadingHTTPServer):
    """Counts the connections it accepts; records the paths asked for."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.accepted = 0
        self.paths: list[str] = []
        self.release = threading.Event()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn = super().get_request()
        self.accepted += 1
        return conn

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


def _transport(url: str, pool: int = 10) -> Transport:
    return Transport(Kubeconfig(Server(url), Identity(), "test kubeconfig"), pool)


def _get(t: Transport, path: str, timeout: tuple[float, float] = (10.0, 30.0)) -> Response:
    return t.send("GET", path, None, {}, timeout)


def test_sequential_requests_reuse_one_connection(server: _Server) -> None:
    t = _transport(server.url)
    for _ in range(3):
        assert _get(t, "/small").data == b"ok"  # read to its end: back in the pool
    big = _get(t, "/big")
    assert len(b"".join(iter(partial(big.read, 65536), b""))) == BIG
    big.release_conn()  # already back: nothing more
    assert len(b"".join(_get(t, "/big").chunks())) == BIG  # read1 to its end: back too
    assert _get(t, "/small").data == b"ok"
    t.close()
    assert server.accepted == 1


def test_the_server_url_path_prefixes_every_request(server: _Server) -> None:
    t = _transport(server.url + "/behind/a/path")
    assert _get(t, "/small?x=1").data == b"ok"
    t.close()
    assert server.paths == ["/behind/a/path/small?x=1"]


@pytest.mark.parametrize("how", ["unread", "partly read", "connection close"])
def test_a_connection_is_not_reused_unless_its_answer_was_read_to_its_end(server: _Server,
                                                                         how: str) -> None:
    t = _transport(server.url)
    if how == "connection close":
        assert _get(t, "/close").data == b"ok"
    else:
        resp = _get(t, "/big")
        if how == "partly read":
            assert resp.read(10) == b"x" * 10
        resp.release_conn()
    assert _get(t, "/small").data == b"ok"
    t.close()
    assert server.accepted == 2


def test_at_most_pool_idle_connections_are_kept_and_none_is_waited_for(server: _Server) -> None:
    t = _transport(server.url, pool=1)
    a, b = _get(t, "/big"), _get(t, "/big")  # both open at once: a second connection, at once
    for resp in (a, b):
        resp.read()  # a goes back to the pool; b finds it full and closes
    c, d = _get(t, "/big"), _get(t, "/big")  # c reuses a's connection, d is a new one
    for resp in (c, d):
        resp.read()
    t.close()
    assert server.accepted == 3


def test_shutdown_from_another_thread_ends_a_blocked_watch_read(server: _Server) -> None:
    t = _transport(server.url)
    resp = _get(t, "/stream")
    it = lines(resp)
    assert next(it) == b"line"
    called: list[float] = []

    def shut() -> None:
        called.append(time.monotonic())
        resp.shutdown()

    timer = threading.Timer(0.3, shut)
    timer.start()
    with pytest.raises(ConnectionBroken):  # the chunked body breaks off (else: 30 s)
        next(it)
    ended = time.monotonic()
    timer.join()
    assert called  # the read broke off after shutdown() was called (else it waits 30 s for a read timeout)
    print(f"\nread ended {ended - called[0]:.3f} s after shutdown()")
    resp.release_conn()
    resp.shutdown()  # released: nothing to end
    assert _get(t, "/small").data == b"ok"
    t.close()
    assert server.accepted == 2  # the shut connection was not kept


def test_the_read_timeout_bounds_the_wait_for_an_answer_and_for_its_body(server: _Server) -> None:
    t = _transport(server.url)
    started = time.monotonic()
    with pytest.raises(ReadTimeout, match=r"^http://127\.0\.0\.1:\d+: read timed out after 0\.5 s$"):
        _get(t, "/silent", (10.0, 0.5))
    assert time.monotonic() - started >= 0.4  # the message above names the timeout that ended it
    resp = _get(t, "/stream", (10.0, 0.5))
    assert resp.read1(100) == b"line\n"
    with pytest.raises(ReadTimeout) as e:
        resp.read1(100)
    assert is_read_timeout(e.value)  # what the reflector takes for an idle watch
    resp.release_conn()
    t.close()


def test_the_connect_timeout_bounds_the_connection_alone() -> None:
    with socket.socket() as listener:  # accepts nothing: once its queue is full, SYNs go unanswered
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        fillers = []
        try:
            while True:
                s = socket.socket()
                fillers.append(s)
                s.settimeout(0.5)
                s.connect(listener.getsockname())
        except TimeoutError:
            pass
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        c = Client(_transport(url), name="member", timeout=(0.5, 30.0))
        started = time.monotonic()
        with pytest.raises(Unreachable) as e:
            c.get("/version")
        assert time.monotonic() - started >= 0.4  # which timeout ended it: the message, below
        for s in fillers:
            s.close()
    assert isinstance(e.value.__cause__, ConnectError)
    assert str(e.value) == f"member: GET /version: {url}: connect timed out after 0.5 s"
    assert describe(e.value) == f"ConnectError: {url}: connect timed out after 0.5 s"


def test_a_body_that_breaks_off_is_an_error_however_it_is_read(server: _Server) -> None:
    t = _transport(server.url)
    with pytest.raises(ConnectionBroken, match=r"IncompleteRead\(0 bytes read, 6 more expected\)"):
        b"".join(iter(partial(_get(t, "/short").read, 100), b""))
    with pytest.raises(ConnectionBroken, match=r"IncompleteRead\(4 bytes read, 6 more expected\)"):
        assert _get(t, "/short").data
    t.close()
    c = Client(_transport(server.url))
    with pytest.raises(Unreachable, match=r"GET /short: http://127\.0\.0\.1:\d+: IncompleteRead"):
        c.get("/short")
    c.close()


def test_a_refused_connection_says_where() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    c = Client(_transport(url))
    with pytest.raises(Unreachable) as e:
        c.get("/version")
    assert describe(e.value) == f"ConnectError: {url}: [Errno 111] Connection refused"


P = "http://proxy.example:3128"
PROXIED = [  # (server URL, environment, the proxy used or None), as Go's httpproxy decides
    ("https://api.example.com", {"HTTPS_PROXY": P}, P),
    ("https://api.example.com", {"https_proxy": P}, P),
    ("https://api.example.com", {"HTTPS_PROXY": "", "https_proxy": P}, P),
    ("https://api.example.com", {"HTTP_PROXY": P}, None),  # https servers use HTTPS_PROXY alone
    ("http://api.example.com", {"HTTP_PROXY": P}, P),
    ("http://api.example.com", {"HTTP_PROXY": P, "REQUEST_METHOD": "GET"}, None),  # CGI: httpoxy
    ("https://api.example.com", {"HTTPS_PROXY": "proxy.example:3128"}, P),  # no scheme: http://
    ("https://localhost:6443", {"HTTPS_PROXY": P}, None),
    ("https://127.0.0.5:6443", {"HTTPS_PROXY": P}, None),
    ("https://[::1]:6443", {"HTTPS_PROXY": P}, None),
    ("https://api.example.com", {"HTTPS_PROXY": P, "NO_PROXY": "example.com"}, None),
    ("https://example.com", {"HTTPS_PROXY": P, "NO_PROXY": "example.com"}, None),
    ("https://example.com", {"HTTPS_PROXY": P, "NO_PROXY": ".example.com"}, P),  # subdomains alone
    ("https://a.example.com", {"HTTPS_PROXY": P, "NO_PROXY": "*.example.com"}, None),
    ("https://notexample.com", {"HTTPS_PROXY": P, "NO_PROXY": "example.com"}, P),
    ("https://API.Example.com", {"HTTPS_PROXY": P, "no_proxy": " EXAMPLE.com "}, None),
    ("https://api.example.com:6443", {"HTTPS_PROXY": P, "NO_PROXY": "api.example.com:443"}, P),
    ("https://api.example.com:6443", {"HTTPS_PROXY": P, "NO_PROXY": "api.example.com:6443"}, None),
    ("https://api.example.com", {"HTTPS_PROXY": P, "NO_PROXY": "api.example.com:443"}, None),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, None),
    ("https://11.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, P),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3"}, None),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3:443"}, P),
    ("https://[fd00::1]:6443", {"HTTPS_PROXY": P, "NO_PROXY": "fd00::/64"}, None),
    ("https://[fd00::1]:6443", {"HTTPS_PROXY": P, "NO_PROXY": "[fd00::1]:6443"}, None),
    ("https://api.example.com", {"HTTPS_PROXY": P, "NO_PROXY": "*"}, None),
]


@pytest.mark.parametrize(("url", "env", "want"), PROXIED)
def test_the_proxy_of_the_environment(url: str, env: dict[str, str], want: str | None) -> None:
    assert from_environment(url, env) == want
