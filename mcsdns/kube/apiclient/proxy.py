"""The way to an API server through a proxy: which proxy (the kubeconfig's `proxy-url`, else
the environment's as Go's golang.org/x/net/http/httpproxy reads it, as client-go does), the
CONNECT tunnel to an https server, and TLS inside the TLS connection to an https proxy."""

from __future__ import annotations

import http.client
import io
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

CHUNK = 65536  # the most one read returns
_DEFAULT_PORTS = {"http": 80, "https": 443}
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def from_environment(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The proxy for requests to `url` that `env` (default: os.environ) names: HTTPS_PROXY
    (https_proxy) for an https URL, HTTP_PROXY (http_proxy) for an http one (not in a CGI
    program: REQUEST_METHOD set), unless NO_PROXY (no_proxy) excludes the host or it is
    localhost or a loopback address. A proxy named without a scheme is http://. None: no proxy."""
    env = os.environ if env is None else env
    u = urlsplit(url)
    https = u.scheme == "https"
    if not https and env.get("REQUEST_METHOD"):
        return None
    proxy = _first(env, "HTTPS_PROXY", "https_proxy") if https else _first(env, "HTTP_PROXY", "http_proxy")
    host = (u.hostname or "").lower()
    if not proxy or not host or not _use_proxy(host, str(u.port or _DEFAULT_PORTS[u.scheme]),
                                               _first(env, "NO_PROXY", "no_proxy")):
        return None
    try:
        p = urlsplit(proxy)
    except ValueError:
        return proxy  # the transport says it is not a URL
    return proxy if p.scheme and p.netloc else f"http://{proxy}"


def _first(env: Mapping[str, str], *names: str) -> str:
    return next((env[n] for n in names if env.get(n)), "")


def _use_proxy(host: str, port: str, no_proxy: str) -> bool:
    """Whether requests to host:port go through the proxy: not to localhost or a loopback
    address, nor to what a NO_PROXY entry matches (`_excludes`)."""
    if host == "localhost":
        return False
    try:
        ip: IP | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_loopback:
        return False
    entries = [e.strip().lower() for e in no_proxy.split(",")]
    return not any(_excludes(e, host, port, ip) for e in entries if e)


def _excludes(entry: str, host: str, port: str, ip: IP | None) -> bool:
    """Whether NO_PROXY entry `entry` matches host:port: `*`, an IP or CIDR, a host or domain
    (`example.com` matches it and its subdomains, `.example.com` and `*.example.com` the
    subdomains alone), each but a CIDR with an optional `:port`."""
    if entry == "*":
        return True
    if "/" in entry:
        try:
            return ip is not None and ip in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
    name, want = _split_port(entry)
    if not name or (want and want != port):
        return False
    try:
        return ip == ipaddress.ip_address(name)
    except ValueError:
        pass
    if name.startswith("*."):
        name = name[1:]
    if name.startswith("."):
        return host.endswith(name)
    return host == name or host.endswith("." + name)


def _split_port(entry: str) -> tuple[str, str]:
    """`host:port`, `[v6]:port`, a bare IPv6 address or a host -> (host, port or "")."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""


def connect_tunnel(sock: socket.socket, host: str, port: int, auth: str | None) -> None:
    """Ask the proxy at the other end of `sock` for a tunnel to host:port (`auth`: its
    Proxy-Authorization)."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = f"Proxy-Authorization: {auth}\r\n" if auth else ""
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{head}\r\n".encode())
    answer = http.client.HTTPResponse(sock, method="CONNECT")
    try:
        answer.begin()  # the status line and headers, nothing after them: the server's TLS is next
    finally:
        answer.close()
    if answer.status != 200:
        raise OSError(f"the proxy refused a tunnel to {target}: {answer.status} {answer.reason}")


class TLSInTLS:
    """TLS to the server inside the TLS connection to an https proxy (`ssl` wraps only
    sockets): what http.client and the pool use of a socket."""

    def __init__(self, outer: ssl.SSLSocket, ctx: ssl.SSLContext, server_name: str) -> None:
        self.outer, self.incoming, self.outgoing = outer, ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname=server_name)
        self._io(self.tls.do_handshake)

    def _io(self, op: Callable[..., Any], *args: Any) -> Any:
        """`op` of the TLS object, feeding it what the outer connection brings until it can."""
        while True:
            try:
                result = op(*args)
            except ssl.SSLWantReadError:
                self._flush()
                data = self.outer.recv(CHUNK)
                if data:
                    self.incoming.write(data)
                else:
                    self.incoming.write_eof()
                continue
            self._flush()
            return result

    def _flush(self) -> None:
        out = self.outgoing.read()
        if out:
            self.outer.sendall(out)

    def recv_into(self, buf: memoryview) -> int:
        try:
            return int(self._io(self.tls.read, len(buf), buf))
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # closed, with or without TLS's goodbye
            return 0

    def sendall(self, data: bytes) -> None:
        self._io(self.tls.write, data)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_Reader(self))

    def settimeout(self, timeout: float | None) -> None:
        self.outer.settimeout(timeout)

    def shutdown(self, how: int) -> None:
        self.outer.shutdown(how)

    def fileno(self) -> int:
        return self.outer.fileno()

    def close(self) -> None:
        self.outer.close()


class _Reader(io.RawIOBase):
    """A `TLSInTLS` as a file to read (closing it leaves the connection open, as a socket's
    makefile does)."""

    def __init__(self, sock: TLSInTLS) -> None:
        self.sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        return self.sock.recv_into(memoryview(buf))
