"""The credentials of one identity, kept fresh: a token file is re-read when it changes
(a rotated projected token or Secret), an exec plugin's credential is renewed before it
expires, and either is dropped after a 401 so the next request renews it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from datetime import datetime
from typing import Any

from .errors import Unreachable
from .kubeconfig import Kubeconfig

CHECK = 1.0  # s between checks of a token file
MARGIN = 10.0  # s before an exec credential's expiry it is renewed
EXEC_TIMEOUT = 60.0


class Credentials:
    """`authorization()` is the header value for the next request (None: none);
    `certificate()` the client certificate and key (PEM), or None; `generation` grows
    whenever the certificate changes, so the transport rebuilds its TLS context."""

    def __init__(self, cfg: Kubeconfig) -> None:
        self.cfg, self.ident = cfg, cfg.identity
        self.generation = 0
        self._lock = threading.Lock()
        self._file_token: str | None = None
        self._file_stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._exec: dict[str, Any] | None = None  # the plugin's status
        self._expires = float("inf")
        if self.ident.token_file:
            self._read_token_file()

    def authorization(self) -> str | None:
        i = self.ident
        if i.exec is not None:
            st = self._exec_status()
            if st.get("token"):
                return f"Bearer {st['token']}"
        if i.token_file:
            with self._lock:
                if time.monotonic() - self._checked >= CHECK:
                    self._read_token_file()
                if self._file_token:
                    return f"Bearer {self._file_token}"
        if i.token:
            return f"Bearer {i.token}"
        if i.username is not None and i.password is not None:
            return "Basic " + base64.b64encode(f"{i.username}:{i.password}".encode()).decode()
        return None

    def certificate(self, run: bool = True) -> tuple[str, str] | None:
        """Without `run`, an exec plugin that has not run yet is not started."""
        if self.ident.exec is not None and (run or self._exec is not None):
            st = self._exec_status()
            if st.get("clientCertificateData") and st.get("clientKeyData"):
                return str(st["clientCertificateData"]), str(st["clientKeyData"])
        if self.ident.cert and self.ident.key:
            return self.ident.cert, self.ident.key
        return None

    def invalidate(self) -> None:
        """After a 401: re-read the token file and re-run the plugin at the next request."""
        with self._lock:
            self._checked, self._file_stamp = 0.0, None
            self._expires = 0.0

    def _read_token_file(self) -> None:
        """Under the lock (or at construction): the token file, when it changed."""
        self._checked = time.monotonic()
        path = self.ident.token_file or ""
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._file_stamp:
                with open(path) as f:
                    self._file_token = f.read().strip()
                self._file_stamp = stamp
        except OSError:
            pass  # keep the last token; the server's 401 says the rest

    def _exec_status(self) -> dict[str, Any]:
        with self._lock:
            if self._exec is None or time.time() >= self._expires - MARGIN:
                old = self.certificate_of(self._exec)
                self._exec, self._expires = run_plugin(self.cfg)
                if self.certificate_of(self._exec) != old:
                    self.generation += 1
            return self._exec

    @staticmethod
    def certificate_of(st: dict[str, Any] | None) -> tuple[Any, Any]:
        return (st or {}).get("clientCertificateData"), (st or {}).get("clientKeyData")


def run_plugin(cfg: Kubeconfig) -> tuple[dict[str, Any], float]:
    """Run the exec credential plugin (client.authentication.k8s.io): its status and the
    Unix time it expires (inf when it does not say)."""
    ex: Any = cfg.identity.exec
    command = str(ex["command"])
    version = str(ex.get("apiVersion") or "client.authentication.k8s.io/v1")
    spec: dict[str, Any] = {"interactive": False}
    if ex.get("provideClusterInfo"):
        spec["cluster"] = {k: v for k, v in cfg.exec_cluster.items() if k != "extensions"}
    env = dict(os.environ)
    env.update({str(e.get("name")): str(e.get("value")) for e in ex.get("env") or [] if isinstance(e, dict)})
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": version, "kind": "ExecCredential", "spec": spec})
    where = f"{cfg.source}: exec credential plugin {command}"
    try:
        run = subprocess.run([command, *[str(a) for a in ex.get("args") or []]], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=EXEC_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unreachable(f"{where}: {e}") from e
    if run.returncode != 0:
        err = " ".join(run.stderr.decode(errors="replace").split())[:300]
        raise Unreachable(f"{where}: exit {run.returncode}: {err}")
    try:
        status = json.loads(run.stdout)["status"]
        if not isinstance(status, dict):
            raise ValueError("status is not a mapping")
    except (ValueError, KeyError, TypeError) as e:
        raise Unreachable(f"{where}: not an ExecCredential: {e}") from e
    expires = float("inf")
    if status.get("expirationTimestamp"):
        try:
            stamp = str(status["expirationTimestamp"]).replace("Z", "+00:00")
            expires = datetime.fromisoformat(stamp).timestamp()
        except ValueError as e:
            raise Unreachable(f"{where}: bad expirationTimestamp") from e
    return status, expires
