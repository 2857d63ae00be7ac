"""A list response's items decoded by msgspec into a declared type as the text arrives.

A kube list is `{..., "items":[item,item,...], ...}`. Once `"items":[` is found at the top
level (what is before it decodes as the head of an object), the items' text is cut at the
last place where an item like the first one begins (`,` then its opening up to its first key,
found with `bytes.rfind`, a comma before it) and everything before it is decoded in one msgspec call, while
the rest of the list is still arriving (a real API server takes most of a second to send
a 10,000-object list). The cut is checked by that call: text that decodes as a JSON array
ends at the top level of the items (a cut inside a string or an item leaves brackets or a
quote open), so the items handed on are the list's own. A cut that does not decode is
tried again once the text after it has doubled (linear work).

Where the text is not of that form (not compact, not UTF-8, an item not of the declared
shape alone is fine: it is decoded whole by json), what is left goes to the caller's
streaming json decoder (`Rest`), which drops a bad item alone or refuses a broken list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import msgspec

Obj = dict[str, Any]
_WS = b" \t\r\n"
_TypeError = (msgspec.ValidationError, msgspec.DecodeError)
_RAWS = msgspec.json.Decoder(dict[str, msgspec.Raw])  # an object's members, undecoded
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw] | None)  # a list's items, each undecoded
_START = re.compile(rb'"items"\s*:\s*\[')
HEAD_MAX = 1 << 20  # bytes read looking for the items before giving up streaming them
_OPENING = re.compile(rb'\{\s*"(?:[^"\\]|\\.){0,64}"\s*:')  # an item's opening, to its first key
_TRIES = 8  # item openings, or closing brackets, tried from the end as a cut
_COMMA = ord(",")


class Typed:
    """How a list's items are decoded: into `kind` (msgspec: what it does not declare is
    skipped, never built), one (`one`) or an array of them (`many`)."""

    __slots__ = ("many", "one")

    def __init__(self, kind: Any) -> None:
        self.one: Callable[[bytes], Any] = msgspec.json.Decoder(kind).decode
        self.many: Callable[[bytes], list[Any]] = msgspec.json.Decoder(list[kind]).decode


class Rest(NamedTuple):
    """What the typed decoder left to the streaming json decoder: the head read so far
    (None: nothing was handed on, decode all of it), the text not decoded yet, the
    chunks not read yet."""

    head: Obj | None
    text: bytes
    chunks: Iterator[bytes]


def _members(text: bytes) -> Obj:
    """The members of an object's text, each decoded by json (ValueError where not JSON)."""
    return {k: json.loads(bytes(v)) for k, v in _RAWS.decode(text).items()}


def hand(raws: list[msgspec.Raw], on_item: Callable[[Any], None], typed: Typed,
         on_bad: Callable[[str], None] | None) -> None:
    """Each item's text decoded by `typed`; one not of its declared shape by json, whole
    (its parser says what is wrong)."""
    for raw in raws:
        try:
            item = typed.one(raw)
        except _TypeError:
            try:
                item = json.loads(bytes(raw))
            except RecursionError:  # msgspec read it: it is JSON, nested deeper than json goes
                if on_bad is None:
                    raise ValueError("an item nested too deep") from None
                on_bad(f"nested too deep: {bytes(raw[:64])!r}")
                continue
        on_item(item)


def whole(body: bytes, on_item: Callable[[Any], None], typed: Typed,
          on_bad: Callable[[str], None] | None) -> Obj | None:
    """The list in `body` decoded at once; None, nothing handed on, where the text is not
    plain JSON that json decodes alike (bytes not UTF-8, a broken list...)."""
    try:
        if not body.isascii():
            body.decode()  # msgspec does not check the bytes of what it skips
        members = _RAWS.decode(body)
        raws = _ITEMS.decode(members.pop("items", b"null"))
        head: Obj = {k: json.loads(bytes(v)) for k, v in members.items()}
    except (*_TypeError, ValueError, RecursionError):
        return None
    if raws is not None:
        head["items"] = None
        hand(raws, on_item, typed, on_bad)
    return head


