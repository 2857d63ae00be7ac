"""The slow-path query parser (strict), and header-only responses."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from . import header
from .errors import Drop, FormErr
from .names import read_name, skip_name
from .types import RRType

_RR = struct.Struct("!HHIH")  # type, class, ttl, rdlength
_SECTIONS = ("answer", "authority", "additional")


@dataclass(slots=True)
class Query:
    """A parsed query (slow path): header fields, question and EDNS."""

    id: bytes
    flags: int
    opcode: int
    qname: bytes  # as asked (case preserved), wire form
    qtype: int
    qclass: int
    question: bytes  # qname + type + class exactly as received
    edns: bool = False
    edns_size: int = 512
    edns_version: int = 0
    do: bool = False
    tsig: int = -1  # offset of a TSIG RR ending the message, else -1
    end_of_question: int = 12


def question_end(msg: bytes) -> int:
    """Where the question of a query ends, found fast: 4 octets (type, class) past the
    first zero octet after the header, 4 or less if there is none (it may lie past the
    end of `msg`). Exact when the name is a plain wire name (`names.is_wire_name`:
    uncompressed, no zero octet inside a label), as every name of the zone is: callers
    confirm the name (the fast path by looking it up, transfers by `parse_query`).
    `read_name` is the exact reading, for the slow path and the query log."""
    return msg.find(0, header.SIZE) + 5


def parse_query(data: bytes) -> Query:
    """Parse a query strictly. Raises Drop, FormErr, or returns the query
    (whose opcode may still be unsupported; only then may it have no question,
    and `question` is empty)."""
    if len(data) < header.SIZE:
        raise Drop("short header")
    qid, flags, qd, an, ns, ar = struct.unpack_from("!2sHHHHH", data)
    if flags & header.QR:
        raise Drop("response")
    opcode = header.opcode(flags)
    if qd == 0 and opcode != 0:
        q = Query(qid, flags, opcode, b"", 0, 0, b"")
        _parse_records(data, header.SIZE, (an, ns, ar), q)
        return q
    if qd != 1:
        raise FormErr("QDCOUNT must be 1")
    qname, i = read_name(data, header.SIZE, "question")
    if i + 4 > len(data):
        raise FormErr("truncated question")
    qtype, qclass = struct.unpack_from("!HH", data, i)
    q = Query(qid, flags, opcode, qname, qtype, qclass, data[12:i + 4], end_of_question=i + 4)
    _parse_records(data, i + 4, (an, ns, ar), q)
    return q


def _parse_records(data: bytes, i: int, counts: tuple[int, int, int], q: Query) -> None:
    """Walk the records after the question from offset `i`; note OPT and TSIG in `q`.
    Records (an IXFR query carries an SOA in Authority) are checked and skipped."""
    seen_opt = False
    for section, count in zip(_SECTIONS, counts, strict=True):
        for _ in range(count):
            if q.tsig >= 0:
                raise FormErr("TSIG not the last record")
            owner_start = i
            i = skip_name(data, i)
            if i + _RR.size > len(data):
                raise FormErr("truncated record")
            rtype, rclass, ttl, rdlen = _RR.unpack_from(data, i)
            i += _RR.size + rdlen
            if i > len(data):
                raise FormErr("truncated rdata")
            if rtype == RRType.TSIG:
                if section != "additional":
                    raise FormErr("TSIG outside Additional")
                q.tsig = owner_start
            elif rtype == RRType.OPT:
                if section != "additional" or seen_opt or data[owner_start] != 0:
                    raise FormErr("misplaced, repeated or non-root OPT")
                seen_opt = True
                if not options_fit(data, i - rdlen, i):
                    raise FormErr("malformed EDNS option")
                q.edns, q.edns_size = True, max(512, rclass)
                q.edns_version = (ttl >> 16) & 0xFF
                q.do = bool(ttl & 0x8000)
    if i != len(data):
        raise FormErr("trailing bytes")


def options_fit(data: bytes, i: int, end: int) -> bool:
    """The EDNS options in data[i:end] (an OPT's RDATA) each fit: code, length, then that
    many octets, the last ending at `end` (RFC 6891 6.1.2)."""
    while i + 4 <= end:
        i += 4 + ((data[i + 2] << 8) | data[i + 3])
    return i == end


def header_only(q: Query, rcode: int, opt: bytes = b"", aa: bool = False) -> bytes:
    """A response of header, the question as asked (if any) and `opt` (if any)."""
    return (header.pack(q.id, header.response_flags(q.flags, rcode, aa), 1 if q.question else 0,
                        0, 0, 1 if opt else 0) + q.question + opt)
