"""A Corefile read as CoreDNS (its Caddyfile parser) reads it: server blocks with their
keys (`[scheme://]zone[:port]`), their directives, and `import` of snippets `(name) {…}`
and of files (glob patterns), spliced in where they stand, at the top level or in a block.

Files come from `Lookup`: a glob pattern relative to the Corefile's directory -> the
matching (path, text) pairs in lexical order, or None when diagnose cannot read where
they live (the pattern is then in `Corefile.unread`). As CoreDNS: a glob matching nothing
imports nothing; a plain path matching nothing, an import cycle, unbalanced braces are a
`CorefileError` (CoreDNS refuses to load such a Corefile)."""

from __future__ import annotations

import glob as globmod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Lookup = Callable[[str], "list[tuple[str, str]] | None"]
Token = tuple[str, tuple[int, int]]  # (text, (source, line)): a directive is one source line

MAX_DEPTH = 10  # imports within imports (CoreDNS stops cycles; this also bounds the work)
MAX_TOKENS = 100_000
DEFAULT_PORTS = {"dns": 53, "tls": 853, "quic": 853, "grpc": 443, "https": 443, "https3": 443}


class CorefileError(ValueError):
    """The Corefile cannot be loaded; the text says why, as one line."""


@dataclass(frozen=True)
class Key:
    """One server block key: the zone (lower case, no final dot; "." for the root), the
    port, the scheme (`dns` serves plain DNS, what pods send)."""

    zone: str
    port: int
    scheme: str = "dns"

    def __str__(self) -> str:
        return f"{'' if self.scheme == 'dns' else self.scheme + '://'}{self.zone}:{self.port}"


@dataclass
class Directive:
    """A plugin line: its name, its arguments, and the lines of its `{…}` block."""

    name: str
    args: list[str]
    block: list[list[str]] = field(default_factory=list)


@dataclass
class Block:
    """A server block: its keys and directives."""

    keys: list[Key]
    directives: list[Directive]


@dataclass
class Corefile:
    """The server blocks, imports spliced in."""

    blocks: list[Block]
    unread: list[str]  # import patterns diagnose could not read


def zone_name(text: str) -> str:
    """A zone as CoreDNS compares them: lower case, no final dot, "." for the root."""
    return text.strip().rstrip(".").lower() or "."


def parse_key(text: str) -> Key:
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "dns", text
    scheme = scheme.lower()
    zone, port = rest, DEFAULT_PORTS.get(scheme, 53)
    head, colon, tail = rest.rpartition(":")
    if colon and tail.isdigit() and not head.endswith(":"):  # not an IPv6 reverse zone's colons
        zone, port = head, int(tail)
    return Key(zone_name(zone), port, scheme)


def tokenize(text: str, source: int) -> list[Token]:
    """Words, "quoted strings" (with \\" escapes), `#` comments to the end of the line."""
    out: list[Token] = []
    for n, line in enumerate(text.splitlines()):
        i, size = 0, len(line)
        while i < size:
            ch = line[i]
            if ch.isspace():
                i += 1
            elif ch == "#":
                break
            elif ch == '"':
                j, word = i + 1, []
                while j < size and line[j] != '"':
                    if line[j] == "\\" and j + 1 < size:
                        j += 1
                    word.append(line[j])
                    j += 1
                out.append(("".join(word), (source, n)))
                i = j + 1
            else:
                j = i
                while j < size and not line[j].isspace():
                    j += 1
                out.append((line[i:j], (source, n)))
                i = j
        if len(out) > MAX_TOKENS:
            raise CorefileError(f"more than {MAX_TOKENS} words")
    return out


