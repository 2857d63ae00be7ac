"""The credentials of one identity, kept fresh: a token file is re-read when it changes
(a rotated projected token or Secret), an exec plugin's credential is renewed before it
expires, and either is dropped after a 401 so the next request renews it. A plugin's answer
is checked as client-go checks it; its stderr is never shown beyond a redacted first line.
And the impersonation headers of the identity's `as*` fields."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import threading
import time
from datetime import datetime
from typing import Any

from .errors import Unreachable
from .kubeconfig import Impersonation, Kubeconfig

CHECK = 1.0  # s between checks of a token file
MARGIN = 10.0  # s before an exec credential's expiry it is renewed
EXEC_TIMEOUT = 60.0
STDERR_SHOWN = 200  # characters of a failed plugin's first stderr line shown
_SECRETS = (  # what is redacted in that line: pattern, replacement
    (re.compile(r"(?i)\b(bearer|basic)\s+\S+"), r"\1 [redacted]"),  # an Authorization value
    (re.compile(r"eyJ[\w.-]*"), "[redacted]"),  # a JWT
    (re.compile(r"(?i)(?<![a-z0-9])((?:token|secret|passw(?:or)?d|key|credential)s?[\"']?\s*[=:]\s*)\S+"),
     r"\1[redacted]"),  # token=..., access_token: ..., "password": ...
    (re.compile(r"(?<![\w+/=-])(?=[\w+/=-]*\d)[\w+/=-]{16,}"), "[redacted]"),  # base64 or hex, a digit in it
)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
# a header key byte sent as is in Impersonate-Extra-<key> (client-go's legalHeaderKeyBytes, but %)
_HEADER_KEY = frozenset(b"!#$&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


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
            return basic(i.username, i.password)
        if self.cfg.server.basic is not None:  # the server URL's user info, as Go's HTTP client
            return basic(*self.cfg.server.basic)
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
    """Run the exec credential plugin (client.authentication.k8s.io): its `answer`."""
    ex: Any = cfg.identity.exec
    command = str(ex["command"])
    version = str(ex["apiVersion"])  # checked at load
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
    except subprocess.TimeoutExpired as e:
        raise Unreachable(f"{where}: no answer within {EXEC_TIMEOUT:g} s") from e
    except OSError as e:
        raise Unreachable(f"{where}: {e.strerror or e}") from e
    if run.returncode != 0:
        raise Unreachable(f"{where}: exit {run.returncode}{first_line(run.stderr)}")
    return answer(run.stdout, version, where)


def answer(stdout: bytes, version: str, where: str) -> tuple[dict[str, Any], float]:
    """A plugin's ExecCredential checked as client-go checks it (`Unreachable` when it is not
    one): its status and the Unix time it expires (inf when it does not say)."""
    try:
        cred = json.loads(stdout)
    except ValueError as e:
        raise Unreachable(f"{where}: not an ExecCredential: not JSON ({e})") from e
    if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
        raise Unreachable(f"{where}: not an ExecCredential (its kind is not ExecCredential)")
    if cred.get("apiVersion") != version:
        raise Unreachable(f"{where}: configured to use API version {version}, the plugin returned "
                          f"{str(cred.get('apiVersion'))[:60]!r}")
    status = cred.get("status")
    if not isinstance(status, dict):
        raise Unreachable(f"{where}: the plugin returned no status")
    token, cert, key = (status.get(k) for k in ("token", "clientCertificateData", "clientKeyData"))
    if any(v is not None and not isinstance(v, str) for v in (token, cert, key)):
        raise Unreachable(f"{where}: the plugin returned a token, certificate or key that is not a string")
    if not (token or cert or key):
        raise Unreachable(f"{where}: the plugin returned no token and no certificate and key")
    if bool(cert) != bool(key):
        raise Unreachable(f"{where}: the plugin returned only a certificate or a key, not both")
    stamp = status.get("expirationTimestamp")
    if stamp is None:
        return status, float("inf")
    if not isinstance(stamp, str) or not _RFC3339.fullmatch(stamp):
        raise Unreachable(f"{where}: expirationTimestamp is not an RFC 3339 time with a zone")
    return status, datetime.fromisoformat(stamp).timestamp()


def first_line(stderr: bytes) -> str:
    """": LINE": the first non-blank line of a plugin's stderr, cut short and with anything
    token-like redacted ("" when there is none). The rest is never shown."""
    line = next((ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()), "")
    line = " ".join(line[:8 * STDERR_SHOWN].split())
    for pattern, replacement in _SECRETS:
        line = pattern.sub(replacement, line)
    return f": {line[:STDERR_SHOWN]}" if line else ""


def impersonation(imp: Impersonation | None) -> list[tuple[str, bytes]]:
    """The Impersonate-* headers of `imp`, as client-go sends them: one Impersonate-Group per
    group and one Impersonate-Extra-<key> per value, the key percent-encoded."""
    if imp is None:
        return []
    out = [("Impersonate-User", imp.user)]
    if imp.uid:
        out.append(("Impersonate-Uid", imp.uid))
    out += [("Impersonate-Group", g) for g in imp.groups]
    out += [(f"Impersonate-Extra-{_escape(k)}", v) for k, vs in imp.extra for v in vs]
    return [(k, v.encode()) for k, v in out]


def _escape(key: str) -> str:
    return "".join(chr(b) if b in _HEADER_KEY else f"%{b:02X}" for b in key.encode())


def basic(user: str, password: str) -> str:
    """A Basic authorization header's value."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
