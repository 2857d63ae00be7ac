"""mcsdns.dns, the one wire layer, checked against dnspython as the oracle: names, record
data both ways, the compressing writer, headers and the strict parser."""

from __future__ import annotations

import struct

import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import pytest

from mcsdns.dns import header, rdata
from mcsdns.dns.answer import RR, render
from mcsdns.dns.errors import FormErr
from mcsdns.dns.message import header_only, parse_query, question_end
from mcsdns.dns.names import decode_name, encode_name, is_subdomain, is_wire_name, read_name, skip_name
from mcsdns.dns.types import RRType, qtype_label, rcode_label
from mcsdns.dns.writer import Writer

ZONE = encode_name("clusterset.local")


@pytest.mark.parametrize("text", ["clusterset.local.", "A.B.c", "x" * 63 + ".local", ".", "_http._tcp.web"])
def test_names_encode_as_dnspython_does_lowercased(text: str) -> None:
    assert encode_name(text) == dns.name.from_text(text.lower()).to_wire()
    assert decode_name(encode_name(text)) == dns.name.from_text(text.lower()).to_text()
    assert is_wire_name(encode_name(text))


@pytest.mark.parametrize("bad", ["a..b", "x" * 64 + ".local", ".".join(["abcdefg"] * 32)])
def test_bad_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        encode_name(bad)


def test_subdomain_is_on_a_label_boundary() -> None:
    assert is_subdomain(encode_name("web.shop.svc.clusterset.local"), ZONE)
    assert is_subdomain(ZONE, ZONE)
    assert not is_subdomain(encode_name("notclusterset.local"), ZONE)
    assert not is_subdomain(encode_name("local"), ZONE)


def test_reading_names_from_messages() -> None:
    msg = b"\x00" * 12 + encode_name("a.example") + b"\xc0\x0c"
    assert read_name(msg, 12) == (encode_name("a.example"), 23)
    assert skip_name(msg, 23) == 25  # a compression pointer
    with pytest.raises(FormErr):
        read_name(msg, 23)  # compressed where it may not be
    with pytest.raises(FormErr):
        read_name(msg[:20], 12)  # truncated
    with pytest.raises(FormErr):
        read_name((b"\x3f" + b"a" * 63) * 4 + b"\x00", 0)  # 257 octets


@pytest.mark.parametrize("rtype,text", [
    ("A", "10.42.0.1"), ("AAAA", "fd00::1"), ("NS", "ns.dns.clusterset.local."),
    ("SRV", "1 50 8080 web.shop.svc.clusterset.local."),
    ("SOA", "ns.dns.clusterset.local. hostmaster.clusterset.local. 1700000000 7200 1800 86400 5"),
    ("TXT", '"1.0.0" "two words"'),
])
def test_rdata_converts_both_ways_as_dnspython(rtype: str, text: str) -> None:
    rd = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.from_text(rtype), text)
    wire = rd.to_digestable()
    obj = rdata.from_wire(RRType[rtype], wire)
    assert obj is not None and obj.wire() == wire
    assert rdata.text(RRType[rtype], wire) == rd.to_text()


def test_soa_serial_sits_where_the_cache_patches_it() -> None:
    soa = rdata.SOA.for_zone(ZONE, 5, 1234).wire()
    patched = rdata.with_serial(soa, 99)
    assert rdata.SOA.from_wire(patched).serial == 99
    assert struct.unpack("!I", soa[-rdata.SERIAL_FROM_END:][:4])[0] == 1234


def test_unknown_types_print_in_the_generic_form() -> None:
    assert rdata.text(99, b"\x01\x02") == "\\# 2 0102"


def test_the_writer_compresses_owners_and_never_srv_targets() -> None:
    qname = encode_name("_http._tcp.web.shop.svc.clusterset.local")
    target = encode_name("web.shop.svc.clusterset.local")
    host = encode_name("pod-1.east.db.shop.svc.clusterset.local")
    srv = rdata.SRV(0, 100, 80, target).wire()
    ans = render(qname, RRType.SRV, 0, [[RR(None, RRType.SRV, 5, srv)]], [],
                 [RR(target, RRType.A, 5, b"\x0a\x2a\x00\x0a"), RR(host, RRType.A, 5, b"\x0a\x00\x00\x01"),
                  RR(host, RRType.AAAA, 5, b"\xfd" + b"\x00" * 15)])
    q = dns.message.make_query(dns.name.from_wire(qname, 0)[0], "SRV")
    wire = q.id.to_bytes(2, "big") + ans.hdrs[0] + qname + b"\x00\x21\x00\x01" + ans.bodies[0]
    m = dns.message.from_wire(wire)
    assert m.answer[0][0].target.to_text() == "web.shop.svc.clusterset.local."
    assert {r.name.to_text() for r in m.additional} == {"web.shop.svc.clusterset.local.",
                                                        "pod-1.east.db.shop.svc.clusterset.local."}
    assert target in wire  # the SRV target in full
    assert wire.count(b"\x05local\x00") == 2  # the question, and the SRV target; owners point
    w = Writer()
    w.add(host, RRType.A, 5, b"\x0a\x00\x00\x01")
    w.add(host, RRType.A, 5, b"\x0a\x00\x00\x02")
    body, n = w.take()
    assert n == 2 and body.count(b"\x05pod-1") == 1 and w.size() == 0


def test_response_headers_echo_opcode_rd_cd_only() -> None:
    q = 0x0100 | 0x0010 | 0x0020 | 0x0080  # RD CD AD RA
    f = header.response_flags(q, 3, aa=True)
    assert f == header.QR | header.AA | header.RD | header.CD | 3
    assert header.opcode(header.response_flags(4 << 11, 0)) == 4


def test_parser_errors() -> None:
    good = dns.message.make_query("web.shop.svc.clusterset.local.", "A", use_edns=0).to_wire()
    q = parse_query(good)
    assert q.edns and q.qtype == RRType.A and q.end_of_question == len(good) - 11
    assert header_only(q, 5)[3] & 0xF == 5
    for bad in (good + b"\x00", good[:-3], good[:12] + b"\xc0\x0c\x00\x01\x00\x01"):
        with pytest.raises(FormErr):
            parse_query(bad)


def test_question_end_is_the_parser_s_for_plain_names_and_flags_the_rest() -> None:
    """The fast question end agrees with the strict parser on every plain name, is under
    17 without a zero octet, and is wrong only for a name its callers reject as not
    plain (`is_wire_name`), which the parser then reads label by label."""
    for name in ("web.shop.svc.clusterset.local.", ".", "A.b." + "x" * 63 + ".c."):
        msg = dns.message.make_query(name, "SRV", use_edns=0).to_wire()
        assert question_end(msg) == parse_query(msg).end_of_question
    assert question_end(b"\x00" * 12 + b"\x03abc") < 17
    odd = b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x02a\x00\x00" + b"\x00\x01\x00\x01"
    end = question_end(odd)  # a zero octet inside the first label
    assert end == 12 + 2 + 5 and not is_wire_name(odd[12:end - 4])
    assert parse_query(odd).end_of_question == len(odd)


def test_metric_labels() -> None:
    labels = (qtype_label(1), qtype_label(65), qtype_label(41), qtype_label(999))
    assert labels == ("A", "HTTPS", "other", "other")
    assert (rcode_label(3), rcode_label(16), rcode_label(7)) == ("NXDOMAIN", "BADVERS", "other")
