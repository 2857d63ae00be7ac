"""The largest objects the API accepts, served by a real server over real sockets: a
headless service whose two EndpointSlices (IPv4 and IPv6) each hold 1,000 endpoints and
100 ports (the API's maxima), under a 63-character namespace and service name, a 40- and a
63-character cluster ID, 63- and 40-character hostnames (h + c = 103: the longest names
that fit 255 octets under them), 62-character port names (and one of 63, whose `_port`
label cannot be sent: left out), and a dual-stack ClusterSetIP service with the same 100
ports. Every answer is valid DNS over UDP (TC with no records when it does not fit) and
TCP; SRV answers carry their targets' addresses in Additional; a whole-zone AXFR parses
in dnspython and holds exactly the records the objects make."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.zone
import pytest
from support.helpers import Server, run_server, tool
from support.xfr import ZONE, records_text

NS, HL, VIP = "n" * 63, "s" * 63, "t" * 63
C4, C6 = "c" * 40, "d" * 63  # cluster IDs of the IPv4 and the IPv6 slice
ENDPOINTS, PORTS = 1000, 100  # EndpointSlice maxima: endpoints, ports
HL_NAME, VIP_NAME = f"{HL}.{NS}.svc.{ZONE}", f"{VIP}.{NS}.svc.{ZONE}"
CUT = 234  # SRV records one message holds at 255-octet targets: dns.limits, 64,000 // (12 + 261)


def port_name(i: int) -> str:
    return f"p{i:02d}" + "x" * (59 if i < PORTS - 1 else 60)  # 62 octets; the last 63


def proto(i: int) -> str:
    return "TCP" if i % 2 == 0 else "UDP"


def port_owner(i: int, svc: str) -> str:
    return f"_{port_name(i)}._{proto(i).lower()}.{svc}"


def host4(i: int) -> str:
    return f"h{i:04d}" + "h" * 58  # 63


def host6(i: int) -> str:
    return f"g{i:04d}" + "g" * 35  # 40


def ip4(i: int) -> str:
    return f"10.{20 + i // 250}.{i % 250}.1"


def ip6(i: int) -> str:
    return f"fd00::{i + 1:x}"


ADDRS4 = {f"{host4(i)}.{C4}.{HL_NAME}": ip4(i) for i in range(ENDPOINTS)}
ADDRS6 = {f"{host6(i)}.{C6}.{HL_NAME}": ip6(i) for i in range(ENDPOINTS)}
SERVED = range(PORTS - 1)  # the ports whose names can be sent


def manifests() -> str:
    ports = ", ".join(f"{{name: {port_name(i)}, protocol: {proto(i)}, port: {1000 + i}}}"
                      for i in range(PORTS))

    def slice_of(name: str, cluster: str, family: str, eps: list[tuple[str, str]]) -> str:
        lines = "\n".join(f'- {{addresses: ["{a}"], hostname: {h}, conditions: {{ready: true}}}}'
                          for h, a in eps)
        return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: {NS}
  labels:
    multicluster.kubernetes.io/service-name: {HL}
    multicluster.kubernetes.io/source-cluster: {cluster}
addressType: {family}
ports: [{ports}]
endpoints:
{lines}
"""

    return f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {HL}, namespace: {NS}}}
spec: {{type: Headless, ports: [{ports}]}}
---
{slice_of("v4", C4, "IPv4", [(host4(i), ip4(i)) for i in range(ENDPOINTS)])}
---
{slice_of("v6", C6, "IPv6", [(host6(i), ip6(i)) for i in range(ENDPOINTS)])}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {VIP}, namespace: {NS}}}
spec: {{type: ClusterSetIP, ips: ["10.250.0.1", "fd00:250::1"], ports: [{ports}]}}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    tmp = tmp_path_factory.mktemp("maxima")
    mdir = tmp / "m"
    mdir.mkdir()
    (mdir / "max.yaml").write_text(manifests())
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1"], tmp, timeout=120) as srv:
        yield srv, mdir


def rdatas(section: list[dns.rrset.RRset]) -> set[tuple[str, str, str]]:
    return {(rr.name.to_text(), dns.rdatatype.to_text(rr.rdtype), rd.to_text())
            for rr in section for rd in rr}


def ask(srv: Server, name: str, rdtype: str, tcp: bool,
        payload: int | None) -> tuple[dns.message.Message, int]:
    """The response parsed strictly (no trailing octets), and its size."""
    q = dns.message.make_query(name, rdtype, use_edns=0 if payload else False, payload=payload or 512)
    q.flags &= ~dns.flags.RD
    wire = srv.exchange(q.to_wire(), tcp)
    return dns.message.from_wire(wire, ignore_trailing=False), len(wire)


def check(srv: Server, zone: set[tuple[str, str, str]], name: str, rdtype: str) -> int:
    """Asked over TCP, then UDP with and without EDNS: the TCP answer is the zone's RRset,
    its Additional the zone's addresses of its SRV targets; UDP gives the same answer or
    TC with no records. Returns how many records the answer holds."""
    want = {r for r in zone if r[0] == name and r[1] == rdtype}
    r, size = ask(srv, name, rdtype, True, 1232)
    assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA and not r.flags & dns.flags.TC
    assert size <= 65535 and rdatas(r.answer) == want and want, (name, rdtype)
    targets = {rd.target.to_text() for rr in r.answer if rr.rdtype == dns.rdatatype.SRV for rd in rr}
    extra = rdatas(r.additional)
    assert extra <= {z for z in zone if z[0] in targets and z[1] in ("A", "AAAA")}, name
    assert {z[0] for z in extra} <= targets
    for payload, limit in ((1232, 1232), (None, 512)):
        u, size = ask(srv, name, rdtype, False, payload)
        assert size <= limit and u.rcode() == dns.rcode.NOERROR
        if u.flags & dns.flags.TC:
            assert not u.answer and not u.additional, (name, rdtype, payload)
        else:
            assert rdatas(u.answer) == want, (name, rdtype, payload)
    return len(want)


