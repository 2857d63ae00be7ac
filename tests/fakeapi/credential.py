"""Credentials for tests: a JWT as a TokenRequest token looks (signed by no one: mcsdns reads
its claims without verifying them, and the test API server takes any token) and a kubeconfig
carrying it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt(exp: Any, iat: Any = None, **claims: Any) -> str:
    """header.payload.signature with `exp` (and `iat`, when given) among the claims."""
    body = {"aud": ["https://kubernetes.default.svc"], "sub": "system:serviceaccount:ns:sa", "exp": exp,
            **({"iat": iat} if iat is not None else {}), **claims}
    head = {"alg": "RS256", "kid": "test"}
    return ".".join((_b64(json.dumps(head).encode()), _b64(json.dumps(body).encode()), _b64(b"\x01" * 256)))


def with_token(kubeconfig: Path, token: str, out: Path) -> Path:
    """A copy of `kubeconfig` at `out` whose user authenticates with `token`."""
    cfg = json.loads(kubeconfig.read_text())
    for u in cfg["users"]:
        u["user"] = {"token": token}
    out.write_text(json.dumps(cfg, indent=1))
    return out
