"""DNS wire format: names, pre-rendered answers, and the slow-path query parser.

An `Answer` holds everything after the question, rendered once, with one
header per combination of the query's RD/CD bits and EDNS presence. Sending
it is concatenation: query ID + header + question as asked + body (+ OPT).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

A, NS, SOA, PTR, TXT, AAAA, SRV, OPT, IXFR, AXFR, ANY = 1, 2, 6, 12, 16, 28, 33, 41, 251, 252, 255
TSIG = 250
CLASS_IN, CLASS_ANY = 1, 255
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
NOTAUTH = 9
BADVERS = 16

TYPE_NAMES = {A: "A", NS: "NS", SOA: "SOA", PTR: "PTR", TXT: "TXT", AAAA: "AAAA", SRV: "SRV"}
# Query types named in metrics labels; every other type is counted as "other".
QTYPE_LABELS = {**TYPE_NAMES, 5: "CNAME", 15: "MX", 43: "DS", 48: "DNSKEY", 64: "SVCB", 65: "HTTPS",
                257: "CAA", IXFR: "IXFR", AXFR: "AXFR", ANY: "ANY"}
RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
               9: "NOTAUTH", 16: "BADVERS"}

EDNS_SIZE = 1232  # our advertised and maximum UDP payload (DNS flag day 2020)
MAX_TCP = 65535

_RR = struct.Struct("!HHIH")  # type, class, ttl, rdlength
_PTR_QNAME = b"\xc0\x0c"


def encode_name(name: str) -> bytes:
    """Presentation name (with or without the final dot) to lowercase wire form."""
    out = bytearray()
    for label in name.rstrip(".").lower().split("."):
        if not label:
            if name.strip(".") == "":
                break
            raise ValueError(f"empty label in {name!r}")
        b = label.encode("ascii")
        if len(b) > 63:
            raise ValueError(f"label over 63 octets in {name!r}")
        out.append(len(b))
        out += b
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"name over 255 octets: {name!r}")
    return bytes(out)


def decode_name(wire: bytes) -> str:
    """Uncompressed wire name to presentation form with the final dot."""
    labels, i = [], 0
    while wire[i]:
        n = wire[i]
        labels.append(wire[i + 1:i + 1 + n].decode("ascii", "backslashreplace"))
        i += n + 1
    return ".".join(labels) + "."


def is_wire_name(name: bytes) -> bool:
    """An uncompressed wire name whose only zero octet is the final one."""
    i, end = 0, len(name) - 1
    if end > 254:
        return False
    while i < end:
        n = name[i]
        if n == 0 or n > 63:
            return False
        i += n + 1
    return i == end


def opt_record(do: bool, ext_rcode: int = 0) -> bytes:
    """Our OPT pseudo-RR: root owner, UDP size, extended rcode, version 0, DO echoed."""
    return b"\x00" + _RR.pack(OPT, EDNS_SIZE, (ext_rcode << 24) | (0x8000 if do else 0), 0)


OPT_DO0 = opt_record(False)
OPT_DO1 = opt_record(True)


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
        rd, cd, edns = i & 1, (i >> 1) & 1, (i >> 2) & 1
        b2 = 0x80 | (0x04 if aa else 0) | rd
        b3 = (0x10 if cd else 0) | (rcode & 0xF)
        hdrs.append(bytes((b2, b3)) + struct.pack("!HHHH", 1, an, ns, ar + edns))
        tc.append(bytes((b2 | 0x02, b3)) + struct.pack("!HHHH", 1, 0, 0, edns))
    got = tuple(hdrs), tuple(tc)
    if len(_HEADERS) < _HEADERS_MAX:
        _HEADERS[key] = got
    return got


def qtype_label(qtype: int) -> str:
    """The metrics label of a query type: a fixed set of names, else "other"."""
    return QTYPE_LABELS.get(qtype, "other")


class Answer:
    """A pre-rendered response body with its eight possible headers.

    hdrs[i] / tc_hdrs[i] are flags + four counts for i = RD | CD<<1 | EDNS<<2;
    tc_hdrs are used with an empty body when neither the body nor the
    fallback (no Additional section) fits.
    bodies holds one or more rotations of the same records (same size).
    """

    __slots__ = ("hdrs", "tc_hdrs", "bodies", "size", "rot", "rcode", "n", "fallback", "key", "serial_at")

    def __init__(self, rcode: int, counts: tuple[int, int, int], bodies: list[bytes],
                 qtype: int = 0, aa: bool = True) -> None:
        self.rcode = rcode
        self.key = (qtype, rcode)  # metrics label
        self.bodies = tuple(bodies)
        self.n = len(bodies)
        self.size = len(bodies[0])
        self.rot = 0
        self.fallback: Answer | None = None  # same answer without Additional
        # a negative answer: its SOA serial starts this far before the body's end, and the
        # handler writes the zone's current serial there in every response it sends
        self.serial_at = 0
        self.hdrs, self.tc_hdrs = headers(rcode, counts, aa)

    def body(self) -> bytes:
        """The next rotation of the body."""
        if self.n == 1:
            return self.bodies[0]
        r = self.rot
        self.rot = r + 1 if r + 1 < self.n else 0
        return self.bodies[r]


@dataclass(frozen=True, slots=True)
class RR:
    """One resource record to render; owner None means the question name."""

    owner: bytes | None
    rtype: int
    ttl: int
    rdata: bytes


class BodyWriter:
    """Renders records after a question of known length, compressing owner names
    to earlier occurrences of the same full name (question, or an SRV target)."""

    def __init__(self, qname: bytes) -> None:
        self.base = 12 + len(qname) + 4
        self.buf = bytearray()
        self.qname = qname
        self.names: dict[bytes, int] = {qname: 12}

    def owner(self, name: bytes | None) -> bytes:
        if name is None:
            return _PTR_QNAME
        off = self.names.get(name)
        if off is not None and off < 0x3FFF:
            return struct.pack("!H", 0xC000 | off)
        # A suffix of the question name (e.g. the zone apex) points into it.
        if self.qname.endswith(name):
            off = 12 + len(self.qname) - len(name)
            if self._is_label_boundary(off - 12):
                return struct.pack("!H", 0xC000 | off)
        self.names[name] = self.base + len(self.buf)
        return name

    def _is_label_boundary(self, pos: int) -> bool:
        i = 0
        while i < pos:
            i += self.qname[i] + 1
        return i == pos

    def add(self, rr: RR) -> None:
        self.buf += self.owner(rr.owner)
        self.buf += _RR.pack(rr.rtype, CLASS_IN, rr.ttl, len(rr.rdata))
        pos = self.base + len(self.buf)
        if rr.rtype == SRV and rr.rdata[6:] not in self.names:
            self.names[rr.rdata[6:]] = pos + 6  # uncompressed target, usable by Additional
        self.buf += rr.rdata


def render(qname: bytes, qtype: int, rcode: int, answer: list[list[RR]], authority: list[RR],
           additional: list[RR]) -> Answer:
    """Render one Answer; `answer` is a list of rotations (each the same records in
    another order); authority and additional follow every rotation."""
    bodies = []
    for rot in answer or [[]]:
        w = BodyWriter(qname)
        for rr in rot:
            w.add(rr)
        for rr in authority:
            w.add(rr)
        for rr in additional:
            w.add(rr)
        bodies.append(bytes(w.buf))
    n_an = len(answer[0]) if answer else 0
    # AA only where we are the authority: not on REFUSED (outside the zone, AXFR, other
    # classes) nor on SERVFAIL (zone not loaded yet)
    return Answer(rcode, (n_an, len(authority), len(additional)), bodies, qtype,
                  aa=rcode not in (REFUSED, SERVFAIL))


def soa_rdata(zone: bytes, ttl: int, serial: int) -> bytes:
    mname = b"\x02ns\x03dns" + zone
    rname = b"\x0ahostmaster" + zone
    return mname + rname + struct.pack("!IIIII", serial, 7200, 1800, 86400, ttl)


def srv_rdata(priority: int, weight: int, port: int, target: bytes) -> bytes:
    return struct.pack("!HHH", priority, weight, port) + target


def txt_rdata(*strings: str) -> bytes:
    out = b""
    for s in strings:
        b = s.encode()
        out += bytes((len(b),)) + b
    return out


# ---- slow path: full, careful parsing of anything the fast path declined ----

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


class FormErr(Exception):
    """The message is a query we cannot parse; answer FORMERR."""


class Drop(Exception):
    """Not worth an answer (a response, or too short to carry an ID)."""


def parse_query(data: bytes) -> Query:
    """Parse a query strictly. Raises Drop, FormErr, or returns the query
    (whose opcode may still be unsupported; only then may it have no question,
    and `question` is empty)."""
    if len(data) < 12:
        raise Drop("short header")
    qid, flags, qd, an, ns, ar = struct.unpack_from("!2sHHHHH", data)
    if flags & 0x8000:
        raise Drop("response")
    opcode = (flags >> 11) & 0xF
    if qd == 0 and opcode != 0:
        q = Query(qid, flags, opcode, b"", 0, 0, b"")
        _parse_records(data, 12, an, ns, ar, q)
        return q
    if qd != 1:
        raise FormErr("QDCOUNT must be 1")
    i, total = 12, 0
    while True:
        if i >= len(data):
            raise FormErr("truncated name")
        n = data[i]
        if n == 0:
            i += 1
            break
        if n > 63:
            raise FormErr("compressed or bad label in question")
        total += n + 1
        if total > 254:
            raise FormErr("name over 255 octets")
        i += n + 1
    if i + 4 > len(data):
        raise FormErr("truncated question")
    qname = data[12:i]
    qtype, qclass = struct.unpack_from("!HH", data, i)
    q = Query(qid, flags, opcode, qname, qtype, qclass, data[12:i + 4])
    _parse_records(data, i + 4, an, ns, ar, q)
    return q


def _parse_records(data: bytes, i: int, an: int, ns: int, ar: int, q: Query) -> None:  # noqa: C901 - to split with the DNS wire layer
    """Walk the records after the question from offset `i`; note the OPT in `q`."""
    seen_opt = False
    # Records after the question (an IXFR query carries an SOA in Authority) are
    # walked and skipped; only an OPT in Additional is understood.
    for section, count in ((1, an), (2, ns), (3, ar)):
        for _ in range(count):
            owner_start = i
            if q.tsig >= 0:
                raise FormErr("TSIG not the last record")
            while True:
                if i >= len(data):
                    raise FormErr("truncated record")
                n = data[i]
                if n == 0:
                    i += 1
                    break
                if n & 0xC0 == 0xC0:
                    i += 2
                    break
                if n > 63:
                    raise FormErr("bad label in record")
                i += n + 1
            if i + 10 > len(data):
                raise FormErr("truncated record")
            rtype, rclass, ttl, rdlen = _RR.unpack_from(data, i)
            i += 10 + rdlen
            if i > len(data):
                raise FormErr("truncated rdata")
            if rtype == TSIG:
                if section != 3:
                    raise FormErr("TSIG outside Additional")
                q.tsig = owner_start
            if rtype == OPT:
                if section != 3 or seen_opt or data[owner_start] != 0:
                    raise FormErr("misplaced, repeated or non-root OPT")
                seen_opt = True
                q.edns, q.edns_size = True, max(512, rclass)
                q.edns_version = (ttl >> 16) & 0xFF
                q.do = bool(ttl & 0x8000)
    if i != len(data):
        raise FormErr("trailing bytes")


def error_response(data: bytes, rcode: int) -> bytes:
    """Header-only response (no question) for messages we could not parse."""
    flags = struct.unpack_from("!H", data, 2)[0]
    out_flags = 0x8000 | (flags & 0x7900) | (rcode & 0xF)  # QR, opcode, RD
    return data[:2] + struct.pack("!HHHHH", out_flags, 0, 0, 0, 0)
