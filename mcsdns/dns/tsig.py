"""TSIG (RFC 8945): verify signed requests, sign responses, build TSIG error answers.

A request's TSIG RR is the last record of its Additional section (the
slow-path parser records where it starts). `check` verifies it against the
configured keys: key (BADKEY), MAC length (FORMERR, BADTRUNC: judged on the
length alone, before any MAC is computed), MAC (BADSIG), time (BADTIME, the
skew capped at FUDGE whatever the request's fudge). `Signer` signs the response
messages that follow, every message of a multi-message transfer included
(§5.3.1). Keys come from `--tsig-key`, key files (BIND's, knot's, or
NAME:ALGORITHM:BASE64SECRET lines) or $MCSDNS_TSIG_KEY: `configured_keys`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import FormErr
from .header import with_additional
from .names import decode_name, encode_name, read_name
from .types import RRClass, RRType

CLASS_ANY, TSIG = RRClass.ANY, RRType.TSIG

BADSIG, BADKEY, BADTIME, BADTRUNC = 16, 17, 18, 22
ERROR_NAMES = {0: "NOERROR", BADSIG: "BADSIG", BADKEY: "BADKEY", BADTIME: "BADTIME", BADTRUNC: "BADTRUNC"}
FUDGE = 300  # the fudge we sign with, and the most clock skew accepted whatever a request's fudge
ENV = "MCSDNS_TSIG_KEY"  # key(s) as NAME:ALGORITHM:BASE64SECRET lines, without --tsig-key(-file)

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


def parse_key(spec: str) -> Key:
    """NAME:ALGORITHM:BASE64SECRET (as `--tsig-key`) to a Key; ValueError if malformed."""
    parts = spec.strip().split(":", 2)
    if len(parts) != 3 or not all(parts):
        raise ValueError("expected NAME:ALGORITHM:BASE64SECRET")
    return make_key(*parts)


KEY_FILE_MAX = 1 << 20  # octets
_BIND_TOKEN = re.compile(r'\s+|#[^\n]*|//[^\n]*|/\*.*?\*/|"([^"\n]*)"|([{};])|([^\s{};"#]+)', re.S)


class _Bad(ValueError):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line = line


def _bind_keys(text: str) -> list[tuple[int, Key]]:
    """BIND's `key "NAME" { algorithm ALG; secret "BASE64"; };`, as tsig-keygen prints."""
    toks: list[tuple[int, str, bool]] = []  # (line, text, is a punctuation mark)
    pos, line = 0, 1
    while pos < len(text):
        m = _BIND_TOKEN.match(text, pos)
        if m is None:
            raise _Bad(line, "unterminated string or comment")
        if m.group(1) is not None or m.group(3) is not None:
            toks.append((line, m.group(1) if m.group(1) is not None else m.group(3), False))
        elif m.group(2) is not None:
            toks.append((line, m.group(2), True))
        line += m.group(0).count("\n")
        pos = m.end()
    out: list[tuple[int, Key]] = []
    it = iter(toks)
    last = toks[-1][0] if toks else 1

    def take(what: str, punct: str | None = None) -> tuple[int, str]:
        t = next(it, None)
        if t is None:
            raise _Bad(last, f"expected {what} before the end of the file")
        if (punct is None) == t[2] or (punct is not None and t[1] != punct):
            raise _Bad(t[0], f"expected {what}, got {t[1]!r}")
        return t[0], t[1]

    for kline, word, punct in it:
        if punct or word != "key":
            raise _Bad(kline, f"expected 'key', got {word!r}")
        _, name = take("a key name")
        take("'{'", "{")
        fields: dict[str, str] = {}
        while True:
            t = next(it, None)
            if t is None:
                raise _Bad(last, "expected '}' before the end of the file")
            if t[1] == "}" and t[2]:
                break
            if t[2] or t[1] not in ("algorithm", "secret"):
                raise _Bad(t[0], f"expected 'algorithm' or 'secret', got {t[1]!r}")
            if t[1] in fields:
                raise _Bad(t[0], f"{t[1]} given twice")
            fields[t[1]] = take(f"the {t[1]}")[1]
            take("';'", ";")
        take("';'", ";")
        out.append((kline, _fields_key(kline, name, fields)))
    return out


def _fields_key(line: int, name: str, fields: dict[str, str]) -> Key:
    for f in ("algorithm", "secret"):
        if f not in fields:
            raise _Bad(line, f"key {name!r} has no {f}")
    try:
        return make_key(name, fields["algorithm"], fields["secret"])
    except ValueError as e:
        raise _Bad(line, str(e)) from None


