"""Whom the client trusts over TLS (mcsdns/kube/apiclient/transport.py), as kubectl does: the
kubeconfig's certificate authority alone when it names one (a server signed by a CA of
the system store only is refused), the system store when it names none, anything when
insecure-skip-tls-verify is set; the name checked is tls-server-name when given. The system
store is played by $SSL_CERT_FILE. And the way there: http and https proxies (a CONNECT
tunnel to an https server, TLS inside TLS through an https proxy), and an exec plugin's
client certificate, a new one on new connections."""

from __future__ import annotations

import json
import select
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.helpers import serve_http

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Unreachable, describe

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
NAME = "api.mcsdns.invalid"  # a name only the test proxy resolves
GROUP = {"kind": "APIGroup", "name": "multicluster.x-k8s.io", "versions": [{"version": "v1beta1"}]}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    crt, key = d / f"{name}.crt", d / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}")
    return crt, key


def _cert(d: Path, ca: tuple[Path, Path], name: str, san: str | None = "IP:127.0.0.1") -> tuple[Path, Path]:
    """A certificate with common name `name` and subjectAltName `san` (none: a client's)
    signed by `ca`."""
    crt, key, csr, ext = d / f"{name}.crt", d / f"{name}.key", d / f"{name}.csr", d / f"{name}.cnf"
    ext.write_text(f"subjectAltName={san}\n" if san else "")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
             "-out", str(csr), "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return crt, key


class _Group(BaseHTTPRequestHandler):
    """The API group, to anyone; `seen` gets each request's client port and certificate name."""

    protocol_version = "HTTP/1.1"  # connections kept
    seen: list[tuple[int, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        peer: Any = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        self.seen.append((self.client_address[1], dict(x[0] for x in peer["subject"])["commonName"]
                          if peer else ""))
        body = json.dumps(GROUP).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two CAs, "kube" (the kubeconfig's) and "system"; signed by "system", a certificate for
    127.0.0.1 ("crt", "key") and one for kube.example alone ("named"); signed by "kube", the
    client certificates "one" and "two"."""
    d = tmp_path_factory.mktemp("pki")
    kube, system = _ca(d, "kube"), _ca(d, "system")
    crt, key = _cert(d, system, "server")
    named = _cert(d, system, "named", "DNS:kube.example")
    one, two = _cert(d, kube, "one", None), _cert(d, kube, "two", None)
    return {"kube": kube[0], "system": system[0], "crt": crt, "key": key, "named": named[0],
            "named-key": named[1], "one": one[0], "one-key": one[1], "two": two[0], "two-key": two[1]}


def _tls_server(crt: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server's TLS context (asking for a client certificate that `client_ca` signed, if given)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(str(client_ca))
    return ctx


@pytest.fixture(scope="module")
def server(pki: dict[str, Path]) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 whose certificate the "system" CA signed: its URL."""
    with serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Group), "https",
                _tls_server(pki["crt"], pki["key"])) as url:
        yield url


def _client(tmp_path: Path, url: str, cluster: dict[str, Any]) -> Client:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": {"server": url, **cluster}}],
           "users": [{"name": "u", "user": {"token": "t"}}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(cfg))
    return Client.load(str(path), None, timeout=(5.0, 5.0))


@pytest.fixture
def system_store(pki: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The system store holds the "system" CA alone."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki["system"]))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-dir"))


