"""A list response decoded as it streams in: each item of `items` is handed on as soon
as its text has arrived, so the caller's work on it overlaps the rest of the transfer
(the API server serializes a 10,000-object list for a third of a second). With a typed
decoder (typedlist.py, msgspec) whole runs of items are decoded at once; this module's
json decoder takes what that leaves (text not of the usual form, a bad item) and the lists
read without one.

Each object's metadata.managedFields is cut from the text before it is decoded (`_MANAGED`):
nothing reads it, and it is a fifth (EndpointSlices) to two fifths (ServiceImports) of a real
API server's list.

Work stays linear in the size of the list: an item not yet complete is tried again only
once the text after its start has doubled, so one large item is decoded a bounded
number of times. Text of more than `load.HOLD_BYTES` is decoded with a Python-level
hook per object, so the GIL is handed back during it; the cyclic GC is held off
throughout (ops/load.py, stage 2).

An item that does not decode (nested deeper than json goes, a control character in a string,
bytes that are not UTF-8, a number json refuses, text that is not JSON) is dropped and told to
`on_bad`, and the items after it are decoded: where it ends is found from its brackets and
quotes alone (`extent`). Without `on_bad`, or where the list itself is broken (its text ends
before its last item does, a bracket that closes nothing), the whole list is refused."""

from __future__ import annotations

import codecs
import itertools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from ...ops import load
from . import typedlist
from .typedlist import Typed

Obj = dict[str, Any]
_WS = " \t\r\n"
BATCH = 1 << 18  # characters gathered before a try: a failed try (an item cut off) per batch, not per chunk
_PLAIN = json.JSONDecoder()
# A member "managedFields" whose value is an array without arrays in it (as every object's
# metadata.managedFields is), with the comma before it: no reader uses it, and it is a fifth
# to two fifths of a real server's list text. Quotes and brackets inside strings are skipped; an
# unescaped `,"` only ever starts a member, so nothing else can match.
_MANAGED = re.compile(r',"managedFields":\[(?:[^\[\]"]++|"(?:[^"\\]++|\\.)*+")*+\]')
_HOOKED = json.JSONDecoder(object_hook=lambda o: o)
_SURROGATE = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as surrogateescape decodes it
# a string (group 1: its closing quote, None when the text ends first), a run of one bracket, a comma
_STRUCT = re.compile(r'"(?:[^"\\]++|\\.)*+(")?|\[+|\{+|\]+|\}+|,', re.S)
_OPENER = {"]": "[", "}": "{"}
_NEST = re.compile(r'"(?:[^"\\]++|\\.)*+(")?|[\[{]++|[\]}]++', re.S)  # a string, a run of brackets
DEEP = 1000  # brackets open past which a value's end is found by their count alone (json refuses it)