def _unquote(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'" else v


def _knot_keys(text: str) -> list[tuple[int, Key]]:
    """knot's `key:` section of `- id: NAME`, `algorithm: ALG`, `secret: BASE64`, as keymgr -t prints."""
    items: list[tuple[int, dict[str, str]]] = []
    in_section = False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace() and line[0] != "-":
            if line.replace(" ", "") != "key:":
                raise _Bad(n, f"expected 'key:' (the only section of a key file), got {line.strip()!r}")
            in_section = True
            continue
        s = line.strip()
        if s.startswith("-"):
            items.append((n, {}))
            s = s[1:].strip()
        if not in_section or not items:
            raise _Bad(n, "expected 'key:' then '- id: NAME'")
        k, sep, v = s.partition(":")
        k = k.strip()
        if not sep or k not in ("id", "algorithm", "secret"):
            raise _Bad(n, f"expected 'id:', 'algorithm:' or 'secret:', got {s!r}")
        if k in items[-1][1]:
            raise _Bad(n, f"{k} given twice")
        items[-1][1][k] = _unquote(v.strip())
    out = []
    for n, fields in items:
        if "id" not in fields:
            raise _Bad(n, "key has no id")
        out.append((n, _fields_key(n, fields["id"], fields)))
    return out


def _line_keys(text: str) -> list[tuple[int, Key]]:
    """One NAME:ALGORITHM:BASE64SECRET a line; # starts a comment."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.split("#", 1)[0].strip()
        if s:
            try:
                out.append((n, parse_key(s)))
            except ValueError as e:
                raise _Bad(n, str(e)) from None
    return out


def _admit(key: Key, allow_weak: bool) -> None:
    if key.weak and not allow_weak:
        raise ValueError(f"key {key.text!r}: {decode_name(key.algorithm).rstrip('.')} is weak "
                         "(RFC 8945 section 6); use hmac-sha256, or allow it with --tsig-allow-weak")


def load_keys(text: str, source: str, allow_weak: bool = False) -> list[Key]:
    """The keys of a key file's text, in order: BIND's format, knot's, or one
    NAME:ALGORITHM:BASE64SECRET a line. ValueError "SOURCE:LINE: why" (never the secret)
    for a malformed key, a name given twice, or a weak algorithm without `allow_weak`."""
    first = next((s for s in (raw.strip() for raw in text.splitlines())
                  if s and not s.startswith(("#", "//", "/*"))), "")
    parse = (_knot_keys if re.fullmatch(r"[a-z][a-z0-9-]*\s*:", first)  # a YAML section
             else _bind_keys if re.match(r"key(\s|\"|\{|$)", first) else _line_keys)
    try:
        found = parse(text)
        seen: set[bytes] = set()
        for line, key in found:
            if key.name in seen:
                raise _Bad(line, f"key {key.text!r} defined twice")
            seen.add(key.name)
            try:
                _admit(key, allow_weak)
            except ValueError as e:
                raise _Bad(line, str(e)) from None
    except _Bad as e:
        raise ValueError(f"{source}:{e.line}: {e}") from None
    if not found:
        raise ValueError(f"{source}: no keys")
    return [k for _, k in found]


def load_key_file(path: str, allow_weak: bool = False) -> list[Key]:
    """The keys of a key file (see `load_keys`); ValueError naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(KEY_FILE_MAX + 1)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    if len(data) > KEY_FILE_MAX:
        raise ValueError(f"{path}: over {KEY_FILE_MAX} octets")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    return load_keys(text, path, allow_weak)


def configured_keys(specs: list[str], files: list[str], env: Mapping[str, str],
                    allow_weak: bool = False) -> list[Key]:
    """The keys of `--tsig-key` specs, then of `--tsig-key-file` files; when neither is
    given, of $MCSDNS_TSIG_KEY (NAME:ALGORITHM:BASE64SECRET lines). ValueError (one line)
    for a malformed key, a name given twice, or a weak algorithm without `allow_weak`."""
    keys: list[Key] = []
    for spec in specs:
        try:
            keys.append(parse_key(spec))
            _admit(keys[-1], allow_weak)
        except ValueError as e:
            raise ValueError(f"--tsig-key: {e}") from None
    for path in files:
        try:
            keys += load_key_file(path, allow_weak)
        except ValueError as e:
            raise ValueError(f"--tsig-key-file {e}") from None
    if not specs and not files and env.get(ENV, "").strip():
        keys = load_keys(env[ENV], "$" + ENV, allow_weak)
    seen: set[bytes] = set()
    for k in keys:
        if k.name in seen:
            raise ValueError(f"TSIG key {k.text!r} given twice")
        seen.add(k.name)
    return keys


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