@pytest.mark.usefixtures("system_store")
def test_the_kubeconfig_ca_alone_is_trusted_when_given(server: str, pki: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """A server the system store trusts but the kubeconfig's CA did not sign is refused."""
    c = _client(tmp_path, server, {"certificate-authority": str(pki["kube"])})
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        c.versions("multicluster.x-k8s.io")
    c.close()
    c = _client(tmp_path, server, {"certificate-authority": str(pki["system"])})
    assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()


@pytest.mark.usefixtures("system_store")
def test_without_a_ca_the_system_store_is_trusted(server: str, tmp_path: Path) -> None:
    c = _client(tmp_path, server, {})
    assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()


def test_insecure_trusts_any_server(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-dir"))
    c = _client(tmp_path, server, {})
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        c.versions("multicluster.x-k8s.io")
    c.close()
    c = _client(tmp_path, server, {"insecure-skip-tls-verify": True})
    assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()


@pytest.mark.usefixtures("system_store")
def test_sslkeylogfile_is_ignored(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As kubectl and client-go: $SSLKEYLOGFILE does not make the TLS secrets of a connection
    to the API server land in a file (main wrote them, to a file readable by all)."""
    log = tmp_path / "keys.log"
    monkeypatch.setenv("SSLKEYLOGFILE", str(log))
    c = _client(tmp_path, server, {})
    assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()
    assert not log.exists()


@pytest.fixture
def named_server(pki: dict[str, Path]) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 with a certificate for kube.example alone."""
    with serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Group), "https",
                _tls_server(pki["named"], pki["named-key"])) as url:
        yield url


def test_tls_server_name_is_the_name_checked(named_server: str, pki: dict[str, Path], tmp_path: Path) -> None:
    c = _client(tmp_path, named_server, {"certificate-authority": str(pki["system"])})
    with pytest.raises(Unreachable, match="IP address mismatch"):
        c.versions("multicluster.x-k8s.io")
    c.close()
    c = _client(tmp_path, named_server, {"certificate-authority": str(pki["system"]),
                                         "tls-server-name": "kube.example"})
    assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()


class _ProxyHandler(socketserver.StreamRequestHandler):
    """A forward proxy's connection: a CONNECT tunnel, or requests forwarded to the server
    that the first one's absolute URI names. The request lines go to `server.seen`."""

    server: _ProxyServer

    def handle(self) -> None:
        line = self.rfile.readline()
        self.server.seen.append(line.decode().strip())
        method, target, _ = line.split()
        head = b"".join(iter(self.rfile.readline, b"\r\n"))
        self.server.auth += [h.split(b":", 1)[1].strip().decode() for h in head.split(b"\r\n")
                             if h.lower().startswith(b"proxy-authorization:")]
        if method == b"CONNECT":
            host, port = target.decode().rsplit(":", 1)
            upstream = socket.create_connection((self.server.hosts.get(host, host), int(port)))
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            u = urlsplit(target.decode())
            host = u.hostname or ""
            upstream = socket.create_connection((self.server.hosts.get(host, host), u.port or 80))
            upstream.sendall(line + head + b"\r\n")
        self.wfile.flush()
        with upstream:
            _relay(self.connection, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy what either sends to the other, in one thread (an SSLSocket is not for two), until
    either closes."""
    while True:
        ready = [s for s in (a, b) if isinstance(s, ssl.SSLSocket) and s.pending()]
        for s in ready or select.select([a, b], [], [], 30)[0]:
            data = s.recv(65536)
            if not data:
                return
            (b if s is a else a).sendall(data)


class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.seen: list[str] = []
        self.auth: list[str] = []  # the Proxy-Authorization headers received
        self.hosts = {NAME: "127.0.0.1"}  # names it resolves itself


@pytest.fixture
def plain_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1."""
    with serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Group), "http", None) as url:
        yield url


@pytest.mark.usefixtures("system_store")  # which trusts the https proxy's certificate
@pytest.mark.parametrize(("proxy_scheme", "server_scheme"),
                         [("http", "https"), ("https", "https"), ("http", "http"), ("https", "http")])
def test_through_a_proxy(proxy_scheme: str, server_scheme: str, server: str, plain_server: str,
                         pki: dict[str, Path], tmp_path: Path) -> None:
    """To an https server through a CONNECT tunnel (TLS inside TLS through an https proxy),
    to an http server by the proxy forwarding each request; connections kept as without."""
    proxy = _ProxyServer()
    with serve_http(proxy, proxy_scheme, _tls_server(pki["crt"], pki["key"])
                if proxy_scheme == "https" else None) as proxy_url:
        url = server if server_scheme == "https" else plain_server
        c = _client(tmp_path, url, {"certificate-authority": str(pki["system"]), "proxy-url": proxy_url})
        for _ in range(2):
            assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
        c.close()
        assert proxy.seen == [f"CONNECT {url.split('//')[1]} HTTP/1.1" if server_scheme == "https"
                              else f"GET {url}/apis/multicluster.x-k8s.io HTTP/1.1"]


def test_a_proxy_that_refuses_says_so(server: str, pki: dict[str, Path], tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        proxy_url = f"http://user:secret@127.0.0.1:{s.getsockname()[1]}"
    c = _client(tmp_path, server, {"certificate-authority": str(pki["system"]), "proxy-url": proxy_url})
    with pytest.raises(Unreachable) as e:
        c.versions("multicluster.x-k8s.io")
    c.close()
    shown = proxy_url.replace("user:secret@", "")  # a proxy's credentials are not shown
    assert describe(e.value) == f"ConnectError: {server} through proxy {shown}: [Errno 111] Connection " \
                                "refused"


PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
             "REQUEST_METHOD")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("system_store", "no_proxy_env")