class ListDecoder:
    """Feed text with `feed`; `on_item` is called with each item in order; `finish`
    returns the list object without its items (kind, apiVersion, metadata). `on_bad`, if
    given, is told why each item that does not decode was dropped (else such an item
    refuses the list)."""

    def __init__(self, on_item: Callable[[Any], None], batch: int = BATCH,
                 on_bad: Callable[[str], None] | None = None, head: Obj | None = None) -> None:
        self.on_item, self.batch, self.on_bad = on_item, batch, on_bad
        self.tainted = False  # bytes that are not UTF-8 were fed: items are checked for them
        self.buf = ""  # text not decoded yet starts at `pos`
        self.pos = 0
        self.parts: list[str] = []  # text fed since, not yet joined to `buf`
        self.size = 0  # characters not decoded yet: in `buf` after `pos` and in `parts`
        # start, key, colon, value, items, item-sep, sep, done
        self.state = "start" if head is None else "items"
        self.key = "items"
        self.head: Obj = {} if head is None else head  # given: the items have begun
        self.retry_at = batch  # `size` below which an incomplete value is not tried again

    def feed(self, text: str, final: bool = False) -> None:
        self.parts.append(text)
        self.size += len(text)
        if not text.isascii() and _SURROGATE.search(text):
            self.tainted = True
        if self.size < self.retry_at and not final:
            return
        # what is decoded is dropped: the buffer stays short (a failed try's error counts
        # the lines before it) and each character is copied a bounded number of times
        self.buf = _MANAGED.sub("", self.buf[self.pos:] + "".join(self.parts))
        self.pos, self.parts, self.retry_at = 0, [], self.batch
        while self.state != "done" and self._step(final):
            pass
        self.size = len(self.buf) - self.pos

    def finish(self) -> Obj:
        self.feed("", final=True)
        if self.state != "done":
            raise ValueError("the list ended early")
        if self.buf[self.pos:].strip(_WS):
            raise ValueError("text after the list")
        return self.head

    def _skip(self) -> str | None:
        """The next character that is not white space (not consumed), or None."""
        buf, i = self.buf, self.pos
        while i < len(buf) and buf[i] in _WS:
            i += 1
        self.pos = i
        return buf[i] if i < len(buf) else None

    def _expect(self, ch: str, c: str) -> None:
        if c != ch:
            raise ValueError(f"expected {ch!r} at {self.pos}, got {c!r}")
        self.pos += 1

    def _value(self, final: bool) -> tuple[bool, Any]:
        """(whether one whole value was there, the value) at `pos`."""
        start = self.pos
        big = len(self.buf) - start > load.HOLD_BYTES
        try:
            value, end = (_HOOKED if big else _PLAIN).raw_decode(self.buf, start)
        except RecursionError:
            raise ValueError(f"the list's {self.key!r} is nested too deep") from None
        except json.JSONDecodeError:
            if final:
                raise
            self.retry_at = max(self.batch, 2 * (len(self.buf) - start))  # until the text after it doubles
            return False, None
        if end == len(self.buf) and not final:  # a number may go on in the next chunk
            return False, None
        if self.tainted and _SURROGATE.search(self.buf, start, end):
            raise ValueError(f"the list's {self.key!r} is not UTF-8")
        self.pos = end
        return True, value

    def _step(self, final: bool) -> bool:
        """One token or value; False when more text is needed."""
        if self.state in ("items", "item-sep"):
            return self._items(final)
        c = self._skip()
        if c is None:
            return False
        if self.state == "start":
            self._expect("{", c)
            self.state = "key"
        elif self.state == "key":
            return self._key(c, final)
        elif self.state == "colon":
            self._expect(":", c)
            self.state = "value"
        elif self.state == "value":
            return self._member(c, final)
        elif c == "}":  # sep
            self.pos += 1
            self.state = "done"
        else:
            self._expect(",", c)
            self.state = "key"
        return True

    def _key(self, c: str, final: bool) -> bool:
        if c == "}":
            self.pos += 1
            self.state = "done"
            return True
        ok, self.key = self._value(final)
        if not ok:
            return False
        if not isinstance(self.key, str):
            raise ValueError("a key that is not a string")
        self.state = "colon"
        return True

    def _member(self, c: str, final: bool) -> bool:
        if self.key == "items" and c == "[":
            self.pos += 1
            self.state = "items"
            self.head["items"] = None
            return True
        ok, v = self._value(final)
        if not ok:
            return False
        self.head[self.key] = v
        self.state = "sep"
        return True

    def _items(self, final: bool) -> bool:
        """The items and their commas that have arrived, in one loop (through `_step`,
        two calls per item cost a fifth of the decoding); False when more text is needed."""
        buf, n, on_item, pos, state = self.buf, len(self.buf), self.on_item, self.pos, self.state
        plain, hooked = _PLAIN.raw_decode, _HOOKED.raw_decode
        try:
            while pos < n:
                c = buf[pos]
                if c in _WS:
                    pos += 1
                elif c == "]":
                    pos, state = pos + 1, "sep"
                    return True
                elif state == "item-sep":
                    if c != ",":
                        raise ValueError(f"expected ',' at {pos}, got {c!r}")
                    pos, state = pos + 1, "items"
                else:
                    big = n - pos > load.HOLD_BYTES  # json, with a hook per object (the GIL handed back)
                    try:
                        item, end = (hooked if big else plain)(buf, pos)
                    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
                        after = self._bad(e, pos, final)
                        if after is None:
                            self.retry_at = max(self.batch, 2 * (n - pos))  # until the text after it doubles
                            return False
                        pos, state = after, "item-sep"
                        continue
                    if end == n and not final:  # a number may go on in the next chunk
                        return False
                    if self.tainted and _SURROGATE.search(buf, pos, end):
                        self._drop("bytes that are not UTF-8", pos, end)
                    else:
                        on_item(item)
                    pos, state = end, "item-sep"
            return False
        finally:
            self.pos, self.state = pos, state

    def _bad(self, e: Exception, pos: int, final: bool) -> int | None:
        """The item at `pos` that json did not decode: dropped, where it ends; None while its
        text has not all arrived. ValueError when the list cannot go on."""
        if not final and _cut_short(e, len(self.buf)):
            return None  # the common case, a large item not all here yet: not scanned
        end = extent(self.buf, pos)
        if end is None and not final:
            return None
        why = ("nested too deep" if isinstance(e, RecursionError)
               else e.msg if isinstance(e, json.JSONDecodeError) else str(e).split(":")[0])
        if end is None:
            raise ValueError(f"the list ended early, in an item ({why})") from None
        if end <= pos:
            raise ValueError(f"expected an item at {pos}: {why}") from None
        self._drop(why, pos, end)
        return end

    def _drop(self, why: str, pos: int, end: int) -> None:
        """Tell `on_bad` why the item buf[pos:end] is dropped (without one: ValueError)."""
        if self.on_bad is None:
            raise ValueError(f"an item at {pos}: {why}")
        self.on_bad(f"{why}: {self.buf[pos:min(end, pos + 64)]!r}")


