"""Whom the client trusts over TLS (mcsdns/kube/transport.py), as kubectl does: the
kubeconfig's certificate authority alone when it names one (a server signed by a CA of
the system store only is refused), the system store when it names none, anything when
insecure-skip-tls-verify is set. The system store is played by $SSL_CERT_FILE."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mcsdns.kube.client import Client
from mcsdns.kube.errors import Unreachable

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
GROUP = {"kind": "APIGroup", "name": "multicluster.x-k8s.io", "versions": [{"version": "v1beta1"}]}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    crt, key = d / f"{name}.crt", d / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}")
    return crt, key


def _server_cert(d: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by `ca`."""
    crt, key, csr, ext = d / "server.crt", d / "server.key", d / "server.csr", d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
             "-out", str(csr), "-subj", "/CN=127.0.0.1")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(crt), "-days", "2", "-extfile", str(ext))
    return crt, key


class _Group(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
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
    """Two CAs, "kube" (the kubeconfig's) and "system", and a server signed by "system"."""
    d = tmp_path_factory.mktemp("pki")
    kube, system = _ca(d, "kube"), _ca(d, "system")
    crt, key = _server_cert(d, system)
    return {"kube": kube[0], "system": system[0], "crt": crt, "key": key}


@pytest.fixture(scope="module")
def server(pki: dict[str, Path]) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 whose certificate the "system" CA signed: its URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Group)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki["crt"]), str(pki["key"]))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


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
def test_sslkeylogfile_is_honoured(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As every client built on ssl.create_default_context: the TLS secrets go to
    $SSLKEYLOGFILE when it is set (to read a capture)."""
    log = tmp_path / "keys.log"
    monkeypatch.setenv("SSLKEYLOGFILE", str(log))
    c = _client(tmp_path, server, {})
    assert c.versions("multicluster.x-k8s.io") == ["v1beta1"]
    c.close()
    assert "CLIENT_TRAFFIC_SECRET_0" in log.read_text()
