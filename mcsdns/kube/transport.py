"""HTTP(S) to one API server as its kubeconfig says: the TLS trust and client
certificate, the proxy, a pool of kept connections, and the credentials' header on every
request. No retries and no redirects: callers decide."""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

import urllib3

from .credentials import Credentials
from .kubeconfig import Kubeconfig, KubeconfigError

Timeout = tuple[float, float]  # connect, read


class Transport:
    """Sends requests to `cfg.server`; `send` returns the unread response."""

    def __init__(self, cfg: Kubeconfig, pool: int = 10) -> None:
        self.cfg, self.pool = cfg, pool
        self.credentials = Credentials(cfg)
        self._lock = threading.Lock()
        self._generation = -1
        self._manager: urllib3.PoolManager | None = None
        self._manager_for()  # a bad certificate or proxy is a configuration error, now

    def send(self, method: str, path: str, body: bytes | None, headers: dict[str, str],
             timeout: Timeout) -> Any:
        """One request (`path` with its query string); the response, not yet read. A 401
        makes the credentials renew themselves for the next request."""
        auth = self.credentials.authorization()
        if auth:
            headers = {**headers, "Authorization": auth}
        resp = self._manager_for().request(
            method, self.cfg.server.url + path, body=body, headers=headers, preload_content=False,
            redirect=False, retries=False, timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]))
        if resp.status == 401:
            self.credentials.invalidate()
        return resp

    def close(self) -> None:
        with self._lock:
            if self._manager is not None:
                self._manager.clear()

    def _manager_for(self) -> urllib3.PoolManager:
        gen = self.credentials.generation if self.cfg.identity.exec is not None else 0
        with self._lock:
            if self._manager is None or gen != self._generation:
                if self._manager is not None:
                    self._manager.clear()
                self._manager, self._generation = self._build(), gen
            return self._manager

    def _build(self) -> urllib3.PoolManager:
        s = self.cfg.server
        kw: dict[str, Any] = {"maxsize": self.pool, "block": False}
        if s.url.startswith("https://"):
            kw["ssl_context"] = self._tls()
            if s.tls_server_name:
                kw["server_hostname"] = s.tls_server_name
            if s.insecure:
                kw["cert_reqs"] = ssl.CERT_NONE
                kw["assert_hostname"] = False
        if s.proxy_url:
            if not s.proxy_url.startswith(("http://", "https://")):
                raise KubeconfigError(f"{self.cfg.source}: proxy-url {s.proxy_url}: only http(s) proxies")
            return urllib3.ProxyManager(s.proxy_url, num_pools=4, **kw)
        return urllib3.PoolManager(num_pools=4, **kw)

    def _tls(self) -> ssl.SSLContext:
        """One context, trusting as kubectl does: the kubeconfig's CA alone when it names one,
        else the system store (loaded only then: ~20 ms of CPU); nothing when insecure."""
        s, src = self.cfg.server, self.cfg.source
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if os.environ.get("SSLKEYLOGFILE"):  # as ssl.create_default_context does
            ctx.keylog_filename = os.environ["SSLKEYLOGFILE"]
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
