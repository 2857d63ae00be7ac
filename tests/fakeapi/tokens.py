"""The test API server's TokenRequests (POST .../serviceaccounts/NAME/token), answered as
kube-apiserver answers them: 404 for a missing ServiceAccount, 422 for a lifetime under 10
minutes or over 2^32 s, a default lifetime of one hour, and a token per request."""

from __future__ import annotations

import base64
import json
import secrets
import time
from typing import Any

from .status import HTTPError, Obj

DEFAULT_SECONDS = 3600
MIN_SECONDS, MAX_SECONDS = 600, 1 << 32


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class Tokens:
    """Issued tokens: token -> (namespace, ServiceAccount name, its uid, expiry unix time)."""

    def __init__(self) -> None:
        self.issued: dict[str, tuple[str, str, str, float]] = {}

    def request(self, sa: Obj | None, ns: str, name: str, body: Any) -> Obj:
        """A TokenRequest's answer for ServiceAccount `sa` (None: it does not exist)."""
        if sa is None:
            raise HTTPError(404, "NotFound", f'serviceaccounts "{name}" not found')
        spec = (body or {}).get("spec") or {} if isinstance(body, dict) else {}
        seconds = spec.get("expirationSeconds", DEFAULT_SECONDS)
        if not isinstance(seconds, int) or seconds < MIN_SECONDS:
            raise HTTPError(422, "Invalid", f"spec.expirationSeconds: Invalid value: {seconds}: may not "
                            "specify a duration less than 10 minutes")
        if seconds > MAX_SECONDS:
            raise HTTPError(422, "Invalid", f"spec.expirationSeconds: Invalid value: {seconds}: may not "
                            "specify a duration larger than 2^32 seconds")
        now = time.time()
        uid = str(sa["metadata"].get("uid") or "")
        claims = {"sub": f"system:serviceaccount:{ns}:{name}", "exp": int(now + seconds), "uid": uid}
        token = ".".join(base64.urlsafe_b64encode(p).decode().rstrip("=") for p in (
            b'{"alg":"RS256"}', json.dumps(claims).encode(), secrets.token_bytes(32)))
        self.issued[token] = (ns, name, uid, now + seconds)
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
                "spec": {"audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
                         "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef")},
                "status": {"token": token, "expirationTimestamp": _stamp(now + seconds)}}