class _Stream:
    """The state of one list's typed streaming (see the module)."""

    def __init__(self, on_item: Callable[[Any], None], typed: Typed, batch: int,
                 on_bad: Callable[[str], None] | None) -> None:
        self.on_item, self.typed, self.batch, self.on_bad = on_item, typed, batch, on_bad
        self.buf = bytearray()
        self.head: Obj | None = None  # once the items began
        self.opening: bytes | None = None  # `,` and the first item's opening
        self.try_at = batch  # buffered bytes at which a cut is tried next

    def start(self) -> bool | None:
        """Find the items' start; True when found, None to go on reading, False to give up."""
        m = _START.search(self.buf)
        while m is not None:
            text = bytes(self.buf[:m.start()]).rstrip(_WS)
            try:
                if text[-1:] != b"," and text.strip(_WS) != b"{":
                    raise ValueError("no comma before the items")
                self.head = _members(text.removesuffix(b",") + b"}")
            except (*_TypeError, ValueError, RecursionError):
                m = _START.search(self.buf, m.start() + 1)
                continue
            if "items" in self.head:
                return False
            self.head["items"] = None
            del self.buf[:m.end()]
            return True
        return None if len(self.buf) < HEAD_MAX else False

    def cut(self) -> None:
        """Decode the items before the last item opening, if they are well-formed items."""
        buf = self.buf
        if self.opening is None:
            m = _OPENING.match(buf, len(buf) - len(buf.lstrip(_WS)))
            if m is None:
                return
            self.opening = m.group()
        at = len(buf)
        for _ in range(_TRIES):  # an opening after a comma (one after white space only: the first)
            at = buf.rfind(self.opening, 0, at)
            comma = at
            while comma > 0 and buf[comma - 1] in _WS:
                comma -= 1
            if comma <= 0 or buf[comma - 1] == _COMMA:
                break
        if comma <= 0 or not self._decode(bytes(buf[:comma - 1])):
            self.try_at = 2 * len(buf)  # a cut inside an item: not again before the text doubles
            return
        del buf[:comma]
        self.try_at = len(buf) + self.batch

    def _decode(self, text: bytes, final: bool = False) -> bool:
        """Hand on the items of `text` (items and the commas between them); False where it
        is not that (nothing handed on)."""
        if not text.strip(_WS) and not final:
            return False
        data = b"[" + text + b"]"
        try:
            if not data.isascii():
                data.decode()  # msgspec does not check the bytes of what it skips
            items = self.typed.many(data)
        except msgspec.ValidationError:  # an item not of the declared shape: each alone
            try:
                raws = _ITEMS.decode(data) or []
            except (*_TypeError, RecursionError):
                return False
            hand(raws, self.on_item, self.typed, self.on_bad)
            return True
        except (msgspec.DecodeError, ValueError, RecursionError):
            return False
        for item in items:
            self.on_item(item)
        return True

    def end(self) -> bool:
        """The last items and the members after them; False where they are not that."""
        assert self.head is not None
        at = len(self.buf)
        for _ in range(_TRIES):
            at = self.buf.rfind(b"]", 0, at)
            if at < 0:
                return False
            tail = bytes(self.buf[at + 1:]).strip(_WS)
            after = tail[1:].lstrip(_WS)
            try:
                more = {} if tail == b"}" else (
                    _members(b"{" + after) if tail[:1] == b"," and after[:1] != b"}" else None)
            except (*_TypeError, ValueError, RecursionError):
                more = None
            if more is None or "items" in more:
                continue
            if not self._decode(bytes(self.buf[:at]), final=True):
                return False
            self.head.update(more)
            return True
        return False


def read(chunks: Iterator[bytes], on_item: Callable[[Any], None], typed: Typed, batch: int,
         on_bad: Callable[[str], None] | None) -> Obj | Rest:
    """Decode the list of `chunks`, calling `on_item` with each item as its text arrives:
    the list's other members, or what is left to the streaming json decoder (`Rest`)."""
    s = _Stream(on_item, typed, batch, on_bad)
    for chunk in chunks:
        s.buf += chunk
        if s.head is None:
            begun = s.start()
            if begun is None:
                continue
            if not begun:
                return Rest(None, bytes(s.buf), chunks)
        if len(s.buf) >= s.try_at:
            s.cut()
    if s.head is None:
        body = bytes(s.buf)
        head = whole(body, on_item, typed, on_bad)
        return head if head is not None else Rest(None, body, chunks)
    return s.head if s.end() else Rest(s.head, bytes(s.buf), chunks)