class _Expander:
    """Splices imports into one token stream and takes the snippet definitions out."""

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self.snippets: dict[str, list[Token]] = {}
        self.unread: list[str] = []
        self.sources = 0
        self.count = 0

    def expand(self, tokens: list[Token], depth: int, stack: tuple[str, ...]) -> Iterator[Token]:
        i, level = 0, 0
        while i < len(tokens):
            text, line = tokens[i]
            first = i == 0 or tokens[i - 1][1] != line
            if first and level == 0 and text.startswith("(") and text.endswith(")") and len(text) > 2:
                end = _closing(tokens, i + 1)
                self.snippets[text[1:-1]] = tokens[i + 2:end]
                i = end + 1
                continue
            if first and text == "import":
                args = [t for t, ln in tokens[i + 1:i + 2] if ln == line]
                if not args:
                    raise CorefileError("import without a file or snippet name")
                yield from self._import(args[0], depth, stack)
                i += 2
                continue
            level += {"{": 1, "}": -1}.get(text, 0)
            self.count += 1
            if self.count > MAX_TOKENS:
                raise CorefileError(f"more than {MAX_TOKENS} words after its imports")
            yield text, line
            i += 1

    def _import(self, what: str, depth: int, stack: tuple[str, ...]) -> Iterator[Token]:
        if what in stack or depth >= MAX_DEPTH:
            raise CorefileError(f"import cycle: {' -> '.join((*stack, what))}")
        if what in self.snippets:
            yield from self.expand(self.snippets[what], depth + 1, (*stack, what))
            return
        found = self.lookup(what)
        if found is None:
            self.unread.append(what)
            return
        if not found and not globmod.has_magic(what):
            raise CorefileError(f"import {what}: no such file")
        for path, text in found:
            self.sources += 1
            yield from self.expand(tokenize(text, self.sources), depth + 1, (*stack, path))


def _closing(tokens: list[Token], at: int) -> int:
    """The index of the `}` closing the `{` at `at`."""
    if at >= len(tokens) or tokens[at][0] != "{":
        raise CorefileError(f"expected {{ after {tokens[at - 1][0]}")
    level = 0
    for j in range(at, len(tokens)):
        level += {"{": 1, "}": -1}.get(tokens[j][0], 0)
        if level == 0:
            return j
    raise CorefileError("a { is never closed")


def _lines(tokens: list[Token]) -> list[list[str]]:
    out: list[list[str]] = []
    for i, (text, line) in enumerate(tokens):
        if i == 0 or tokens[i - 1][1] != line:
            out.append([])
        out[-1].append(text)
    return out


def _directives(tokens: list[Token]) -> list[Directive]:
    out: list[Directive] = []
    i = 0
    while i < len(tokens):
        line = tokens[i][1]
        j = i
        while j < len(tokens) and tokens[j][1] == line and tokens[j][0] != "{":
            j += 1
        words = [t for t, _ in tokens[i:j]]
        if words == ["}"] or words and words[0] == "}":
            raise CorefileError("unexpected }")
        d = Directive(words[0], words[1:]) if words else Directive("", [])
        if j < len(tokens) and tokens[j][0] == "{":
            end = _closing(tokens, j)
            d.block = _lines(tokens[j + 1:end])
            j = end + 1
        if d.name:
            out.append(d)
        i = j
    return out


def parse(text: str, lookup: Lookup) -> Corefile:
    """The server blocks of Corefile `text`, imports resolved through `lookup`."""
    ex = _Expander(lookup)
    tokens = list(ex.expand(tokenize(text, 0), 0, ()))
    blocks: list[Block] = []
    i = 0
    while i < len(tokens):
        line = tokens[i][1]
        keys: list[str] = []
        more = True  # the next line continues the keys after a trailing comma
        while i < len(tokens) and tokens[i][0] != "{" and (tokens[i][1] == line or more):
            keys += [k for k in tokens[i][0].split(",") if k]
            line, more = tokens[i][1], tokens[i][0].endswith(",")
            i += 1
        if not keys:
            raise CorefileError("a { without server block keys")
        if i < len(tokens) and tokens[i][0] == "{":
            end = _closing(tokens, i)
            body, i = tokens[i + 1:end], end + 1
        elif not blocks:  # one server block may go without braces: the rest of the file
            body, i = tokens[i:], len(tokens)
        else:
            raise CorefileError(f"expected {{ after {' '.join(keys)}")
        blocks.append(Block([parse_key(k) for k in keys], _directives(body)))
    return Corefile(blocks, ex.unread)
