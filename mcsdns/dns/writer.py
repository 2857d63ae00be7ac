"""The one compressing writer: records after a question, owner names compressed to the
longest suffix already written (RFC 1035 4.1.4). Rdata is copied as given, except that
an SRV target (never compressed itself, RFC 2782) becomes a target for later owners."""

from __future__ import annotations

import struct

from .names import labels
from .types import RRClass, RRType

_RR = struct.Struct("!HHIH")  # type, class, ttl, rdlength
_MAX_PTR = 0x3FFF
QNAME_PTR = b"\xc0\x0c"  # the question's name, right after the header
_SRV_TARGET = 6


def _ptr(off: int) -> bytes:
    return struct.pack("!H", 0xC000 | off)


class Writer:
    """Records for one message section run after a header and a question of
    `question_len` octets whose name is `qname`; `take()` returns them and starts a
    new message (no question) for transfers that span several."""

    __slots__ = ("base", "buf", "count", "names", "last", "last_ptr")

    def __init__(self, qname: bytes = b"", question_len: int = 0) -> None:
        self._start(qname, question_len)

    def _start(self, qname: bytes, question_len: int) -> None:
        self.base = 12 + question_len  # message offset of buf[0]
        self.buf = bytearray()
        self.count = 0
        self.names: dict[bytes, int] = {}  # suffix -> message offset
        self.last: bytes | None = None  # the previous owner, and how it was written
        self.last_ptr = b""
        if qname:
            self._remember(qname, 12, len(qname))

    def _remember(self, name: bytes, off: int, end: int) -> None:
        """Note the offset of each suffix of `name` (written at `off`) starting before `end`."""
        for i in labels(name):
            if i >= end or off + i > _MAX_PTR:
                return
            self.names[name[i:]] = off + i

    def _known(self, name: bytes) -> tuple[int, int | None]:
        """Where `name`'s longest suffix already written starts in it, and its offset
        in the message ((root label, None) when there is none)."""
        for i in labels(name):
            ptr = self.names.get(name[i:])
            if ptr is not None:
                return i, ptr
        return len(name) - 1, None

    def _compressed(self, name: bytes, off: int) -> bytes:
        """`name` as written at message offset `off`: up to its longest known suffix."""
        i, ptr = self._known(name)
        self._remember(name, off, i)
        return name if ptr is None else name[:i] + _ptr(ptr)

    def owner(self, name: bytes | None) -> bytes:
        """An owner name (None: the question's) as it goes at the end of the records."""
        if name is None:
            return QNAME_PTR
        if name == self.last:
            return self.last_ptr
        off = self.base + len(self.buf)
        out = self._compressed(name, off)
        self.last = name
        self.last_ptr = out if len(out) == 2 else _ptr(off) if off <= _MAX_PTR else out
        return out

    def add(self, owner: bytes | None, rtype: int, ttl: int, rdata: bytes,
            rclass: int = RRClass.IN) -> None:
        """Append one record."""
        self.buf += self.owner(owner)
        self.buf += _RR.pack(rtype, rclass, ttl, len(rdata))
        if rtype == RRType.SRV:
            target = rdata[_SRV_TARGET:]
            self._remember(target, self.base + len(self.buf) + _SRV_TARGET, self._known(target)[0])
        self.buf += rdata
        self.count += 1

    def size(self) -> int:
        return len(self.buf)

    def take(self) -> tuple[bytes, int]:
        """(the records written, their count); the next records start a new message
        with no question."""
        out = bytes(self.buf), self.count
        self._start(b"", 0)
        return out
