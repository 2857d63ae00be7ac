"""TSIG (RFC 8945): verify signed requests, sign responses, build TSIG error answers.

A request's TSIG RR is the last record of its Additional section (the
slow-path parser records where it starts). `check` verifies it against the
configured keys: key (BADKEY), MAC length (FORMERR, BADTRUNC: judged on the
length alone, before any MAC is computed), MAC (BADSIG), time (BADTIME, the
skew capped at FUDGE whatever the request's fudge). `Signer` signs the response
messages that follow, every message of a multi-message transfer included
(§5.3.1). `verify` is the one decision on a signed request, for queries and
transfers alike: FORMERR, NOTAUTH with an unsigned or a signed TSIG error, or a
Signer for the answer. Keys as configured are read by `mcsdns.ops.tsigkeys`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import FormErr
from .header import error_response, with_additional
from .message import Query, header_only
from .names import decode_name, encode_name, read_name
from .types import Rcode, RRClass, RRType

CLASS_ANY, TSIG = RRClass.ANY, RRType.TSIG

BADSIG, BADKEY, BADTIME, BADTRUNC = 16, 17, 18, 22
_RR_FIXED = 26  # octets of a TSIG RR besides its key name, algorithm name, MAC and other data
ERROR_NAMES = {0: "NOERROR", BADSIG: "BADSIG", BADKEY: "BADKEY", BADTIME: "BADTIME", BADTRUNC: "BADTRUNC"}
FUDGE = 300  # the fudge we sign with, and the most clock skew accepted whatever a request's fudge

ALGORITHMS: dict[str, Callable[..., Any]] = {
    "hmac-md5.sig-alg.reg.int": hashlib.md5,
    "hmac-sha1": hashlib.sha1,
    "hmac-sha224": hashlib.sha224,
    "hmac-sha256": hashlib.sha256,
    "hmac-sha384": hashlib.sha384,
    "hmac-sha512": hashlib.sha512,
}
WEAK = frozenset({"hmac-md5.sig-alg.reg.int", "hmac-sha1"})  # refused without --tsig-allow-weak
_ALIASES = {"hmac-md5": "hmac-md5.sig-alg.reg.int"}


@dataclass(frozen=True)
class Key:
    """A TSIG key: name, algorithm and secret."""

    name: bytes  # lowercase wire form
    algorithm: bytes  # lowercase wire form
    secret: bytes
    digest: Callable[..., Any]
    text: str  # NAME as configured, for logs

    @property
    def mac_size(self) -> int:
        return int(self.digest().digest_size)

    @property
    def weak(self) -> bool:
        return decode_name(self.algorithm).rstrip(".") in WEAK


def make_key(name: str, alg: str, secret: str) -> Key:
    """A Key from its three parts as written in a key file; ValueError if malformed."""
    canon = _ALIASES.get(alg.lower().rstrip("."), alg.lower().rstrip("."))
    if canon not in ALGORITHMS:
        raise ValueError(f"unsupported algorithm {alg!r} (one of {', '.join(sorted(ALGORITHMS))})")
    try:
        raw = base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"secret is not base64: {e}") from None
    if not raw:
        raise ValueError("empty secret")
    try:
        wire = encode_name(name)
    except (ValueError, UnicodeEncodeError) as e:
        raise ValueError(f"bad key name {name!r}: {e}") from None
    if wire == b"\x00":
        raise ValueError("empty key name")
    return Key(wire, encode_name(canon), raw, ALGORITHMS[canon], name.rstrip("."))


@dataclass(slots=True)
class TsigRR:
    """A TSIG record as received; `start` is where it begins in the message."""

    start: int
    name: bytes  # lowercase wire
    algorithm: bytes  # lowercase wire
    time_signed: int
    fudge: int
    mac: bytes
    original_id: int
    error: int
    other: bytes


def _name(data: bytes, i: int) -> tuple[bytes, int]:
    """An uncompressed name at i, lowercased, and the offset after it."""
    name, end = read_name(data, i, "TSIG name")
    return name.lower(), end


def parse(data: bytes, start: int) -> TsigRR:
    """The TSIG RR at `start`, which must end the message; FormErr if malformed."""
    name, i = _name(data, start)
    if i + 10 > len(data):
        raise FormErr("truncated TSIG")
    rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", data, i)
    i += 10
    end = i + rdlen
    if rtype != TSIG or rclass != CLASS_ANY or ttl != 0 or end != len(data):
        raise FormErr("bad TSIG record")
    alg, i = _name(data, i)
    if i + 10 > end:
        raise FormErr("truncated TSIG rdata")
    hi, lo, fudge, mac_len = struct.unpack_from("!HIHH", data, i)
    i += 10
    mac = data[i:i + mac_len]
    i += mac_len
    if i + 6 > end:
        raise FormErr("truncated TSIG rdata")
    orig, error, other_len = struct.unpack_from("!HHH", data, i)
    i += 6
    other = data[i:i + other_len]
    if i + other_len != end:
        raise FormErr("bad TSIG rdata length")
    return TsigRR(start, name, alg, (hi << 32) | lo, fudge, mac, orig, error, other)


def _time48(t: int) -> bytes:
    return struct.pack("!HI", (t >> 32) & 0xFFFF, t & 0xFFFFFFFF)


def _variables(name: bytes, alg: bytes, t: int, fudge: int, error: int, other: bytes) -> bytes:
    return (name + struct.pack("!HI", CLASS_ANY, 0) + alg + _time48(t)
            + struct.pack("!HHH", fudge, error, len(other)) + other)


def _rr(name: bytes, alg: bytes, t: int, fudge: int, mac: bytes, orig_id: int, error: int,
        other: bytes) -> bytes:
    rdata = (alg + _time48(t) + struct.pack("!HH", fudge, len(mac)) + mac
             + struct.pack("!HHH", orig_id, error, len(other)) + other)
    return name + struct.pack("!HHIH", TSIG, CLASS_ANY, 0, len(rdata)) + rdata


def _unsigned_request(data: bytes, rr: TsigRR) -> bytes:
    """The request as it was signed: TSIG removed, ARCOUNT one less, original ID."""
    ar = struct.unpack_from("!H", data, 10)[0] - 1
    return struct.pack("!H", rr.original_id) + data[2:10] + struct.pack("!H", ar) + data[12:rr.start]


def check(keys: dict[bytes, Key], data: bytes, rr: TsigRR,
          now: float | None = None) -> tuple[Key | None, int]:
    """(key, TSIG error) for a signed request: (key, 0) when it verifies.

    The MAC's length is judged before any MAC is computed (RFC 8945 5.2.2.1): over the
    algorithm's output or under max(10, half of it) octets is FormErr; a truncation the
    RFC allows is BADTRUNC, as no key accepts one. Then one constant-time comparison of
    the whole MAC (BADSIG), then the time within the request's fudge, at most FUDGE (BADTIME).
    """
    key = keys.get(rr.name)
    if key is None or key.algorithm != rr.algorithm:
        return None, BADKEY
    size, n = key.mac_size, len(rr.mac)
    if n > size or n < max(10, (size + 1) // 2):
        raise FormErr(f"TSIG MAC of {n} octets for a {size}-octet algorithm")
    if n < size:
        return key, BADTRUNC
    mac = hmac.new(key.secret, _unsigned_request(data, rr)
                   + _variables(rr.name, rr.algorithm, rr.time_signed, rr.fudge, rr.error, rr.other),
                   key.digest).digest()
    if not hmac.compare_digest(mac, rr.mac):
        return key, BADSIG
    t = int(time.time() if now is None else now)
    if abs(t - rr.time_signed) > min(rr.fudge, FUDGE):
        return key, BADTIME
    return key, 0


def add_rr(msg: bytes, rr: bytes) -> bytes:
    """msg with one more record appended to Additional."""
    return with_additional(msg) + rr


def unsigned_error(response: bytes, rr: TsigRR, error: int) -> bytes:
    """A response carrying an unsigned TSIG with `error` (BADKEY, BADSIG: §5.3.2)."""
    return add_rr(response, _rr(rr.name, rr.algorithm, rr.time_signed, rr.fudge, b"", rr.original_id,
                                error, b""))


class Signer:
    """Signs the messages of one response (one or several, §5.3.1) to a verified request."""

    def __init__(self, key: Key, request: TsigRR) -> None:
        self.key = key
        self.request = request
        self.prior: bytes | None = None  # MAC of the previous message of this response
        # octets the TSIG RR of `sign` adds to a message (no error, no other data)
        self.size = len(key.name) + len(key.algorithm) + key.mac_size + _RR_FIXED

    def sign(self, msg: bytes, error: int = 0, now: float | None = None) -> bytes:
        """msg with its TSIG RR appended (msg's ID must be the request's)."""
        k, rq = self.key, self.request
        t = int(time.time() if now is None else now)
        other = b""
        if error == BADTIME:  # §5.2.3: the request's time, ours in Other Data
            other, t = _time48(t), rq.time_signed
        h = hmac.new(k.secret, digestmod=k.digest)
        if self.prior is None:
            h.update(struct.pack("!H", len(rq.mac)) + rq.mac + msg)
            h.update(_variables(k.name, k.algorithm, t, FUDGE, error, other))
        else:
            h.update(struct.pack("!H", len(self.prior)) + self.prior + msg)
            h.update(_time48(t) + struct.pack("!H", FUDGE))
        mac = h.digest()
        self.prior = mac
        orig = struct.unpack_from("!H", msg, 0)[0]
        return add_rr(msg, _rr(k.name, k.algorithm, t, FUDGE, mac, orig, error, other))


def sign_request(key: Key, msg: bytes, now: float | None = None) -> tuple[bytes, bytes]:
    """A request (a NOTIFY we send) signed with `key`: (message, its MAC)."""
    t = int(time.time() if now is None else now)
    mac = hmac.new(key.secret, msg + _variables(key.name, key.algorithm, t, FUDGE, 0, b""),
                   key.digest).digest()
    orig = struct.unpack_from("!H", msg, 0)[0]
    return add_rr(msg, _rr(key.name, key.algorithm, t, FUDGE, mac, orig, 0, b"")), mac


@dataclass(slots=True)
class Verdict:
    """The decision on a signed request (`verify`). Verified: `signer` signs the answer
    (`error` 0). Refused: `signer` is None, `refusal` is the whole response and `error`
    the TSIG error, or -1 for a malformed TSIG (then `rr` is None and `why` says what)."""

    error: int
    rr: TsigRR | None = None
    refusal: bytes = b""
    signer: Signer | None = None
    why: str = ""


def verify(keys: dict[bytes, Key], data: bytes, q: Query, opt: bytes = b"") -> Verdict:
    """The one decision on a request `data` signed with TSIG (`q.tsig` >= 0), for queries
    and transfers: a malformed TSIG is FORMERR (header only); an unknown key or a bad MAC
    (BADKEY, BADSIG, BADTRUNC) NOTAUTH with an unsigned TSIG error (RFC 8945 5.2, 5.3.2);
    a time outside the fudge NOTAUTH signed with BADTIME (5.2.3); else a Signer for the
    answer. A NOTAUTH response carries the question and `opt` (our OPT, if any)."""
    try:
        rr = parse(data, q.tsig)
        key, err = check(keys, data, rr)
    except FormErr as e:
        return Verdict(-1, None, error_response(data, Rcode.FORMERR), why=str(e))
    if key is None or err in (BADSIG, BADTRUNC):
        return Verdict(err, rr, unsigned_error(header_only(q, Rcode.NOTAUTH, opt), rr, err))
    signer = Signer(key, rr)
    if err:
        return Verdict(err, rr, signer.sign(header_only(q, Rcode.NOTAUTH, opt), err))
    return Verdict(0, rr, signer=signer)
