"""Zone transfers, TSIG and the SOA serial, over real sockets (dnspython as the client)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from unittest import mock

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import dns.tsigkeyring
import dns.xfr
import dns.zone
import pytest
from support.helpers import Server, clusterset_ip, copy_example, headless, run_server, wait_for
from support.xfr import (
    BADRING,
    KEY,
    KEYRING,
    OTHERRING,
    ZONE,
    axfr,
    flatten,
    one_query,
    records_text,
    soa_serial,
)


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    return copy_example(tmp_path / "manifests")


def test_axfr_is_soa_zone_soa_and_equals_mcsdns_records(mdir: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.0/8"], tmp_path) as srv:
        msgs = axfr(srv)
        rrs = flatten(msgs)
        serial = soa_serial(srv)
    assert rrs[0][1] == "SOA" and rrs[-1][1] == "SOA" and rrs[0] == rrs[-1]
    assert int(rrs[0][2].split()[2]) == serial
    assert sum(1 for r in rrs if r[1] == "SOA") == 2
    body = rrs[1:-1]
    assert len(body) == len(set(body))
    assert set(body) == records_text(mdir)
    assert ("db.shop.svc.clusterset.local.", "A", "10.1.1.11") in set(body)
    assert all(m.flags & dns.flags.AA and m.rcode() == dns.rcode.NOERROR for m in msgs)


def test_large_axfr_is_split_into_messages(mdir: Path, tmp_path: Path) -> None:
    (mdir / "big.yaml").write_text(headless("h3000", 3000))
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1"], tmp_path) as srv:
        msgs = axfr(srv)
    rrs = flatten(msgs)
    assert len(msgs) > 5
    assert all(len(m.to_wire()) <= 65535 for m in msgs)
    assert set(rrs[1:-1]) == records_text(mdir)
    # 3000 pod names, the service's A and SRV sets, the port's SRV set
    assert sum(1 for r in rrs if r[0] == "h3000.big.svc.clusterset.local." and r[1] == "A") == 3000


def test_transfers_refused_by_default_over_udp_and_outside_the_acl(mdir: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        q = dns.message.make_query(ZONE, "AXFR")
        assert one_query(srv, q).rcode() == dns.rcode.REFUSED
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.2/32"], tmp_path) as srv:
        for rdtype in ("AXFR", "IXFR"):
            q = dns.message.make_query(ZONE, rdtype)
            if rdtype == "IXFR":
                q.authority.append(dns.rrset.from_text(
                    ZONE, 0, "IN", "SOA", f"ns.dns.{ZONE} hostmaster.{ZONE} 1 7200 1800 86400 5"))
            r = one_query(srv, q)  # from 127.0.0.1
            assert r.rcode() == dns.rcode.REFUSED and not r.answer
            assert not r.flags & dns.flags.AA
        q = dns.message.make_query(ZONE, "AXFR")
        assert one_query(srv, q, tcp=False).rcode() == dns.rcode.REFUSED  # UDP: never
        assert flatten(axfr(srv, source="127.0.0.2"))[0][1] == "SOA"  # inside the ACL
        q = dns.message.make_query("other.example.", "AXFR")
        assert one_query(srv, q).rcode() == dns.rcode.REFUSED
        # ordinary queries on the same connection kind still answered
        assert srv.query("web.shop.svc.clusterset.local.", "A", tcp=True).answer


def test_tsig_required_for_transfers_when_a_key_is_configured(mdir: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1",
                     "--tsig-key", KEY], tmp_path) as srv:
        assert one_query(srv, dns.message.make_query(ZONE, "AXFR")).rcode() == dns.rcode.REFUSED
        # good key: every message verified by dnspython
        msgs = axfr(srv, keyring=KEYRING, keyname="xfr-key.")
        assert flatten(msgs)[0][1] == "SOA" and all(m.had_tsig for m in msgs)
        # wrong secret: NOTAUTH, BADSIG, unsigned
        q = dns.message.make_query(ZONE, "AXFR")
        q.use_tsig(BADRING, keyname="xfr-key.")
        r = one_query(srv, q)
        assert r.rcode() == dns.rcode.NOTAUTH and r.tsig_error == dns.rcode.BADSIG
        assert r.tsig is not None and r.tsig[0].mac == b"" and not r.answer
        # unknown key: BADKEY
        q = dns.message.make_query(ZONE, "AXFR")
        q.use_tsig(OTHERRING, keyname="other.")
        r = one_query(srv, q)
        assert r.rcode() == dns.rcode.NOTAUTH and r.tsig_error == dns.rcode.BADKEY
        # stale time: BADTIME, signed
        rq = dns.message.make_query(ZONE, "SOA")
        rq.use_tsig(KEYRING, keyname="xfr-key.")
        with mock.patch("time.time", return_value=time.time() - 1000):
            stale = rq.to_wire()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.sendto(stale, srv.addr)
            r = dns.message.from_wire(s.recv(65535), keyring=False)
        assert r.rcode() == dns.rcode.NOTAUTH and r.tsig_error == dns.rcode.BADTIME
        assert r.tsig is not None and len(r.tsig[0].mac) == 32


def test_signed_queries_without_keys_get_badkey_and_with_a_key_are_signed(
        mdir: Path, tmp_path: Path) -> None:
    name = "web.shop.svc.clusterset.local."
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        for tcp in (False, True):
            q = dns.message.make_query(name, "A", use_edns=0)
            q.use_tsig(KEYRING, keyname="xfr-key.")
            r = one_query(srv, q, tcp=tcp)
            assert r.rcode() == dns.rcode.NOTAUTH and r.tsig_error == dns.rcode.BADKEY
            assert r.tsig is not None and r.tsig[0].mac == b"" and not r.answer
            assert r.question[0].name == dns.name.from_text(name)
        assert srv.query(name).answer  # unsigned queries unaffected
    with run_server(["--manifests", str(mdir), "--tsig-key", KEY], tmp_path) as srv:
        for tcp in (False, True):
            q = dns.message.make_query(name, "A", use_edns=0)
            q.use_tsig(KEYRING, keyname="xfr-key.")
            # dnspython verifies the response's TSIG against the request's MAC
            r = (dns.query.tcp if tcp else dns.query.udp)(q, "127.0.0.1", port=srv.port, timeout=3)
            assert r.had_tsig and r.rcode() == dns.rcode.NOERROR
            assert {rd.to_text() for rr in r.answer for rd in rr} == {"10.42.0.10"}
            q = dns.message.make_query(name, "A")
            q.use_tsig(BADRING, keyname="xfr-key.")
            r = one_query(srv, q, tcp=tcp)
            assert r.rcode() == dns.rcode.NOTAUTH and r.tsig_error == dns.rcode.BADSIG


def two_changes(srv: Server, mdir: Path) -> tuple[int, int, int]:
    """The serial before, after one change of api's address and after another."""
    serials = [soa_serial(srv)]
    for ip in ("10.77.0.1", "10.77.0.2"):
        (mdir / "live.yaml").write_text(clusterset_ip("api", ip))
        assert wait_for(lambda: soa_serial(srv) != serials[-1])
        serials.append(soa_serial(srv))
    return serials[0], serials[1], serials[2]


