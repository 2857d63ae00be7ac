"""The response type (mcsdns.nameserver.response): what `render` makes, what `keep` keeps and
the cache's `replayer` sends again, each parsed by dnspython: the whole answer when it
fits, else without Additional, else TC; rotations in turn, carried on by the kept
response; the zone's current serial in a negative answer, with and without OPT."""

from __future__ import annotations

import struct

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

from mcsdns.dns.answer import OPT_DO0, OPT_DO1, RR, Answer, header_index, render
from mcsdns.dns.header import RD
from mcsdns.dns.names import encode_name
from mcsdns.dns.rdata import SERIAL_FROM_END, SOA
from mcsdns.dns.types import Rcode, RRType
from mcsdns.nameserver.response import Canned, keep, replayer
from mcsdns.nameserver.response import render as respond

QNAME = "Big.Shop.svc.clusterset.local."  # asked in mixed case: echoed as asked
LNAME = encode_name(QNAME)
ORIGIN = encode_name("clusterset.local.")
TTL = 5


def question(rtype: int) -> bytes:
    """The question as asked (case kept), type and class IN."""
    wire = b"".join(bytes((len(lab),)) + lab.encode() for lab in QNAME.rstrip(".").split(".")) + b"\x00"
    return wire + struct.pack("!HH", rtype, 1)


