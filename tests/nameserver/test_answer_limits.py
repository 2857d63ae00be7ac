"""Valid objects whose RRsets are larger than one DNS message (the query of death of
robustness/query_of_death.py): every answer is valid DNS, each RRset is cut once to
what one message holds (dns.limits), and asking again costs a lookup.

Before this limit the 65,600-record SRV RRset raised in the header packer on every
query (no answer, a re-render each time, the event loop busy), and a 5,000-record A
RRset was answered TC=1 with no records even over TCP."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.zone
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.helpers import LIVENESS, copy_example, run_server, stop_process, tool, wait_for  # noqa: E402
from support.ports import free_port  # noqa: E402
from support.secondaries import KEY, knotd  # noqa: E402

from robustness.query_of_death import BARE, Bystander, ask, big_slice, cpu_seconds, flood  # noqa: E402

WIDE = "wide.qod.svc.clusterset.local"  # 5,000 endpoints: 80,000 octets of A records


def _manifests(tmp: Path) -> Path:
    d = copy_example(tmp / "m")
    (d / "big.yaml").write_text(big_slice(656, 100))
    (d / "wide.yaml").write_text(big_slice(5000, 1, name="wide"))
    return d


def _valid_subset(r: dns.message.Message, rdtype: int, of: int) -> int:
    """The records of `r`'s one answer RRset, checked to be a valid, untruncated part of
    an RRset of `of` records that fits a TCP message."""
    assert r.rcode() == dns.rcode.NOERROR and not r.flags & dns.flags.TC
    assert len(r.answer) == 1 and r.answer[0].rdtype == rdtype
    assert len(r.to_wire()) <= 65535
    n = len(r.answer[0])
    assert 0 < n < of
    return n


def test_rrsets_beyond_one_message_are_answered_from_the_cache(tmp_path: Path) -> None:
    with run_server(["--manifests", str(_manifests(tmp_path))], tmp_path, timeout=60) as srv:
        started_cpu = cpu_seconds(srv.proc.pid)  # this machine's cost of a start: the yardstick
        # UDP: too large for 1232 octets, so TC as usual (dnspython parses it)
        udp = ask(srv.port, BARE, "SRV", False, 5.0)
        assert udp is not None, "no answer over UDP"
        assert udp.flags & dns.flags.TC and udp.rcode() == dns.rcode.NOERROR
        # TCP: the RRset as the zone holds it, cut to one message
        tcp = ask(srv.port, BARE, "SRV", True, 5.0)
        assert tcp is not None, "no answer over TCP"
        srv_n = _valid_subset(tcp, dns.rdatatype.SRV, 656 * 100)
        wide = ask(srv.port, WIDE, "A", True, 5.0)
        assert wide is not None, "no answer over TCP"
        a_n = _valid_subset(wide, dns.rdatatype.A, 5000)
        assert srv.metric("mcsdns_zone_rrsets_capped_total") >= 2
        out = subprocess.run([tool("dig"), "+tcp", "+norec", "-p", str(srv.port), "@127.0.0.1", BARE, "SRV"],
                             capture_output=True, text=True, timeout=10).stdout
        assert "status: NOERROR" in out and f"ANSWER: {srv_n}," in out, out
        assert "bad packet" not in out and "Truncated" not in out, out
        # asking again is a lookup: 20 repeats of each cost far less than starting did
        c0 = cpu_seconds(srv.proc.pid)
        for _ in range(20):
            assert ask(srv.port, BARE, "SRV", False, 5.0) is not None
            assert ask(srv.port, BARE, "SRV", True, 5.0) is not None
            assert ask(srv.port, WIDE, "A", True, 5.0) is not None
        repeats_cpu = cpu_seconds(srv.proc.pid) - c0
        assert repeats_cpu < started_cpu / 4, (repeats_cpu, started_cpu)
        # a bystander keeps being answered while the big name is asked 20 times a second: its
        # queries (one at a time) answered within their 1 s, as many as its own count, not a rate
        t = threading.Thread(target=flood, args=(srv.port, BARE, 40, 0.05))
        t.start()
        by = Bystander(srv.port)
        during = by.run_for(2.0)
        t.join()
        assert 0 < during and during >= 0.9 * by.sent, (during, by.sent)
        assert "Traceback" not in srv.logs()
        print(f"SRV {srv_n}, A {a_n} records; 60 repeats {repeats_cpu:.2f} CPU-s (start {started_cpu:.2f}); "
              f"bystander {during} of {by.sent} answered")


def test_zone_transfer_carries_the_same_cut_rrsets(tmp_path: Path) -> None:
    """AXFR messages stay under 65,535 octets and carry each RRset as answers serve it."""
    d = copy_example(tmp_path / "m")
    (d / "big.yaml").write_text(big_slice(656, 3))  # 1,968 SRV at the service name: 128 kB
    with run_server(["--manifests", str(d), "--allow-transfer", "127.0.0.0/8"], tmp_path, timeout=60) as srv:
        tcp = ask(srv.port, BARE, "SRV", True, 5.0)
        assert tcp is not None
        served = {rd.to_text() for rd in tcp.answer[0]}
        xfr = dns.query.xfr("127.0.0.1", "clusterset.local", port=srv.port, timeout=20, relativize=False)
        msgs = list(xfr)
        sizes = [len(m.to_wire()) for m in msgs]
        assert max(sizes) <= 65535
        z = dns.zone.from_xfr(iter(msgs), relativize=False)
        node = z.get_rdataset(BARE + ".", "SRV")
        assert node is not None and {rd.to_text() for rd in node} == served and 0 < len(served) < 1968


def test_a_knotd_secondary_loads_the_zone_and_serves_the_same_records(tmp_path: Path) -> None:
    """knotd refuses a zone holding the 65,600-record RRset ("not enough space provided"),
    so before the limit every knotd secondary stayed without the zone."""
    if not shutil.which("knotd"):
        pytest.skip("knotd not installed (apt-get install knot)")
    d = copy_example(tmp_path / "m")
    (d / "big.yaml").write_text(big_slice(656, 100))
    port = free_port()
    with run_server(["--manifests", str(d), "--allow-transfer", "127.0.0.1", "--tsig-key", KEY,
                     "--notify", f"127.0.0.1:{port}"], tmp_path, timeout=60) as primary:
        serial = primary.query("clusterset.local", "SOA").answer[0][0].serial
        log = tmp_path / "knotd.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(knotd(tmp_path, port, primary.port), stdout=out, stderr=subprocess.STDOUT,
                                    cwd=tmp_path)
        try:
            q = dns.message.make_query("clusterset.local", "SOA")
            deadline = time.monotonic() + LIVENESS
            while True:
                try:
                    r = dns.query.tcp(q, "127.0.0.1", port=port, timeout=3)
                    if r.rcode() == dns.rcode.NOERROR and r.answer[0][0].serial == serial:
                        break
                except (OSError, dns.exception.DNSException):
                    pass
                assert time.monotonic() < deadline, f"knotd did not load the zone:\n{log.read_text()}"
                time.sleep(0.1)
            ours = ask(primary.port, BARE, "SRV", True, 5.0)
            theirs = dns.query.tcp(dns.message.make_query(BARE, "SRV"), "127.0.0.1", port=port, timeout=5)
            assert ours is not None and theirs.rcode() == dns.rcode.NOERROR
            assert {rd.to_text() for rd in theirs.answer[0]} == {rd.to_text() for rd in ours.answer[0]}
        finally:
            stop_process(proc)


def test_a_cut_rrset_keeps_the_nearest_tier_first() -> None:
    """6,000 addresses in two clusters, this one listed second: the A RRset keeps this
    cluster's 3,000, then 1,000 of the other, and the tiers' sizes follow."""
    from mcsdns.data.endpoints import Endpoint
    from mcsdns.data.objects import EndpointSlice, Port, ServiceImport
    from mcsdns.dns.limits import RECORDS_OCTETS, RR_FIXED
    from mcsdns.dns.names import encode_name
    from mcsdns.dns.types import RRType
    from mcsdns.zone.locality import Locality
    from mcsdns.zone.records import service_records
    from mcsdns.zone.rrsets import rrsets_at

    def slice_of(cluster: str, net: int) -> EndpointSlice:
        eps = tuple(Endpoint.of((bytes([10, net, i >> 8, i & 255]),), f"pod-{i}", True, True, False, "")
                    for i in range(3000))
        return EndpointSlice("ns", f"s-{cluster}", "svc", cluster, False, eps, (Port("http", "TCP", 80),))

    si = ServiceImport("ns", "svc", True, (), (Port("http", "TCP", 80),))
    names = service_records(si, [slice_of("far", 2), slice_of("near", 1)], encode_name("clusterset.local"),
                            Locality(cluster_id="near"))
    a = rrsets_at(names[encode_name("svc.ns.svc.clusterset.local")])[RRType.A]
    assert len(a.rdatas) == RECORDS_OCTETS // (RR_FIXED + 4) == 4000
    assert all(rd[1] == 1 for rd in a.rdatas[:3000]) and all(rd[1] == 2 for rd in a.rdatas[3000:])
    assert a.groups == (3000, 1000)


def test_a_service_cut_on_every_rebuild_is_counted_each_time_and_logged_rate_limited(tmp_path: Path) -> None:
    """A large service rebuilt again and again (its slice changes) cuts its RRset on every
    build: the counter counts each build, the log names it at most 5 times per namespace
    per 10 minutes (before, one line per rebuild), and another namespace is still named."""
    d = copy_example(tmp_path / "m")

    def write(name: str, endpoints: int, ns: str = "qod") -> None:
        tmp = d / f".{name}.tmp"  # renamed into place: the scan never reads half a file
        tmp.write_text(big_slice(endpoints, 10, name=name, ns=ns))  # 1,200 SRV at the name: cut
        tmp.rename(d / f"{name}.yaml")

    write("many", 120)
    rebuilds = 12
    with run_server(["--manifests", str(d)], tmp_path, timeout=60) as srv:
        capped = "mcsdns_zone_rrsets_capped_total"
        assert srv.metric(capped) == 1
        for i in range(rebuilds):
            write("many", 121 + i % 2)
            assert wait_for(lambda want=2 + i: srv.metric(capped) >= want), srv.logs()
        assert srv.metric(capped) == 1 + rebuilds
        write("other", 120, ns="elsewhere")
        assert wait_for(lambda: srv.metric(capped) == 2 + rebuilds), srv.logs()
        time.sleep(0.5)  # a build counted twice would show by now
        assert srv.metric(capped) == 2 + rebuilds
        logs = srv.logs()
    cut = [ln for ln in logs.splitlines() if "cut to the records one DNS message holds" in ln]
    assert sum("service qod/many:" in ln for ln in cut) == 5, cut
    assert sum("service elsewhere/other:" in ln for ln in cut) == 1, cut
    assert logs.count("cut RRsets: rate limit reached") == 1, logs
