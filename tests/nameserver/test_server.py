"""Server behaviour over real sockets: live manifest reloads, bad input, TCP, truncation."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from support.helpers import Server, clusterset_ip, copy_example, headless, run_server, wait_for

from mcsdns.data.store import Store
from mcsdns.sources.files import FileSource

SVC = "web.shop.svc.clusterset.local."


def a_records(srv: Server, name: str) -> set[str]:
    r = srv.query(name, "A")
    return {rd.to_text() for rr in r.answer for rd in rr}


def raw_udp(srv: Server, payload: bytes, timeout: float = 10.0) -> bytes | None:
    """The answer to `payload`, None if none came within `timeout` (short where none is wanted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(payload, srv.addr)
        try:
            return s.recv(65535)
        except TimeoutError:
            return None


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    return copy_example(tmp_path / "manifests")


@pytest.fixture
def srv(mdir: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    (mdir / "big.yaml").write_text(headless("h100", 100))
    with run_server(["--manifests", str(mdir)], tmp_path) as s:
        yield s


def test_manifest_changes_are_picked_up(srv: Server, mdir: Path) -> None:
    name = "api.live.svc.clusterset.local."
    assert srv.query(name).rcode() == dns.rcode.NXDOMAIN
    f = mdir / "live.yaml"
    t0 = time.monotonic()
    f.write_text(clusterset_ip("api", "10.77.0.1"))
    assert wait_for(lambda: a_records(srv, name) == {"10.77.0.1"})
    f.write_text(clusterset_ip("api", "10.77.0.2"))
    assert wait_for(lambda: a_records(srv, name) == {"10.77.0.2"})
    f.unlink()
    assert wait_for(lambda: srv.query(name).rcode() == dns.rcode.NXDOMAIN)
    print(f"\ncreate, change, delete answered in {time.monotonic() - t0:.2f} s")
    # the namespace's empty non-terminal went away with its only service
    assert srv.query("live.svc.clusterset.local.").rcode() == dns.rcode.NXDOMAIN


def test_a_change_is_answered(srv: Server, mdir: Path) -> None:
    """Each of 7 changes answered (the delays printed; what wakes the source: below)."""
    name = "fast.live.svc.clusterset.local."
    f = mdir / "fast.yaml"
    delays = []
    for i in range(1, 8):
        t0 = time.monotonic()
        f.write_text(clusterset_ip("fast", f"10.88.0.{i}"))
        assert wait_for(lambda i=i: a_records(srv, name) == {f"10.88.0.{i}"}, interval=0.002)
        delays.append(time.monotonic() - t0)
    print(f"\nchange -> answer, median {sorted(delays)[len(delays) // 2] * 1000:.1f} ms")


def test_inotify_wakes_the_manifest_source(tmp_path: Path) -> None:
    """inotify wakes the manifest source at once, polling is only the fallback: with polls an
    hour apart, each change is still read (the order of events, not a time, shows it)."""
    async def run() -> list[bytes]:
        store = Store()
        src = FileSource(store, str(tmp_path), interval=3600)
        await src.start(asyncio.get_running_loop())
        seen: list[bytes] = []
        try:
            for i in range(1, 4):
                (tmp_path / "fast.yaml").write_text(clusterset_ip("fast", f"10.88.0.{i}"))
                for _ in range(3000):  # up to 30 s; an hour without inotify
                    si = store.service(("live", "fast"))[0]
                    if si is not None and si.ips == (bytes([10, 88, 0, i]),):
                        seen.append(si.ips[0])
                        break
                    await asyncio.sleep(0.01)
        finally:
            await src.stop()
        return seen

    assert asyncio.run(run()) == [bytes([10, 88, 0, i]) for i in (1, 2, 3)]


def test_malformed_file_is_reported_and_skipped(srv: Server, mdir: Path) -> None:
    before = a_records(srv, SVC)
    assert before
    (mdir / "broken.yaml").write_text("kind: ServiceImport\nmetadata: {name: [unclosed\n")
    (mdir / "badip.yaml").write_text(clusterset_ip("bad", "10.0.0.999") + "---\n"
                                     + clusterset_ip("good", "10.0.0.9"))
    assert wait_for(lambda: a_records(srv, "good.live.svc.clusterset.local.") == {"10.0.0.9"})
    assert srv.query("bad.live.svc.clusterset.local.").rcode() == dns.rcode.NXDOMAIN
    assert a_records(srv, SVC) == before
    assert wait_for(lambda: "broken.yaml" in srv.logs() and "10.0.0.999" in srv.logs())
    status, metrics = srv.http("/metrics")
    assert status == 200
    assert 'mcsdns_skipped_objects_total{kind="ServiceImport"} 1.0' in metrics


def test_half_written_file_keeps_last_good_content(srv: Server, mdir: Path) -> None:
    f = mdir / "live.yaml"
    f.write_text(clusterset_ip("keep", "10.66.0.1"))
    name = "keep.live.svc.clusterset.local."
    assert wait_for(lambda: a_records(srv, name) == {"10.66.0.1"})
    f.write_text(clusterset_ip("keep", "10.66.0.1")[:60] + "\n  : : [")
    time.sleep(0.8)
    assert a_records(srv, name) == {"10.66.0.1"}


def test_garbage_gets_formerr_or_is_dropped(srv: Server) -> None:
    assert raw_udp(srv, b"\x12", timeout=0.5) is None  # shorter than a header: dropped
    resp = raw_udp(srv, b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff")
    assert resp is not None and resp[:2] == b"\xab\xcd"
    assert resp[3] & 0xF == dns.rcode.FORMERR and resp[2] & 0x80
    # a response (QR=1) is never answered: no reflection loops
    q = dns.message.make_query(SVC, "A").to_wire()
    assert raw_udp(srv, q[:2] + bytes((q[2] | 0x80,)) + q[3:], timeout=0.5) is None
    # QDCOUNT=2
    q2 = q[:4] + b"\x00\x02" + q[6:] + q[12:]
    resp = raw_udp(srv, q2)
    assert resp is not None and resp[3] & 0xF == dns.rcode.FORMERR
    # compression pointer in the question
    ptr = q[:12] + b"\xc0\x0c\x00\x01\x00\x01"
    resp = raw_udp(srv, ptr)
    assert resp is not None and resp[3] & 0xF == dns.rcode.FORMERR
    # the server still answers afterwards
    assert a_records(srv, SVC)


def test_notimp_for_other_opcodes(srv: Server) -> None:
    q = dns.message.make_query(SVC, "A")
    q.set_opcode(dns.opcode.NOTIFY)
    resp = dns.message.from_wire(raw_udp(srv, q.to_wire()) or b"")
    assert resp.rcode() == dns.rcode.NOTIMP and resp.id == q.id
    assert not resp.flags & dns.flags.AA


def test_refused_outside_the_zone_is_not_authoritative(srv: Server) -> None:
    r = srv.query("example.com.", "A")
    assert r.rcode() == dns.rcode.REFUSED and not r.flags & (dns.flags.AA | dns.flags.RA)
    r = srv.query("clusterset.local.", "AXFR", tcp=True)
    assert r.rcode() == dns.rcode.REFUSED and not r.flags & dns.flags.AA
    assert srv.query(SVC, "A").flags & dns.flags.AA


def test_case_of_question_is_echoed(srv: Server) -> None:
    q = dns.message.make_query("WeB.ShOp.SvC.ClusterSet.LOCAL.", "A")
    wire = raw_udp(srv, q.to_wire())
    assert wire is not None and b"\x03WeB\x04ShOp\x03SvC\x0aClusterSet\x05LOCAL" in wire
    r = dns.message.from_wire(wire)
    assert r.flags & dns.flags.AA and not r.flags & dns.flags.RA
    assert {rd.to_text() for rr in r.answer for rd in rr} == a_records(srv, SVC)


def test_truncation_and_tcp_fallback(srv: Server) -> None:
    name = "h100.big.svc.clusterset.local."
    r = srv.query(name, "A")  # 100 A records do not fit 512 octets
    assert r.flags & dns.flags.TC and not r.answer
    r = srv.query(name, "A", edns=0, payload=4096)  # nor our 1232 EDNS limit
    assert r.flags & dns.flags.TC and r.opt is not None
    r = srv.query(name, "A", tcp=True)
    assert not r.flags & dns.flags.TC
    assert len(r.answer[0]) == 100
    # SRV: answers fit with EDNS but Additional does not -> Additional dropped, no TC
    r = srv.query("_http._tcp." + name, "SRV", edns=0, payload=1232)
    if r.flags & dns.flags.TC:
        assert not r.answer
    r = srv.query("_http._tcp." + name, "SRV", tcp=True)
    assert len(r.answer[0]) == 100 and sum(len(x) for x in r.additional) == 100


def test_additional_dropped_before_truncating(srv: Server, mdir: Path) -> None:
    (mdir / "mid.yaml").write_text(headless("h16", 16, ns="mid"))
    name = "_http._tcp.h16.mid.svc.clusterset.local."
    assert wait_for(lambda: srv.query(name, "SRV", tcp=True).answer)
    r = srv.query(name, "SRV", edns=0, payload=1232)
    # 16 SRV records (~65 octets each) fit in 1232 octets; with their 16 A records they do not
    assert not r.flags & dns.flags.TC
    assert len(r.answer[0]) == 16 and not r.additional
    full = srv.query(name, "SRV", tcp=True)
    assert sum(len(x) for x in full.additional) == 16


def test_several_queries_per_tcp_connection(srv: Server) -> None:
    names = [SVC, "db.shop.svc.clusterset.local.", "nope.shop.svc.clusterset.local."]
    msgs = [dns.message.make_query(n, "A") for n in names]
    payload = b"".join(struct.pack("!H", len(w)) + w for w in (m.to_wire() for m in msgs))
    with socket.create_connection(srv.addr, timeout=2) as s:
        s.sendall(payload[:7])  # split frames across segments
        time.sleep(0.05)
        s.sendall(payload[7:])
        got: list[dns.message.Message] = []
        buf = b""
        while len(got) < 3:
            buf += s.recv(65535)
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                n = struct.unpack("!H", buf[:2])[0]
                got.append(dns.message.from_wire(buf[2:2 + n]))
                buf = buf[2 + n:]
    assert [g.id for g in got] == [m.id for m in msgs]
    assert [g.rcode() for g in got] == [0, 0, dns.rcode.NXDOMAIN]


def test_edns_echo_and_badvers(srv: Server) -> None:
    r = srv.query(SVC, "A", edns=0, payload=4096)
    assert r.opt is not None and r.payload == 1232 and r.edns == 0
    q = dns.message.make_query(SVC, "A", use_edns=1)
    resp = dns.message.from_wire(raw_udp(srv, q.to_wire()) or b"")
    assert resp.rcode() == dns.rcode.BADVERS and not resp.answer


def test_headless_answers_rotate(srv: Server) -> None:
    name = "db.shop.svc.clusterset.local."
    orders = {tuple(rd.to_text() for rr in srv.query(name).answer for rd in rr) for _ in range(6)}
    assert len(orders) > 1
    assert len({frozenset(o) for o in orders}) == 1


def test_metrics_count_responses_and_their_sizes(srv: Server) -> None:
    for _ in range(5):
        srv.query(SVC, "A")
        srv.query("db.shop.svc.clusterset.local.", "A", tcp=True)  # rotating: not cached whole
    udp = srv.metric('mcsdns_dns_responses_total{proto="udp",rcode="NOERROR",type="A"}')
    tcp = srv.metric('mcsdns_dns_responses_total{proto="tcp",rcode="NOERROR",type="A"}')
    assert udp >= 5 and tcp >= 5
    assert srv.metric('mcsdns_dns_response_size_bytes_count{proto="udp"}') == udp
    assert srv.metric('mcsdns_dns_response_size_bytes_count{proto="tcp"}') == tcp
    assert srv.metric('mcsdns_dns_response_size_bytes_bucket{le="100",proto="udp"}') >= 5
    assert srv.metric("mcsdns_cache_hits_total") >= 4