def a_records(n: int) -> list[RR]:
    return [RR(None, RRType.A, TTL, bytes((10, 0, i // 250, i % 250 + 1))) for i in range(n)]


def rotating(n: int, rotations: int, additional: int = 0) -> Answer:
    """An A answer of `n` records in `rotations` orders, with `additional` glue records
    and its fallback (no Additional) as the zone renders it."""
    recs = a_records(n)
    rots = [recs[i:] + recs[:i] for i in range(rotations)]
    glue = [RR(encode_name(f"pod-{i}.clusterset.local."), RRType.A, TTL, bytes((10, 1, 0, i % 250 + 1)))
            for i in range(additional)]
    ans = render(LNAME, RRType.A, Rcode.NOERROR, rots, [], glue)
    if additional:
        ans.fallback = render(LNAME, RRType.A, Rcode.NOERROR, rots, [], [])
    return ans


def negative() -> Answer:
    """NXDOMAIN with the zone's SOA, its serial patched in at every send."""
    soa = SOA.for_zone(ORIGIN, TTL, 1)
    ans = render(LNAME, RRType.A, Rcode.NXDOMAIN, [], [RR(ORIGIN, RRType.SOA, TTL, soa.wire())], [])
    ans.serial_at = SERIAL_FROM_END
    return ans


def parse(out: bytes) -> dns.message.Message:
    return dns.message.from_wire(out)


def answer_addresses(m: dns.message.Message) -> list[str]:
    return [rd.address for rrset in m.answer for rd in rrset]


SERIAL = bytearray(struct.pack("!I", 2024))


def test_a_fitting_answer_is_sent_whole_with_the_question_as_asked() -> None:
    ans = rotating(3, 1)
    q = question(RRType.A)
    out = respond(b"\x12\x34", ans, header_index(RD, True), q, OPT_DO1, 1232, SERIAL)
    m = parse(out)
    assert m.id == 0x1234 and m.rcode() == dns.rcode.NOERROR
    assert m.flags & dns.flags.QR and m.flags & dns.flags.AA and m.flags & dns.flags.RD
    assert not m.flags & dns.flags.TC
    assert m.question[0].name.to_text() == QNAME  # case as asked
    assert answer_addresses(m) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert m.edns == 0 and m.ednsflags & dns.flags.DO and m.payload == 1232


def test_too_large_drops_additional_then_truncates() -> None:
    q = question(RRType.A)
    ans = rotating(20, 1, additional=30)  # 20 x 16 octets of answer, 30 glue records
    whole = 12 + len(q) + ans.size
    assert ans.fallback is not None and 12 + len(q) + ans.fallback.size < 512 < whole
    m = parse(respond(b"\x00\x01", ans, 0, q, b"", whole, SERIAL))  # fits exactly
    assert len(answer_addresses(m)) == 20 and sum(len(r) for r in m.additional) == 30
    m = parse(respond(b"\x00\x01", ans, 0, q, b"", whole - 1, SERIAL))  # one octet short: fallback
    assert len(answer_addresses(m)) == 20 and not m.additional and not m.flags & dns.flags.TC
    big = rotating(40, 1)  # 640 octets of records, no fallback
    m = parse(respond(b"\x00\x02", big, 4, q, OPT_DO0, 512, SERIAL))
    assert m.flags & dns.flags.TC and not m.answer and m.question and m.edns == 0
    assert not m.flags & dns.flags.RD  # the query had none (idx 4: EDNS only)


def test_rotations_take_turns_and_a_kept_response_carries_on() -> None:
    q = question(RRType.A)
    ans, twin = rotating(3, 3), rotating(3, 3)
    firsts = [answer_addresses(parse(respond(b"\x00\x01", ans, 1, q, b"", 512, SERIAL)))[0] for _ in range(4)]
    assert firsts == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1"]
    out = respond(b"\x00\x07", ans, 1, q, OPT_DO0, 512, SERIAL)
    twin_out = [respond(b"\x00\x07", twin, 1, q, OPT_DO0, 512, SERIAL) for _ in range(5)]
    assert out == twin_out[4]
    c = keep(out, ans, 1, q, OPT_DO0, 512)
    assert c is not None and c.bodies is not None
    hit = replayer(({b"\x01\x00" + q: c}, {}), SERIAL)
    data = b"\x00\x07\x01\x00" + q  # the key is the query after its ID
    assert [hit(data, False) for _ in range(3)] == [
        respond(b"\x00\x07", twin, 1, q, OPT_DO0, 512, SERIAL) for _ in range(3)]
    assert hit(data, True) is None and c.hits == 4


def test_a_rotating_answer_cut_to_its_fallback_is_not_kept() -> None:
    q = question(RRType.A)
    ans = rotating(20, 2, additional=30)
    out = respond(b"\x00\x01", ans, 0, q, b"", 512, SERIAL)
    assert not parse(out).additional
    assert keep(out, ans, 0, q, b"", 512) is None
    one = rotating(20, 1, additional=30)  # one order: kept as sent
    out = respond(b"\x00\x01", one, 0, q, b"", 512, SERIAL)
    c = keep(out, one, 0, q, b"", 512)
    assert isinstance(c, Canned) and c.out == out[2:] and c.serial_at == 0


def soa_serial(m: dns.message.Message) -> int:
    (rrset,) = m.authority
    assert rrset.rdtype == dns.rdatatype.SOA
    return int(rrset[0].serial)


def test_a_negative_answer_carries_the_current_serial_sent_or_replayed() -> None:
    q = question(RRType.A)
    serial = bytearray(struct.pack("!I", 7))
    for opt in (b"", OPT_DO1):
        ans, idx = negative(), header_index(0, bool(opt))
        out = respond(b"\xab\xcd", ans, idx, q, opt, 512, serial)
        m = parse(out)
        assert m.rcode() == dns.rcode.NXDOMAIN and soa_serial(m) == 7 and (m.edns == 0) == bool(opt)
        c = keep(out, ans, idx, q, opt, 512)
        assert c is not None and c.serial_at == SERIAL_FROM_END + len(opt)
        hit = replayer(({b"\x00\x00" + q + opt: c}, {}), serial)
        serial[:] = struct.pack("!I", 4_000_000_000)  # the zone's serial moves on
        again = hit(b"\x99\x98\x00\x00" + q + opt, False)
        assert again is not None
        m = parse(again)
        assert m.id == 0x9998 and soa_serial(m) == 4_000_000_000 and (m.edns == 0) == bool(opt)
        assert again[2:] == respond(b"\x99\x98", negative(), idx, q, opt, 512, serial)[2:]
        serial[:] = struct.pack("!I", 7)
