"""HTTP(S) to one API server as its kubeconfig says, over the standard library's
`http.client`: the TLS trust and client certificate, the proxy (`proxy`: http or https, the
kubeconfig's or the environment's), a pool of kept connections, and the credentials' and
impersonation headers on every request. No retries and no redirects: callers decide.

Every failure to get or read an answer is an OSError naming the server: `ConnectError` (no
connection), `ReadTimeout`, `ConnectionBroken` (the connection failed after it was made)."""

from __future__ import annotations

import http.client
import os
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from .credentials import Credentials, basic, impersonation
from .kubeconfig import Kubeconfig, KubeconfigError, shown
from .proxy import CHUNK, TLSInTLS, connect_tunnel, from_environment

Timeout = tuple[float, float]  # connect, read


class ConnectError(OSError):
    """No connection to the server (or its proxy): refused, unreachable, timed out, or the
    TLS handshake or the proxy's tunnel failed."""


class ReadTimeout(TimeoutError):
    """Nothing arrived within the read timeout, waiting for an answer or reading its body."""


class ConnectionBroken(ConnectionError):
    """The connection failed after it was made: reset or closed before the answer ended, or
    an answer that is not HTTP."""


class Transport:
    """Sends requests to `cfg.server`; `send` returns the unread response. Thread-safe: at most
    `pool` idle connections are kept; when none is idle, a new one is made."""

    def __init__(self, cfg: Kubeconfig, pool: int = 10) -> None:
        self.cfg, self.pool = cfg, pool
        self.credentials = Credentials(cfg)
        s, src = cfg.server, cfg.source
        url = urlsplit(s.url)
        self._https = url.scheme == "https"
        self._host, self._port = _host_port(url.netloc, 443 if self._https else 80,
                                            f"{src}: cluster server {s.url}")
        self._host_header = url.netloc.rpartition("@")[2]
        self._prefix = url.path  # of every request's path (a server behind a path)
        self._where = s.url
        self._proxy: tuple[bool, str, int] | None = None  # https, host, port
        self._proxy_auth: str | None = None  # Proxy-Authorization, from the proxy URL's user info
        proxy_url, what = s.proxy_url, "proxy-url"
        if not proxy_url:
            proxy_url, what = from_environment(s.url), "the proxy of the environment (HTTPS_PROXY...)"
        if proxy_url:
            try:
                p = urlsplit(proxy_url)
            except ValueError as e:
                raise KubeconfigError(f"{src}: {what} {shown(proxy_url)}: not a URL") from e
            if p.scheme not in ("http", "https"):
                raise KubeconfigError(f"{src}: {what} {shown(proxy_url)}: only http(s) proxies")
            host, port = _host_port(p.netloc, 443 if p.scheme == "https" else 80,
                                    f"{src}: {what} {shown(proxy_url)}")
            self._proxy = p.scheme == "https", host, port
            if p.username is not None:
                self._proxy_auth = basic(unquote(p.username), unquote(p.password or ""))
            self._where = f"{s.url} through proxy {shown(proxy_url)}"
            if not self._https:  # the proxy forwards requests for an http server
                self._prefix = s.url
        self._impersonate = impersonation(cfg.identity.impersonate)
        self._lock = threading.Lock()
        self._generation = -1
        self._pool: _Pool | None = None
        self._pool_for()  # a bad certificate or proxy is a configuration error, now

    def send(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
             timeout: Timeout) -> Response:
        """One request (`path` with its query string); the response, not yet read. A 401
        makes the credentials renew themselves for the next request."""
        lines: list[tuple[str, str | bytes]] = [("Host", self._host_header), *headers.items()]
        auth = self.credentials.authorization()
        if auth:
            lines.append(("Authorization", auth))
        if self._proxy_auth and not self._https:  # each request goes to the proxy
            lines.append(("Proxy-Authorization", self._proxy_auth))
        lines += self._impersonate
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(("Content-Length", str(len(body or b""))))
        pool = self._pool_for()
        conn = pool.get(timeout[0], self._where)
        sock = conn.sock  # the response's, even when http.client lets go of it (Connection: close)
        try:
            sock.settimeout(timeout[1])
            conn.putrequest(method, self._prefix + path, skip_host=True)  # Accept-Encoding: identity
            for name, value in lines:  # not conn.request: a header may be sent more than once
                conn.putheader(name, value)
            conn.endheaders(body)
            raw = conn.getresponse()
        except BaseException as e:
            conn.close()
            if isinstance(e, OSError | http.client.HTTPException):
                raise _failure(e, self._where, timeout[1]) from e
            raise
        resp = Response(raw, conn, sock, pool, self._where, timeout[1])
        if resp.status == 401:
            self.credentials.invalidate()
        return resp

    def close(self) -> None:
        """Close the kept connections (one in use closes when released); later requests make
        new ones."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = _Pool(self._pool.dial, self.pool)

    def _pool_for(self) -> _Pool:
        """The pool, made anew (the old one's connections closed) when an exec plugin's
        client certificate changed."""
        gen = self.credentials.generation if self.cfg.identity.exec is not None else 0
        with self._lock:
            if self._pool is None or gen != self._generation:
                if self._pool is not None:
                    self._pool.close()
                self._pool, self._generation = _Pool(self._dialer(), self.pool), gen
            return self._pool

    def _dialer(self) -> Callable[[float], _Connection]:
        """What makes a connection (given its connect timeout), with this moment's TLS contexts."""
        tls = self._tls() if self._https else None
        name = self.cfg.server.tls_server_name or self._host
        if self._proxy is None:
            return partial(_Connection, self._host, self._port, tls=tls, server_name=name)
        https, host, port = self._proxy
        proxy_tls = None
        if https:  # trusted by the system store (not the kubeconfig's CA), unless insecure
            proxy_tls = ssl.create_default_context()
            if self.cfg.server.insecure:
                proxy_tls.check_hostname, proxy_tls.verify_mode = False, ssl.CERT_NONE
        return partial(_Connection, host, port, tls=tls, server_name=name, proxy_tls=proxy_tls,
                       tunnel=(self._host, self._port) if self._https else None, proxy_auth=self._proxy_auth)

    def _tls(self) -> ssl.SSLContext:
        """One context, trusting as kubectl does: the kubeconfig's CA alone when it names one,
        else the system store (loaded only then: ~20 ms of CPU); nothing when insecure. Never
        $SSLKEYLOGFILE (kubectl and client-go do not write the TLS secrets anywhere)."""
        s, src = self.cfg.server, self.cfg.source
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if s.insecure:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        elif s.ca:
            try:
                ctx.load_verify_locations(cadata=s.ca)
            except (ssl.SSLError, ValueError) as e:
                raise KubeconfigError(f"{src}: certificate-authority is not a PEM certificate: {e}") from e
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        cert = self.credentials.certificate(run=False)  # an exec plugin runs at the first request
        if cert is not None:
            load_pair(ctx, cert, src)
        return ctx


class Response:
    """An answer (`status`, `reason`, `headers`) whose body is read once: whole (`data`) or in parts
    (`read`, `read1`, `chunks`). Its connection goes back to the pool as soon as the body has
    been read to its end; `release_conn` closes it if it has not."""

    def __init__(self, raw: http.client.HTTPResponse, conn: _Connection, sock: Any, pool: _Pool,
                 where: str, read_timeout: float) -> None:
        self.status, self.reason = raw.status, raw.reason
        self.headers = raw.headers
        self._raw, self._sock, self._pool = raw, sock, pool
        self._conn: _Connection | None = conn  # None once released
        self._where, self._read_timeout = where, read_timeout
        self._data: bytes | None = None
        self._lock = threading.Lock()  # `shutdown` (another thread) against `release_conn`
        self._reusable = True  # False once shut down or a read failed

    @property
    def data(self) -> bytes:
        """The body (what is left of it), read at the first use."""
        if self._data is None:
            self._data = self.read()
        return self._data

    def read(self, n: int | None = None) -> bytes:
        """`n` bytes of the body (fewer at its end; all that is left when None); b"" at its end."""
        return self._read(self._raw.read, n)

    def read1(self, n: int) -> bytes:
        """What has arrived of the body, up to `n` bytes, waiting only while nothing has; b""
        at its end."""
        return self._read(self._raw.read1, n)

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (a watch's events as soon as the server sends them)."""
        return iter(partial(self.read1, CHUNK), b"")

    def release_conn(self) -> None:
        """Give the connection back to the pool if the body was read to its end and the server
        keeps the connection open, else close it. Once; later calls do nothing."""
        raw = self._raw
        with self._lock:
            conn, self._conn = self._conn, None
            keep = self._reusable and _ended(raw) and not raw.will_close
        if conn is None:
            return
        raw.close()
        if keep:
            self._pool.put(conn)
        else:
            conn.close()

    def shutdown(self) -> None:
        """From another thread: end a read of the body blocked in this one at once (it sees
        the end of the body, or an error); the connection is then closed, not kept."""
        with self._lock:
            if self._conn is not None:
                self._reusable = False
                self._sock.shutdown(socket.SHUT_RDWR)

    def _read(self, read: Callable[[Any], bytes], n: int | None) -> bytes:
        """`read(n)` of the body; the connection goes back to the pool at the body's end."""
        try:
            data = read(n)
            if not data and n and self._raw.length:  # http.client says b"" when it breaks off
                raise http.client.IncompleteRead(b"", self._raw.length)
        except (OSError, http.client.HTTPException) as e:
            self._reusable = False
            raise _failure(e, self._where, self._read_timeout) from e
        if _ended(self._raw):
            self.release_conn()
        return data


class _Pool:
    """The kept connections of one TLS configuration: at most `size` idle ones (the last kept
    is reused first); none kept once closed."""

    def __init__(self, dial: Callable[[float], _Connection], size: int) -> None:
        self.dial, self.size = dial, size
        self.idle: list[_Connection] = []
        self.lock = threading.Lock()
        self.closed = False

    def get(self, connect_timeout: float, where: str) -> _Connection:
        """An idle connection the server has not closed, else a new one (`ConnectError`)."""
        while True:
            with self.lock:
                conn = self.idle.pop() if self.idle else None
            if conn is None:
                break
            if not _readable(conn.sock):
                return conn
            conn.close()  # closed by the server (or it sent what nothing asked for)
        conn = self.dial(connect_timeout)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException, ValueError) as e:
            conn.close()
            why = (f"connect timed out after {connect_timeout:g} s" if isinstance(e, TimeoutError)
                   else _detail(e))
            raise ConnectError(f"{where}: {why}") from e
        return conn

    def put(self, conn: _Connection) -> None:
        with self.lock:
            if not self.closed and len(self.idle) < self.size:
                self.idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


class _Connection(http.client.HTTPConnection):
    """One connection: TCP to the server or to the proxy (with TLS to an https proxy), the
    proxy's CONNECT `tunnel` to an https server, then TLS to the server when `tls` is given.
    `timeout` is the connect timeout: the caller sets the read timeout after `connect`."""

    def __init__(self, host: str, port: int, timeout: float, *, tls: ssl.SSLContext | None,
                 server_name: str, proxy_tls: ssl.SSLContext | None = None,
                 tunnel: tuple[str, int] | None = None, proxy_auth: str | None = None) -> None:
        super().__init__(host, port, timeout)
        self.tls, self.server_name, self.proxy_tls, self.tunnel = tls, server_name, proxy_tls, tunnel
        self.proxy_auth = proxy_auth

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        proxy = None
        if self.proxy_tls is not None:
            self.sock = proxy = self.proxy_tls.wrap_socket(self.sock, server_hostname=self.host)
        if self.tunnel is not None:
            connect_tunnel(self.sock, *self.tunnel, self.proxy_auth)
        if self.tls is not None:  # http.client uses of a socket only what TLSInTLS has
            self.sock = (self.tls.wrap_socket(self.sock, server_hostname=self.server_name) if proxy is None
                         else cast(socket.socket, TLSInTLS(proxy, self.tls, self.server_name)))


def _host_port(netloc: str, default: int, what: str) -> tuple[str, int]:
    """The host and port of a URL's `netloc` (KubeconfigError when it has no host or a bad port)."""
    u = urlsplit(f"//{netloc}")
    try:
        port = default if u.port is None else u.port
    except ValueError as e:
        raise KubeconfigError(f"{what}: {e}") from e
    if not u.hostname:
        raise KubeconfigError(f"{what}: no host")
    return u.hostname, port


def _ended(raw: http.client.HTTPResponse) -> bool:
    """Whether a body was read to its end: all its Content-Length, or its last chunk (or, when
    the server closes the connection after it, the close)."""
    return raw.length == 0 or (raw.length is None and raw.isclosed())


def _readable(sock: Any) -> bool:
    """Whether a socket has something to read now (an idle connection: the server closed it)."""
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(0))


def _detail(e: BaseException) -> str:
    return str(e) if isinstance(e, OSError) else repr(e)


def _failure(e: OSError | http.client.HTTPException, where: str, read_timeout: float) -> OSError:
    """What a failure to send a request or to read its answer raises."""
    if isinstance(e, TimeoutError):
        return ReadTimeout(f"{where}: read timed out after {read_timeout:g} s")
    return ConnectionBroken(f"{where}: {_detail(e)}")


def load_pair(ctx: ssl.SSLContext, pair: tuple[str, str], source: str) -> None:
    """Load a PEM certificate and key into `ctx` (through a private temporary folder:
    `ssl` reads only files)."""
    import tempfile  # only for a client certificate

    with tempfile.TemporaryDirectory(prefix="mcsdns-tls-") as d:
        paths = []
        for name, text in zip(("cert.pem", "key.pem"), pair, strict=True):
            path = os.path.join(d, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            paths.append(path)
        try:
            ctx.load_cert_chain(paths[0], paths[1])
        except (ssl.SSLError, ValueError) as e:
            raise KubeconfigError(f"{source}: client certificate and key do not load: {e}") from e
