"""Real secondaries (knotd, BIND named) transferring clusterset.local from mcsdns on loopback:
AXFR with TSIG, the same answers as mcsdns, and a change followed within 2 s (NOTIFY, IXFR)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.zone
import pytest
from support.helpers import EXAMPLE, REPO, Server, free_port, run_server, stop_process, wait_for
from support.knot_conf import secondary_conf

ZONE = "clusterset.local."
SECRET = base64.b64encode(b"mcsdns-secondaries-test-key-4567").decode()
KEY = f"xfr-key:hmac-sha256:{SECRET}"


def unconfined(binary: str, tmp: Path) -> str:
    """A copy of `binary` in tmp: AppArmor profiles (Debian/Ubuntu ship them for
    /usr/sbin/named and knotd) attach by path and would deny files in tmp."""
    path = shutil.which(binary)
    assert path is not None
    copy = tmp / binary
    shutil.copy2(path, copy)
    return str(copy)


def knotd(tmp: Path, port: int, primary: int) -> list[str]:
    (tmp / "knot.conf").write_text(secondary_conf(tmp, port, primary, SECRET))
    return [unconfined("knotd", tmp), "-c", str(tmp / "knot.conf")]


def named(tmp: Path, port: int, primary: int) -> list[str]:
    (tmp / "named.conf").write_text(f"""controls {{ }};
options {{
    directory "{tmp}";
    pid-file "{tmp}/named.pid";
    session-keyfile "{tmp}/session.key";
    managed-keys-directory "{tmp}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
    allow-query {{ any; }};
}};
key "xfr-key" {{ algorithm hmac-sha256; secret "{SECRET}"; }};
zone "clusterset.local" {{
    type secondary;
    primaries port {primary} {{ 127.0.0.1 key "xfr-key"; }};
    file "clusterset.local.db";
    allow-notify {{ 127.0.0.1; }};
}};
""")
    # -g: foreground, logs to stderr; runs as the invoking user (root in CI) in its own dir
    return [unconfined("named", tmp), "-g", "-n", "1", "-c", str(tmp / "named.conf")]


SECONDARIES: dict[str, Callable[[Path, int, int], list[str]]] = {"knotd": knotd, "named": named}


class Secondary:
    """A real secondary server (knotd or named) transferring the zone from mcsdns."""

    def __init__(self, name: str, port: int, log: Path, primary: Server, mdir: Path) -> None:
        self.name, self.port, self.log, self.primary, self.mdir = name, port, log, primary, mdir

    def ask(self, name: str, rdtype: str, tries: int = 3) -> dns.message.Message:
        """The secondary's answer over TCP; asked again after a 3 s timeout (named runs one
        worker, -n 1, which on a loaded machine can stay busy that long right after a transfer)."""
        query = dns.message.make_query(name, rdtype)
        for _ in range(tries - 1):
            try:
                return dns.query.tcp(query, "127.0.0.1", port=self.port, timeout=3)
            except dns.exception.Timeout:
                continue
        return dns.query.tcp(query, "127.0.0.1", port=self.port, timeout=3)

    def serial(self) -> int | None:
        try:
            r = self.ask(ZONE, "SOA")
        except (OSError, dns.exception.DNSException):
            return None
        return int(r.answer[0][0].serial) if r.answer and r.rcode() == dns.rcode.NOERROR else None


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
            deadline = time.monotonic() + 20
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


def test_secondary_follows_a_change_within_two_seconds(secondary: Secondary) -> None:
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
            assert time.monotonic() - t0 < 2.0, f"{secondary.name} did not follow within 2 s"
            time.sleep(0.02)
        latency = time.monotonic() - t0
        print(f"{secondary.name}: change {i} answered by the secondary after {latency * 1000:.0f} ms")
        after = primary.query(ZONE, "SOA").answer[0][0].serial
        assert after > before
        assert secondary.serial() == after
    # followed by IXFR (journal), not by a full transfer; each change's NOTIFY answered (the answer may
    # be counted a moment after the secondary acted on it)
    assert wait_for(lambda: primary.metric_sum("mcsdns_zone_transfers_total", 'type="IXFR"',
                                               'outcome="ixfr"') >= ixfr_before + 3, 5)
    assert wait_for(lambda: primary.metric_sum("mcsdns_notify_total", 'outcome="answered"') >= 3, 5)
