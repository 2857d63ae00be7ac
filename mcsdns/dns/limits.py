"""Size limits of one DNS message and of one RRset, decided here once and applied
before anything is rendered.

A message is at most 65,535 octets (the TCP length prefix, RFC 1035 4.2.2) and a
section at most 65,535 records (the header's 16-bit counts). The zone never holds
an RRset whose records, rendered after a question (owner a 2-octet pointer), take
more than RECORDS_OCTETS: records past it are dropped, in order, when the RRset is
built (`fitting`; the first are kept: nearest locality tier first). So every answer
fits one TCP message with the largest header, question, OPT and TSIG, a section
holds at most about 4,000 records, and answers and zone transfers serve the same
records. Additional records are added to a response only while its records stay
within RECORDS_OCTETS (RFC 2181 9: Additional may be cut without TC).
"""

from __future__ import annotations

MAX_MESSAGE = 65_535  # octets of one DNS message (over TCP; UDP is smaller still)
# header 12 + question <= 259 + OPT 11 + TSIG <= 358 (key name 255, algorithm 13,
# MAC 64, fixed 26), rounded up
RESERVE = 1_535
RECORDS_OCTETS = MAX_MESSAGE - RESERVE  # 64,000: the records of one message, every section
RR_FIXED = 12  # a record besides its rdata: owner as a pointer (2), type, class, TTL, RDLENGTH
RDATA_MAX = 6 + 255  # the largest rdata the zone serves: SRV, target of 255 octets
SAFE_COUNT = RECORDS_OCTETS // (RR_FIXED + RDATA_MAX)  # 245: this many records always fit


def fitting(rdatas: tuple[bytes, ...]) -> int:
    """How many of `rdatas`, from the first, fit RECORDS_OCTETS as one RRset's records."""
    if len(rdatas) <= SAFE_COUNT:
        return len(rdatas)
    used = 0
    for i, rd in enumerate(rdatas):
        used += RR_FIXED + len(rd)
        if used > RECORDS_OCTETS:
            return i
    return len(rdatas)