def _cut_short(e: Exception, n: int) -> bool:
    """Whether json failed where text of length `n` ended (inside a string, or in the last
    characters: a cut literal, number or escape), as a value not all arrived does."""
    return isinstance(e, json.JSONDecodeError) and (e.pos >= n - 6 or e.msg.startswith("Unterminated string"))


def extent(text: str, pos: int) -> int | None:
    """Where the value at `pos` ends as its brackets and quotes delimit it, whether or not it is
    JSON: a bracketed value after its closing bracket, anything else before the next comma or
    closing bracket of its level; a closing bracket that matches none of the value's own ends
    it before that bracket, and closes the value's brackets left open inside it (past DEEP
    brackets open, brackets of either kind close each other). None when the text ends first."""
    runs: list[list[Any]] = []  # the brackets open: runs of one bracket, [bracket, count]
    opened = {"[": 0, "{": 0}
    for m in _STRUCT.finditer(text, pos):
        token = m.group()
        c = token[0]
        if c == '"':
            if m.group(1) is None:
                return None
        elif c in opened:
            opened[c] += len(token)
            if opened["["] + opened["{"] > DEEP:
                return _counted(text, m.end(), opened["["] + opened["{"])
            if runs and runs[-1][0] == c:
                runs[-1][1] += len(token)
            else:
                runs.append([c, len(token)])
        elif c == ",":
            if not runs:
                return m.start()
        else:
            want, left, at = _OPENER[c], len(token), m.start()
            while left:
                if not opened[want]:
                    return at
                top = runs[-1]
                take = min(left, top[1]) if top[0] == want else top[1]
                top[1] -= take
                opened[top[0]] -= take
                if top[0] == want:
                    left, at = left - take, at + take
                if not top[1]:
                    runs.pop()
                if not runs:
                    return at
    return None


def _counted(text: str, pos: int, depth: int) -> int | None:
    """Where a value `depth` brackets deep at `pos` ends, counting brackets of either kind."""
    for m in _NEST.finditer(text, pos):
        token = m.group()
        if token[0] == '"':
            if m.group(1) is None:
                return None
        elif token[0] in "[{":
            depth += len(token)
        elif len(token) >= depth:
            return m.start() + depth
        else:
            depth -= len(token)
    return None


def decode_list(chunks: Iterable[bytes], on_item: Callable[[Any], None], batch: int = BATCH,
                typed: Typed | None = None, on_bad: Callable[[str], None] | None = None) -> Obj:
    """Decode a list response from its byte chunks, calling `on_item` with each item as it
    arrives and `on_bad` with why each item that does not decode was dropped; returns the
    rest of the list object. With `typed`, items are decoded by msgspec (typedlist.py) as
    far as the text allows; else, and for what it leaves, by json (tried every `batch`
    characters)."""
    load.hold()  # stage 2 (ops/load.py): full collections would rescan the list
    try:
        head = None
        if typed is not None:
            got = typedlist.read(iter(chunks), on_item, typed, batch, on_bad)
            if not isinstance(got, typedlist.Rest):
                return got
            head, chunks = got.head, itertools.chain((got.text,), got.chunks)
        dec = ListDecoder(on_item, batch, on_bad, head)
        text = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        for chunk in chunks:
            dec.feed(text.decode(chunk))
        dec.feed(text.decode(b"", final=True))
        return dec.finish()
    finally:
        load.release()