def test_serial_grows_per_change_and_ixfr_follows(mdir: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1"], tmp_path) as srv:
        zone = dns.zone.Zone(ZONE, relativize=False)
        dns.query.inbound_xfr("127.0.0.1", zone, port=srv.port, timeout=5)
        s0, s1, s2 = two_changes(srv, mdir)
        assert s0 < s1 < s2
        # IXFR from s0: two deltas, applied by dnspython to its copy of the zone
        q, _ = dns.xfr.make_query(zone)
        raw = one_query(srv, q)
        rrs = [(rr.name.to_text(), dns.rdatatype.to_text(rr.rdtype), rd.to_text())
               for rr in raw.answer for rd in rr]
        assert [int(r[2].split()[2]) for r in rrs if r[1] == "SOA"] == [s2, s0, s1, s1, s2, s2]
        dns.query.inbound_xfr("127.0.0.1", zone, port=srv.port, timeout=5)
        fresh = dns.zone.Zone(ZONE, relativize=False)
        dns.query.inbound_xfr("127.0.0.1", fresh, port=srv.port, timeout=5)
        assert zone == fresh
        assert zone.find_rdataset("api.live.svc.clusterset.local.", "A")[0].to_text() == "10.77.0.2"
        # an up-to-date client gets one SOA; an unknown serial gets the whole zone
        q, _ = dns.xfr.make_query(zone)
        assert [r.rdtype for r in one_query(srv, q).answer] == [dns.rdatatype.SOA]
        q = dns.message.make_query(ZONE, "IXFR")
        q.authority.append(dns.rrset.from_text(
            ZONE, 0, "IN", "SOA", f"ns.dns.{ZONE} hostmaster.{ZONE} {s0 - 100} 7200 1800 86400 5"))
        full = one_query(srv, q)
        assert sum(len(rr) for rr in full.answer) == sum(1 for _ in fresh.iterate_rdatas()) + 1
        # negative answers carry the current serial too
        r = srv.query("nope.clusterset.local.", "A")
        assert r.rcode() == dns.rcode.NXDOMAIN and r.authority[0][0].serial == s2


def test_serial_survives_restart_with_state_dir(mdir: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    args = ["--manifests", str(mdir), "--state-dir", str(state)]
    with run_server(args, tmp_path) as srv:
        assert wait_for(lambda: (state / "serial").exists())
        s0, s1, s2 = two_changes(srv, mdir)
    assert s2 > s1 > s0
    with run_server(args, tmp_path) as srv:  # same content: same serial
        assert wait_for(lambda: soa_serial(srv) == s2)
    (mdir / "live.yaml").write_text(clusterset_ip("api", "10.77.0.3"))
    with run_server(args, tmp_path) as srv:  # changed while down: a newer one
        assert wait_for(lambda: soa_serial(srv) > s2)
    (state / "serial").write_text("{corrupt")
    with run_server(args, tmp_path) as srv:  # unreadable state: reported, time-based serial
        assert wait_for(lambda: "ignoring unreadable serial state" in srv.logs())
        assert soa_serial(srv) >= int(time.time()) - 60
