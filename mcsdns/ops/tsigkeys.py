"""TSIG keys as configured: `--tsig-key` specs, key files (BIND's, knot's, or
NAME:ALGORITHM:BASE64SECRET lines) and $MCSDNS_TSIG_KEY, read into `dns.tsig.Key`s
(`configured_keys`); weak algorithms refused unless allowed. Errors name the source
and line, never the secret."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..dns.names import decode_name

if TYPE_CHECKING:  # dns.tsig is imported when a key is made: the CLI reads ENV before the
    from ..dns.tsig import Key  # server is imported (ops/load.py, stage 1)

ENV = "MCSDNS_TSIG_KEY"  # key(s) as NAME:ALGORITHM:BASE64SECRET lines, without --tsig-key(-file)


def parse_key(spec: str) -> Key:
    """NAME:ALGORITHM:BASE64SECRET (as `--tsig-key`) to a Key; ValueError if malformed."""
    parts = spec.strip().split(":", 2)
    if len(parts) != 3 or not all(parts):
        raise ValueError("expected NAME:ALGORITHM:BASE64SECRET")
    from ..dns.tsig import make_key

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
    from ..dns.tsig import make_key

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
