"""How long a kubeconfig's credential lasts, read from the credential itself and not verified
(the API server does that): a bearer token's JWT claims `iat` and `exp`, a client
certificate's notBefore and notAfter. Nothing for an opaque token, a token file or an exec
plugin (those renew themselves). `due` is the one rule of the controller's expiry alert and
of diagnose's WARN: less than a fifth of the lifetime left."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from .kubeconfig import Identity

LEFT = 0.2  # due when less than this fraction of the lifetime is left
LEFT_UNKNOWN = 3 * 86400.0  # or, when the issue time is unknown, less than this many seconds
MAX = 64 * 1024  # characters of a token or certificate looked at (larger: not read)
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\s*([A-Za-z0-9+/=\s]+?)-----END CERTIFICATE-----")


@dataclass(frozen=True)
class Validity:
    """When a credential stops working (Unix time) and, when it says, when it was issued."""

    expires: float
    issued: float | None = None


def due(v: Validity, now: float) -> bool:
    """Whether the credential should have been renewed by `now`."""
    left = v.expires - now
    if v.issued is not None and v.expires > v.issued:
        return left < LEFT * (v.expires - v.issued)
    return left < LEFT_UNKNOWN


def _stamp(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x <= 0:
        return None
    return float(x)


def of_token(token: str) -> Validity | None:
    """A JWT's `exp` (and `iat`); None for any other token."""
    parts = token.split(".")
    if len(token) > MAX or len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(claims, dict) or (exp := _stamp(claims.get("exp"))) is None:
        return None
    return Validity(exp, _stamp(claims.get("iat")))


def _tlv(der: bytes, i: int) -> tuple[int, int, int]:
    """The DER element at `i`: (tag, start of its content, end of it); ValueError when cut."""
    tag, n = der[i], der[i + 1]
    start = i + 2
    if n & 0x80:
        size = n & 0x7F
        if not 1 <= size <= 4:
            raise ValueError("bad DER length")
        n, start = int.from_bytes(der[start:start + size], "big"), start + size
    if start + n > len(der):
        raise ValueError("DER element runs past the end")
    return tag, start, start + n


def _time(der: bytes, i: int) -> tuple[float, int]:
    """A UTCTime or GeneralizedTime at `i` (as X.509 writes them, in UTC): (Unix time, next)."""
    tag, start, end = _tlv(der, i)
    text = der[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime: YYMMDDHHMMSSZ, 50-99 are 19xx
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    elif tag != 0x18:
        raise ValueError("not a time")
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC).timestamp(), end


def of_certificate(pem: str) -> Validity | None:
    """The first certificate's notAfter (and notBefore) in PEM text; None when unreadable."""
    m = _PEM.search(pem[:MAX])
    if m is None:
        return None
    try:
        der = base64.b64decode("".join(m.group(1).split()), validate=True)
        _, cert, _ = _tlv(der, 0)
        _, i, _ = _tlv(der, cert)  # tbsCertificate
        if der[i] == 0xA0:  # [0] version
            i = _tlv(der, i)[2]
        for _ in range(3):  # serialNumber, signature, issuer
            i = _tlv(der, i)[2]
        _, i, _ = _tlv(der, i)  # validity
        issued, i = _time(der, i)
        expires, _ = _time(der, i)
    except (ValueError, IndexError, binascii.Error, UnicodeDecodeError):
        return None
    return Validity(expires, issued)


def of_identity(ident: Identity) -> Validity | None:
    """The inline token's or client certificate's validity, the one that ends first."""
    found = [v for v in (of_token(ident.token or ""), of_certificate(ident.cert or "")) if v is not None]
    return min(found, key=lambda v: v.expires, default=None)
