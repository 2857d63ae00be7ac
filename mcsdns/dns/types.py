"""DNS codes as typed enums (IntEnum: they pack and compare as the integers on the wire),
and the metric labels of query types and rcodes."""

from __future__ import annotations

from enum import IntEnum


class RRType(IntEnum):
    """Resource record and query types (RFC 1035, 3596, 2782, 6891, 8945, 1995, 5936)."""

    A = 1
    NS = 2
    CNAME = 5
    SOA = 6
    PTR = 12
    MX = 15
    TXT = 16
    AAAA = 28
    SRV = 33
    OPT = 41
    DS = 43
    DNSKEY = 48
    SVCB = 64
    HTTPS = 65
    TSIG = 250
    IXFR = 251
    AXFR = 252
    ANY = 255
    CAA = 257


class RRClass(IntEnum):
    """Classes: IN, and ANY (TSIG records, queries)."""

    IN = 1
    ANY = 255


class Rcode(IntEnum):
    """Response codes; BADVERS (16) is extended (its upper bits go in the OPT record)."""

    NOERROR = 0
    FORMERR = 1
    SERVFAIL = 2
    NXDOMAIN = 3
    NOTIMP = 4
    REFUSED = 5
    NOTAUTH = 9
    BADVERS = 16


class Opcode(IntEnum):
    """Opcodes we answer or send."""

    QUERY = 0
    NOTIFY = 4


# Types the zone holds, by name (the zone-file printer, TYPE_NAMES users)
ZONE_TYPES = (RRType.A, RRType.NS, RRType.SOA, RRType.PTR, RRType.TXT, RRType.AAAA, RRType.SRV)
TYPE_NAMES = {int(t): t.name for t in ZONE_TYPES}
# Query types named in metrics labels; every other type is counted as "other".
QTYPE_LABELS = {int(t): t.name for t in RRType if t not in (RRType.OPT, RRType.TSIG)}
RCODE_NAMES = {int(r): r.name for r in Rcode}


def qtype_label(qtype: int) -> str:
    """The metrics label of a query type: a fixed set of names, else "other"."""
    return QTYPE_LABELS.get(qtype, "other")


def rcode_label(rcode: int) -> str:
    """The metrics label of an rcode: its name, else "other"."""
    return RCODE_NAMES.get(rcode, "other")
