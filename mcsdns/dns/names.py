"""Domain names on the wire: the one codec and the one label walk.

Names are kept as lowercase uncompressed wire bytes. `labels` walks an
uncompressed name; `read_name` takes one from a message (uncompressed, for the
question and TSIG), `skip_name` steps over one that may be compressed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .errors import FormErr

MAX_NAME = 255  # octets of a wire name, the final root label included
MAX_LABEL = 63
POINTER = 0xC0
_OCTET = [bytes((i,)) for i in range(256)]  # a length octet, by value: none made per label


class NameTooLong(ValueError):
    """A name that cannot be sent: a label over 63 octets or the whole over 255 (RFC 1035
    2.3.4). `name` is what it would have been (its labels, then the base)."""

    def __init__(self, name: bytes) -> None:
        super().__init__(f"name of {len(name)} octets")
        self.name = name


def encode_name(name: str) -> bytes:
    """Presentation name (with or without the final dot) to lowercase wire form."""
    out = bytearray()
    for label in name.rstrip(".").lower().split("."):
        if not label:
            if name.strip(".") == "":
                break
            raise ValueError(f"empty label in {name!r}")
        b = label.encode("ascii")
        if len(b) > MAX_LABEL:
            raise ValueError(f"label over 63 octets in {name!r}")
        out.append(len(b))
        out += b
    out.append(0)
    if len(out) > MAX_NAME:
        raise ValueError(f"name over 255 octets: {name!r}")
    return bytes(out)


def labels(name: bytes) -> Iterator[int]:
    """Offsets of the labels of an uncompressed wire name, the root label excluded."""
    i = 0
    while name[i]:
        yield i
        i += name[i] + 1


def decode_name(wire: bytes) -> str:
    """Uncompressed wire name to presentation form with the final dot."""
    return "".join(wire[i + 1:i + 1 + wire[i]].decode("ascii", "backslashreplace") + "."
                   for i in labels(wire)) or "."


def prefix(parts: Iterable[str], base: bytes) -> bytes:
    """The wire name `parts` (presentation labels, left to right) followed by `base`;
    NameTooLong if a label is over 63 octets or the name over 255. Every name the zone
    builds is built here or by `under`: no such name is ever served."""
    pieces: list[bytes] = []
    long_label = False
    for lab in parts:
        b = lab.encode("ascii")
        n = len(b)
        if n > MAX_LABEL:
            long_label = True
        pieces += (_OCTET[n & 0xFF], b)
    pieces.append(base)
    out = b"".join(pieces)
    if long_label or len(out) > MAX_NAME:
        raise NameTooLong(out)
    return out


def under(label: str, base: bytes) -> bytes:
    """The wire name of one presentation label followed by `base` (`prefix` of one label)."""
    b = label.encode("ascii")
    n = len(b)
    out = _OCTET[n & 0xFF] + b + base
    if n > MAX_LABEL or len(out) > MAX_NAME:
        raise NameTooLong(out)
    return out


def is_wire_name(name: bytes) -> bool:
    """An uncompressed wire name whose only zero octet is the final one."""
    i, end = 0, len(name) - 1
    if end >= MAX_NAME:
        return False
    while i < end:
        n = name[i]
        if n == 0 or n > MAX_LABEL:
            return False
        i += n + 1
    return i == end


def is_subdomain(name: bytes, origin: bytes) -> bool:
    """`name` is `origin` or below it, on a label boundary (both lowercase wire)."""
    if not name.endswith(origin):
        return False
    cut = len(name) - len(origin)
    return cut == 0 or cut in labels(name)


def read_name(data: bytes, i: int, what: str = "name") -> tuple[bytes, int]:
    """The uncompressed name at `i` in a message and the offset after it; FormErr if it
    is truncated, compressed, or over 255 octets."""
    start = i
    while True:
        if i >= len(data):
            raise FormErr(f"truncated {what}")
        n = data[i]
        if n == 0:
            return data[start:i + 1], i + 1
        if n > MAX_LABEL:
            raise FormErr(f"compressed or bad label in {what}")
        i += n + 1
        if i - start >= MAX_NAME:
            raise FormErr(f"{what} over 255 octets")


def skip_name(data: bytes, i: int) -> int:
    """The offset after a name that may end in a compression pointer; FormErr if it is
    truncated or has a bad label type."""
    while True:
        if i >= len(data):
            raise FormErr("truncated name")
        n = data[i]
        if n == 0:
            return i + 1
        if n & POINTER == POINTER:
            return i + 2
        if n > MAX_LABEL:
            raise FormErr("bad label")
        i += n + 1
