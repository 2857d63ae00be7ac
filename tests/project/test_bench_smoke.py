"""Benchmark smoke test: the generated clusterset loads, its zone file (`mcsdns records`, which
knotd and CoreDNS serve in bench/compare.py) is what `mcsdns serve` answers, and a short
dnsperf run against mcsdns loses nothing. Not a timed test."""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import dns.rcode
import pytest
from support.helpers import REPO, run_server

sys.path.insert(0, str(REPO))

from bench.gen_clusterset import ZONE, generate, load_zone  # noqa: E402
from bench.perf import dnsperf  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "clusterset"
    meta = generate(out, services=20, endpoints=300, clusters=2, lines=300)
    assert meta["services"] == 20 and meta["endpoints"] == 300
    return out


def test_zone_file_matches_answers(data: Path, tmp_path: Path) -> None:
    zone = load_zone(data / f"{ZONE}.zone")
    rng = random.Random(7)
    sample = [k for k in zone if k[1] != "SOA"]
    sample = rng.sample(sample, 25) + [(f"h100.bench.svc.{ZONE}.", "A"), (f"churn.bench.svc.{ZONE}.", "SRV")]
    with run_server(["--manifests", str(data / "manifests")], tmp_path) as srv:
        for name, rtype in sample:
            r = srv.query(name, rtype, tcp=True)
            got = {rd.to_text().lower() for rrset in r.answer for rd in rrset}
            assert got == zone[(name, rtype)], (name, rtype)
        assert len(zone[(f"h100.bench.svc.{ZONE}.", "A")]) == 100
        assert len(zone[(f"h10.bench.svc.{ZONE}.", "A")]) == 10
        assert srv.query(f"nx-1.ns-0.svc.{ZONE}.", "A").rcode() == dns.rcode.NXDOMAIN


@pytest.mark.skipif(not shutil.which("dnsperf"), reason="dnsperf not installed")
def test_dnsperf_smoke(data: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(data / "manifests")], tmp_path) as srv:
        mix = dnsperf(srv.port, data / "queries" / "mix.txt", 1.5, clients=2, outstanding=20, rate=2000)
        assert mix.qps > 0 and mix.completed > 0 and mix.lost == 0
        # the mix is 90% names that exist and 10% names that do not
        assert set(mix.rcodes) == {"NOERROR", "NXDOMAIN"} and mix.rcodes["NOERROR"] > mix.rcodes["NXDOMAIN"]
        big = dnsperf(srv.port, data / "queries" / "h100.txt", 1, clients=1, outstanding=10, tcp=True,
                      rate=500)
        assert big.qps > 0 and big.lost == 0 and big.rcodes == {"NOERROR": big.completed}
