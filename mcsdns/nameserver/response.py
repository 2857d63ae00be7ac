"""A response to a query of the zone: its one layout, rendered fresh or replayed.

    query ID | header | question as asked | body | our OPT (if the query had one)

The header and body come from a pre-rendered `Answer` (`hdrs[i]` for the query's
`header_index` i): the whole answer if it fits the client's limit, else its `fallback`
(no Additional section), else the TC header alone with no records. An answer with
several `bodies` (rotations of the same records) sends the next one each time. A
negative answer carries the zone's current SOA serial, patched in `serial_at` octets
(+ the OPT's length) before the end.

`render` makes a response from an Answer; `keep` turns one into a `Canned` (the same
response minus its ID, kept by the response cache); `replayer` sends a Canned again.
The C extension answers UDP cache hits with its own copy of `replayer`
(`_batchio.c`, `from_cache`): the one mirror of this module, checked byte for byte
against it by tests/transport/test_batchio_diff.py. Nothing here builds an object per query
except `keep`, once per response kept.
"""

from __future__ import annotations

from collections.abc import Callable

from ..dns.answer import Answer
from ..dns.rdata import SERIAL_SIZE

try:  # the C type lets the batched UDP path (transport._batchio) answer hits without calling Python
    from ._cannedtype import Canned as _CannedBase
except ImportError:  # not built: the same fields in Python
    from ._canned import CannedBase as _CannedBase


def patch_serial(out: bytes, at: int, serial: bytearray) -> bytes:
    """A negative response with the zone's current SOA serial `at` octets before its end."""
    return out[:-at] + serial + out[-at + SERIAL_SIZE:]


def next_body(x: Answer | _CannedBase, bodies: tuple[bytes, ...]) -> bytes:
    """The next of `x`'s rotating `bodies` (`x.rot` advances)."""
    r = x.rot
    x.rot = r + 1 if r + 1 < len(bodies) else 0
    return bodies[r]


def render(qid: bytes, ans: Answer, idx: int, q: bytes, opt: bytes, limit: int,
           serial: bytearray) -> bytes:
    """The response with ID `qid` to question `q` (as asked, name + type + class) from
    `ans`, with header `idx` and `opt`, at most `limit` octets: the whole answer, else
    its fallback, else truncated (TC). (12: the header, ID included, `dns.header.SIZE`.)"""
    if ans.size + len(q) + len(opt) + 12 <= limit:
        out = qid + ans.hdrs[idx] + q + (ans.bodies[0] if ans.n == 1 else next_body(ans, ans.bodies)) + opt
        if ans.serial_at:
            return patch_serial(out, ans.serial_at + len(opt), serial)
        return out
    fb = ans.fallback
    if fb is not None and fb.size + len(q) + len(opt) + 12 <= limit:
        return qid + fb.hdrs[idx] + q + next_body(fb, fb.bodies) + opt
    return qid + ans.tc_hdrs[idx] + q + opt


class Canned(_CannedBase):
    """A whole response minus its ID, with its hit count and metrics labels `key`.
    For an answer that rotates, `out` is header + question and each use appends
    the next of `bodies` and `tail` (its OPT record); otherwise `bodies` is None and
    `out` is all of it, with the zone's serial `serial_at` octets before the end
    (0: none)."""

    __slots__ = ("key", "size")

    def __init__(self, out: bytes, key: tuple[str, str], size: int,
                 bodies: tuple[bytes, ...] | None = None, rot: int = 0, tail: bytes = b"",
                 serial_at: int = 0) -> None:
        self.out, self.hits, self.key, self.tail = out, 1, key, tail
        self.bodies, self.rot, self.serial_at = bodies, rot, serial_at
        self.size = size  # of the whole response


def keep(out: bytes, ans: Answer, idx: int, q: bytes, opt: bytes, limit: int) -> Canned | None:
    """`out`, just rendered by `render` from the same arguments, as a Canned to replay;
    None for a rotating answer cut to its fallback or TC (not kept)."""
    if ans.size + len(q) + len(opt) + 12 <= limit:
        if ans.n == 1:
            at = ans.serial_at + len(opt) if ans.serial_at else 0
            return Canned(out[2:], ans.key, len(out), serial_at=at)
        # every rotation has the same size; the next one sent is the Answer's next
        return Canned(ans.hdrs[idx] + q, ans.key, len(out), ans.bodies, ans.rot, opt)
    if ans.n == 1:
        return Canned(out[2:], ans.key, len(out))
    return None


Hit = Callable[[bytes, bool], bytes | None]  # query, over TCP -> the kept response, or None


def replayer(tables: tuple[dict[bytes, Canned], dict[bytes, Canned]], serial: bytearray) -> Hit:
    """The replay of kept responses: a function of a query and its transport giving the
    response kept in `tables` (by transport, keyed by the query after its ID) with the
    query's ID and the zone's current `serial`, or None (what `_batchio.c` does for UDP)."""

    def hit(data: bytes, tcp: bool) -> bytes | None:
        c = tables[tcp].get(data[2:])
        if c is None:
            return None
        c.hits += 1
        bodies = c.bodies
        if bodies is None:
            if c.serial_at:
                return patch_serial(data[:2] + c.out, c.serial_at, serial)
            return data[:2] + c.out
        return data[:2] + c.out + next_body(c, bodies) + c.tail

    return hit