def test_answers_over_udp_and_tcp(served: tuple[Server, Path]) -> None:
    srv, mdir = served
    zone = {(n, t, d) for n, t, d in records_text(mdir)}
    assert check(srv, zone, HL_NAME, "A") == ENDPOINTS and check(srv, zone, HL_NAME, "AAAA") == ENDPOINTS
    assert check(srv, zone, HL_NAME, "SRV") == CUT
    for i in (0, 1, 57, 98):
        srv_rrs = {d for n, t, d in zone if n == port_owner(i, HL_NAME) and t == "SRV"}
        assert len(srv_rrs) == CUT and all(d.split()[2] == str(1000 + i) for d in srv_rrs)
        assert check(srv, zone, port_owner(i, HL_NAME), "SRV") == CUT
    for name, addr in ((f"{host4(0)}.{C4}.{HL_NAME}", "A"), (f"{host4(999)}.{C4}.{HL_NAME}", "A"),
                       (f"{host6(0)}.{C6}.{HL_NAME}", "AAAA"), (f"{host6(999)}.{C6}.{HL_NAME}", "AAAA")):
        assert check(srv, zone, name, addr) == 1
    assert check(srv, zone, VIP_NAME, "A") == 1 and check(srv, zone, VIP_NAME, "AAAA") == 1
    assert check(srv, zone, VIP_NAME, "SRV") == len(SERVED)
    for i in SERVED:  # each port name: one SRV, its own port, the service as target
        r, _ = ask(srv, port_owner(i, VIP_NAME), "SRV", False, 1232)
        assert [(rd.port, rd.target.to_text()) for rr in r.answer for rd in rr] == [(1000 + i, VIP_NAME)]
        assert rdatas(r.additional) == {(VIP_NAME, "A", "10.250.0.1"), (VIP_NAME, "AAAA", "fd00:250::1")}
    out = subprocess.run([tool("dig"), "@127.0.0.1", "-p", str(srv.port), "+norec", "+tcp",
                          port_owner(0, HL_NAME), "SRV"], capture_output=True, text=True, timeout=10).stdout
    assert "status: NOERROR" in out and f"ANSWER: {CUT}," in out and "bad packet" not in out, out
    # the log states each cut RRset's true size: a port name's, every endpoint; the name's, every
    # endpoint at every port name (not the 99 x 234 its port names kept)
    [cut] = [ln for ln in srv.logs().splitlines() if f"service {NS}/{HL}: " in ln and " cut to " in ln]
    port_had, name_had = len(ADDRS4) + len(ADDRS6), len(SERVED) * (len(ADDRS4) + len(ADDRS6))
    assert cut.count(f"SRV {CUT} of {port_had}") == len(SERVED), cut
    assert cut.endswith(f"SRV {CUT} of {name_had}"), cut


def test_whole_zone_transfer_parses_and_holds_every_record(served: tuple[Server, Path]) -> None:
    srv, mdir = served
    msgs = list(dns.query.xfr("127.0.0.1", ZONE, port=srv.port, timeout=10, lifetime=60, relativize=False))
    assert all(len(m.to_wire()) <= 65535 for m in msgs)
    z = dns.zone.from_xfr(iter(msgs), relativize=False)
    got = {(n.to_text(), dns.rdatatype.to_text(rds.rdtype), rd.to_text())
           for n, rds in z.iterate_rdatasets() for rd in rds if rds.rdtype != dns.rdatatype.SOA}
    assert got == records_text(mdir)
    assert all(len(n.to_wire() or b"") <= 255 for n in z.nodes)

    def rrset(name: str, rdtype: str) -> set[str]:
        return {d for n, t, d in got if n == name and t == rdtype}

    assert {n: rrset(n, "A") for n in ADDRS4} == {n: {a} for n, a in ADDRS4.items()}
    assert {n: rrset(n, "AAAA") for n in ADDRS6} == {n: {a} for n, a in ADDRS6.items()}
    assert rrset(HL_NAME, "A") == set(ADDRS4.values()) and rrset(HL_NAME, "AAAA") == set(ADDRS6.values())
    for i in SERVED:
        assert rrset(port_owner(i, VIP_NAME), "SRV") == {f"0 100 {1000 + i} {VIP_NAME}"}
        targets = [d.split() for d in rrset(port_owner(i, HL_NAME), "SRV")]
        assert len(targets) == CUT and {int(p) for _, _, p, _ in targets} == {1000 + i}
        assert {t for *_, t in targets} <= ADDRS4.keys() | ADDRS6.keys()
    assert not any(port_name(PORTS - 1) in n for n, _, _ in got)
    print(f"AXFR: {len(msgs)} messages, {len(got)} records, {sum(len(m.to_wire()) for m in msgs)} octets")
