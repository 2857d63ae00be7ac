"""Real secondaries (knotd, BIND named) transferring clusterset.local from mcsdns on loopback:
AXFR with TSIG, the same answers as mcsdns, and each change followed on NOTIFY, by IXFR."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.zone
import pytest
from support.helpers import EXAMPLE, LIVENESS, REPO, run_server, stop_process, wait_for
from support.ports import free_port
from support.secondaries import KEY, SECONDARIES, ZONE, Secondary


@pytest.fixture(params=sorted(SECONDARIES), scope="module")
def secondary(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secondary]:
    name = request.param
    if not shutil.which(name):
        pytest.skip(f"{name} not installed (apt-get install knot bind9)")
    tmp = tmp_path_factory.mktemp(name)
    mdir = Path(shutil.copytree(EXAMPLE, tmp / "manifests"))
    port = free_port()
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1", "--tsig-key", KEY,
                     "--notify", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{free_port()}"],
                    tmp) as primary:
        log = tmp / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(SECONDARIES[name](tmp, port, primary.port), stdout=out,
                                    stderr=subprocess.STDOUT, cwd=tmp)
        sec = Secondary(name, port, log, primary, mdir)
        try:
            deadline = time.monotonic() + LIVENESS
            while sec.serial() != int(primary.query(ZONE, "SOA").answer[0][0].serial):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not transfer the zone:\n{log.read_text()}\n"
                                       f"{primary.logs()}")
                time.sleep(0.05)
            yield sec
        finally:
            stop_process(proc)


def zone_records(mdir: Path) -> dict[tuple[str, str], set[str]]:
    out = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--manifests",
                          str(mdir)], capture_output=True, text=True, check=True, cwd=REPO).stdout
    z = dns.zone.from_text(out, origin=ZONE, relativize=False, check_origin=False)
    res: dict[tuple[str, str], set[str]] = {}
    for n, rds in z.iterate_rdatasets():
        res[(n.to_text(), dns.rdatatype.to_text(rds.rdtype))] = {rd.to_text() for rd in rds}
    return res


def rdatas(r: dns.message.Message, rdtype: str) -> set[str]:
    return {rd.to_text() for rr in r.answer if dns.rdatatype.to_text(rr.rdtype) == rdtype for rd in rr}


def test_secondary_answers_like_mcsdns(secondary: Secondary) -> None:
    expected = zone_records(secondary.mdir)
    asked = 0
    for (name, rdtype), want in expected.items():
        if rdtype not in ("A", "AAAA", "SRV", "TXT"):
            continue
        direct = secondary.primary.query(name, rdtype, tcp=True)
        assert rdatas(direct, rdtype) == want, (name, rdtype)
        assert rdatas(secondary.ask(name, rdtype), rdtype) == want, (secondary.name, name, rdtype)
        asked += 1
    assert asked >= 20
    for name, rdtype in [("nope.shop.svc.clusterset.local.", "A"), ("web.shop.svc.clusterset.local.", "TXT")]:
        assert secondary.ask(name, rdtype).rcode() == secondary.primary.query(name, rdtype).rcode()


def test_secondary_follows_each_change_on_notify(secondary: Secondary) -> None:
    primary = secondary.primary
    ixfr_before = primary.metric_sum("mcsdns_zone_transfers_total", 'type="IXFR"', 'outcome="ixfr"')
    name = "api.follow.svc.clusterset.local."
    for i in range(1, 4):
        before = primary.query(ZONE, "SOA").answer[0][0].serial
        (secondary.mdir / "follow.yaml").write_text(f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: api, namespace: follow}}
spec: {{type: ClusterSetIP, ips: ["10.78.0.{i}"], ports: [{{name: http, protocol: TCP, port: 80}}]}}
""")
        t0 = time.monotonic()
        while rdatas(secondary.ask(name, "A"), "A") != {f"10.78.0.{i}"}:
            # long before the SOA refresh (7200 s) would have made it ask: the NOTIFY did
            assert time.monotonic() - t0 < LIVENESS, f"{secondary.name} did not follow the NOTIFY"
            time.sleep(0.02)
        latency = time.monotonic() - t0
        print(f"{secondary.name}: change {i} answered by the secondary after {latency * 1000:.0f} ms")
        after = primary.query(ZONE, "SOA").answer[0][0].serial
        assert after > before
        assert secondary.serial() == after
    # followed by IXFR (journal), not by a full transfer; each change's NOTIFY answered (the answer may
    # be counted a moment after the secondary acted on it)
    assert wait_for(lambda: primary.metric_sum("mcsdns_zone_transfers_total", 'type="IXFR"',
                                               'outcome="ixfr"') >= ixfr_before + 3)
    assert wait_for(lambda: primary.metric_sum("mcsdns_notify_total", 'outcome="answered"') >= 3)
