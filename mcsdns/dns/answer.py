"""Pre-rendered answers: everything after the question, rendered once.

An `Answer` holds the records' bytes with one header per combination of the query's
RD/CD bits and EDNS presence. Sending it is concatenation: query ID + header +
question as asked + body (+ OPT), done by `mcsdns.nameserver.response`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from . import header
from .limits import MAX_MESSAGE, RECORDS_OCTETS
from .types import Rcode, RRType, qtype_label, rcode_label
from .writer import Writer

EDNS_SIZE = 1232  # our advertised and maximum UDP payload (DNS flag day 2020)
MAX_TCP = MAX_MESSAGE
UDP_MIN = 512
_OPT = struct.Struct("!HHIH")


def opt_record(do: bool, ext_rcode: int = 0) -> bytes:
    """Our OPT pseudo-RR: root owner, UDP size, extended rcode, version 0, DO echoed."""
    return b"\x00" + _OPT.pack(RRType.OPT, EDNS_SIZE, (ext_rcode << 24) | (0x8000 if do else 0), 0)


OPT_DO0 = opt_record(False)
OPT_DO1 = opt_record(True)


def header_index(flags: int, edns: bool) -> int:
    """Which of an Answer's eight headers a query takes: RD | CD<<1 | EDNS<<2."""
    return (1 if flags & header.RD else 0) | (2 if flags & header.CD else 0) | (4 if edns else 0)


Headers = tuple[tuple[bytes, ...], tuple[bytes, ...]]  # an Answer's hdrs and tc_hdrs
_HEADERS: dict[tuple[int, tuple[int, int, int], bool], Headers] = {}
_HEADERS_MAX = 4096


def headers(rcode: int, counts: tuple[int, int, int], aa: bool) -> Headers:
    """An Answer's eight headers and eight TC headers, shared by every Answer of the
    same rcode, counts and AA (a negative answer costs no header bytes of its own)."""
    key = (rcode, counts, aa)
    got = _HEADERS.get(key)
    if got is not None:
        return got
    an, ns, ar = counts
    hdrs, tc = [], []
    for i in range(8):
        query_flags = (header.RD if i & 1 else 0) | (header.CD if i & 2 else 0)
        edns = (i >> 2) & 1
        hdrs.append(header.pack_after_id(header.response_flags(query_flags, rcode, aa), 1, an, ns, ar + edns))
        tc.append(header.pack_after_id(header.response_flags(query_flags, rcode, aa, tc=True), 1, 0, 0, edns))
    got = tuple(hdrs), tuple(tc)
    if len(_HEADERS) < _HEADERS_MAX:
        _HEADERS[key] = got
    return got


class Answer:
    """A pre-rendered response body with its eight possible headers.

    hdrs[i] / tc_hdrs[i] are flags + four counts for i = `header_index`; tc_hdrs are
    used with an empty body when neither the body nor the fallback (no Additional
    section) fits. `bodies` holds one or more rotations of the same records (same size),
    taken in turn; `nameserver.response` lays out and renders the response.
    """

    __slots__ = ("hdrs", "tc_hdrs", "bodies", "size", "rot", "rcode", "n", "fallback", "key", "serial_at")

    def __init__(self, rcode: int, counts: tuple[int, int, int], bodies: list[bytes],
                 qtype: int = 0, aa: bool = True) -> None:
        self.rcode = rcode
        self.key = (qtype_label(qtype), rcode_label(rcode))  # metrics labels: a fixed set
        self.bodies = tuple(bodies)
        self.n = len(bodies)
        self.size = len(bodies[0])
        self.rot = 0
        self.fallback: Answer | None = None  # same answer without Additional
        # a negative answer: its SOA serial starts this far before the body's end, and the
        # response cache writes the zone's current serial there in every response sent
        self.serial_at = 0
        self.hdrs, self.tc_hdrs = headers(rcode, counts, aa)


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class RR:
    """One resource record to render; owner None means the question name."""

    owner: bytes | None
    rtype: int
    ttl: int
    rdata: bytes


def render(qname: bytes, qtype: int, rcode: int, answer: list[list[RR]], authority: list[RR],
           additional: list[RR]) -> Answer:
    """Render one Answer; `answer` is a list of rotations (each the same records in
    another order); authority and additional follow every rotation, as much of
    additional as keeps the records within dns.limits.RECORDS_OCTETS."""
    bodies = []
    n_ar = len(additional)
    for i, rot in enumerate(answer or [[]]):
        w = Writer(qname, len(qname) + 4)
        for rr in (*rot, *authority):
            w.add(rr.owner, rr.rtype, rr.ttl, rr.rdata)
        for j, rr in enumerate(additional[:n_ar]):
            if i == 0 and w.size() + len(rr.owner or qname) + 10 + len(rr.rdata) > RECORDS_OCTETS:
                n_ar = j  # the same records in every rotation
                break
            w.add(rr.owner, rr.rtype, rr.ttl, rr.rdata)
        bodies.append(w.take()[0])
    n_an = len(answer[0]) if answer else 0
    # AA only where we are the authority: not on REFUSED (outside the zone, AXFR, other
    # classes) nor on SERVFAIL (zone not loaded yet)
    return Answer(rcode, (n_an, len(authority), n_ar), bodies, qtype,
                  aa=rcode not in (Rcode.REFUSED, Rcode.SERVFAIL))