@pytest.mark.parametrize("scheme", ["https", "http"])
def test_the_proxy_of_the_environment_is_used_as_client_go_uses_it(
        scheme: str, server: str, plain_server: str, pki: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS_PROXY for an https server (a CONNECT tunnel), http_proxy for an http one (each
    request forwarded), with the proxy URL's user info as Proxy-Authorization; the server's
    name is one only the proxy resolves. Main ignored the environment (no such host)."""
    proxy = _ProxyServer()
    with serve_http(proxy, "http", None) as proxy_url:
        port = urlsplit(server if scheme == "https" else plain_server).port
        url = f"{scheme}://{NAME}:{port}"
        monkeypatch.setenv("HTTPS_PROXY" if scheme == "https" else "http_proxy",
                           proxy_url.replace("//", "//user:p%40ss@"))
        monkeypatch.setenv("NO_PROXY", "example.com,10.0.0.0/8")
        trust = {"certificate-authority": str(pki["system"]), "tls-server-name": "127.0.0.1"}
        c = _client(tmp_path, url, trust if scheme == "https" else {})
        for _ in range(2):
            assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
        c.close()
    first = (f"CONNECT {NAME}:{port} HTTP/1.1" if scheme == "https"
             else f"GET {url}/apis/multicluster.x-k8s.io HTTP/1.1")
    assert proxy.seen[0] == first, proxy.seen
    assert proxy.auth[0] == "Basic dXNlcjpwQHNz", proxy.auth  # user:p@ss


@pytest.mark.usefixtures("no_proxy_env")
@pytest.mark.parametrize("no_proxy", [".mcsdns.invalid", "mcsdns.invalid", NAME, "*", f"{NAME}:PORT"])
def test_no_proxy_excludes_a_server(no_proxy: str, plain_server: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = _ProxyServer()
    with serve_http(proxy, "http", None) as proxy_url:
        port = urlsplit(plain_server).port
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("no_proxy", f"example.com, {no_proxy.replace('PORT', str(port))}")
        c = _client(tmp_path, f"http://{NAME}:{port}", {})
        with pytest.raises(Unreachable):  # straight to a name that does not resolve
            c.versions("multicluster.x-k8s.io")
        c.close()
    assert proxy.seen == []


@pytest.mark.usefixtures("no_proxy_env")
def test_proxy_url_of_the_kubeconfig_wins_over_the_environment(plain_server: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = _ProxyServer(), _ProxyServer()
    with serve_http(ours, "http", None) as ours_url, serve_http(theirs, "http", None) as theirs_url:
        monkeypatch.setenv("HTTP_PROXY", theirs_url)
        c = _client(tmp_path, plain_server.replace("127.0.0.1", NAME), {"proxy-url": ours_url})
        assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
        c.close()
    assert len(ours.seen) == 1 and theirs.seen == []


@pytest.fixture
def mutual_server(pki: dict[str, Path]) -> Iterator[str]:
    """An HTTPS server that asks for a client certificate the "kube" CA signed."""
    with serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Group), "https",
                _tls_server(pki["crt"], pki["key"], client_ca=pki["kube"])) as url:
        yield url


def test_a_new_exec_client_certificate_is_used_on_new_connections(mutual_server: str, pki: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """The plugin's credential has expired whenever it is given: it runs again at every request,
    and gives the certificate `which` names; the connections of the old one are not reused."""
    which = tmp_path / "which"
    which.write_text("one")
    plugin = tmp_path / "plugin"
    plugin.write_text(f"""#!{sys.executable}
import json, pathlib
name = pathlib.Path({str(which)!r}).read_text()
pem = {{k: pathlib.Path({str(pki["kube"].parent)!r}, name + ext).read_text()
       for k, ext in (("clientCertificateData", ".crt"), ("clientKeyData", ".key"))}}
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{**pem, "expirationTimestamp": "2000-01-01T00:00:00Z"}}}}))
""")
    plugin.chmod(0o755)
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": {"server": mutual_server,
                                                  "certificate-authority": str(pki["system"])}}],
           "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                     "command": str(plugin)}}}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    (tmp_path / "kubeconfig").write_text(json.dumps(cfg))
    c = Client.load(str(tmp_path / "kubeconfig"), None, timeout=(5.0, 5.0))
    _Group.seen.clear()
    for name in ("one", "one", "two", "two"):
        which.write_text(name)
        assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()
    (p1, n1), (p2, n2), (p3, n3), (p4, n4) = _Group.seen
    assert (n1, n2, n3, n4) == ("one", "one", "two", "two")
    assert p1 == p2 != p3 == p4  # kept while the certificate is the same
