"""Valid objects whose DNS names cannot be sent: a 63-octet namespace, service and hostname
under a 41-octet cluster ID make a 256-octet name; a 63-octet port name makes a 64-octet
`_port` label. Each is valid alone. Such names (and the records they own or target) are left
out, with one log line per object, a metric and a diagnose finding; the rest of the service
and of the zone is served, and real secondaries keep loading the zone (one such name once
made every AXFR malformed: knotd "refresh failed (malformed data)", stuck on its old serial)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsigkeyring
import dns.zone
import pytest
from support.controller_env import Cluster
from support.diagnose_env import clusterset, diagnose, fails, sync
from support.helpers import (
    EXAMPLE,
    LIVENESS,
    REPO,
    Server,
    run_server,
    stop_process,
    tool,
    wait_for,
)
from support.ports import free_port
from support.secondaries import KEY, SECONDARIES, SECRET, ZONE, Secondary

from mcsdns.kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL

NS, SVC = "n" * 63, "s" * 63  # the longest namespace and service names
LONG_CLUSTER, HOST = "c" * 41, "h" * 63  # h{63}.c{41}.s{63}.n{63}.svc.clusterset.local: 256 octets
LONG_PORT = "p" * 63  # a valid port name; "_" + it is a 64-octet label
SVC_NAME = f"{SVC}.{NS}.svc.{ZONE}"


def _slice(name: str, cluster: str, endpoints: list[tuple[str, str]]) -> str:
    eps = "\n".join(f'- {{addresses: ["{ip}"], hostname: {host}, conditions: {{ready: true}}}}'
                    for host, ip in endpoints)
    return f"""---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: {NS}
  labels: {{{SERVICE_NAME_LABEL}: {SVC}, {SOURCE_CLUSTER_LABEL}: {cluster}}}
addressType: IPv4
ports:
- {{name: http, protocol: TCP, port: 80}}
- {{name: {LONG_PORT}, protocol: TCP, port: 81}}
endpoints:
{eps}
"""


LONG_OBJECTS = f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {SVC}, namespace: {NS}}}
spec: {{type: Headless}}
{_slice("long-cluster", LONG_CLUSTER, [(HOST, "10.9.0.1"), (HOST, "10.9.0.2"), ("short", "10.9.0.3")])}
{_slice("east", "east", [(HOST, "10.9.1.1")])}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: api, namespace: long-ports}}
spec:
  type: ClusterSetIP
  ips: ["10.9.2.1"]
  ports: [{{name: http, protocol: TCP, port: 80}}, {{name: {LONG_PORT}, protocol: TCP, port: 81}}]
"""
# Left out: h.c{41}... (two endpoints of slice long-cluster) and _p{63}._tcp under both services
# (port p{63} of each slice and of api). Served: short.c{41}..., h.east..., the service's A (all
# four addresses), SRV _http._tcp to the served names, and api.long-ports with _http._tcp.
LEFT_OUT = {f"EndpointSlice {NS}/long-cluster": "2 endpoints and 1 port",
            f"EndpointSlice {NS}/east": "1 port", "ServiceImport long-ports/api": "1 port"}
SERVED_HOSTS = {f"short.{LONG_CLUSTER}.{SVC_NAME}", f"{HOST}.east.{SVC_NAME}"}


def dig(srv: Server, name: str, rdtype: str) -> str:
    out = subprocess.run([tool("dig"), "@127.0.0.1", "-p", str(srv.port), "+tcp", "+norec", name, rdtype],
                         capture_output=True, text=True, timeout=10)
    return out.stdout + out.stderr


def check_answers(srv: Server) -> None:
    """dig and dnspython parse every answer; the served part of each service is there."""
    for name, rdtype in [(SVC_NAME, "SRV"), (SVC_NAME, "A"), (f"_http._tcp.{SVC_NAME}", "SRV"),
                         (f"api.long-ports.svc.{ZONE}", "SRV"), (f"api.long-ports.svc.{ZONE}", "A")]:
        text = dig(srv, name, rdtype)
        assert "status: NOERROR" in text and "bad packet" not in text, text
    srv_targets = {rd.target.to_text() for rr in srv.query(SVC_NAME, "SRV", tcp=True).answer for rd in rr}
    assert srv_targets == SERVED_HOSTS
    addrs = {rd.address for rr in srv.query(SVC_NAME, "A", tcp=True).answer for rd in rr}
    assert addrs == {"10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.1.1"}  # every ready endpoint's
    for host in SERVED_HOSTS:
        assert srv.query(host, "A").answer
    api = srv.query(f"api.long-ports.svc.{ZONE}", "SRV", tcp=True)
    assert [rd.port for rr in api.answer for rd in rr] == [80]
    assert srv.query(f"_http._tcp.api.long-ports.svc.{ZONE}", "SRV").answer


def axfr(srv: Server) -> dns.zone.Zone:
    """The whole zone over AXFR with TSIG, parsed by dnspython."""
    keyring = dns.tsigkeyring.from_text({"xfr-key": ("hmac-sha256", SECRET)})
    z = dns.zone.Zone(ZONE, relativize=False)
    dns.query.inbound_xfr("127.0.0.1", z, port=srv.port, timeout=10,
                          query=_xfr_query(keyring))
    return z


def _xfr_query(keyring: dict[dns.name.Name, dns.tsig.Key]) -> dns.message.QueryMessage:
    q = dns.message.make_query(ZONE, "AXFR")
    q.use_tsig(keyring, keyname="xfr-key")
    return q


@pytest.fixture(params=sorted(SECONDARIES))
def setup(request: pytest.FixtureRequest,
          tmp_path: Path) -> Iterator[tuple[Server, Secondary, subprocess.Popen[bytes]]]:
    name = request.param
    if not shutil.which(name):
        pytest.skip(f"{name} not installed (apt-get install knot bind9)")
    mdir = Path(shutil.copytree(EXAMPLE, tmp_path / "manifests"))
    port = free_port()
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1", "--tsig-key", KEY,
                     "--notify", f"127.0.0.1:{port}"], tmp_path) as primary:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(SECONDARIES[name](tmp_path, port, primary.port), stdout=out,
                                    stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            yield primary, Secondary(name, port, log, primary, mdir), proc
        finally:
            stop_process(proc)


def wait_serial(sec: Secondary, proc: subprocess.Popen[bytes], want: int) -> float:
    """Seconds until the secondary serves serial `want`; fails with its log after LIVENESS."""
    t0 = time.monotonic()
    while sec.serial() != want:
        assert proc.poll() is None, sec.log.read_text()
        assert time.monotonic() - t0 < LIVENESS, (
            f"{sec.name} still serves {sec.serial()}, not {want}:\n{sec.log.read_text()[-3000:]}")
        time.sleep(0.05)
    return time.monotonic() - t0


def test_long_names_are_left_out_and_secondaries_load_the_rest(
        setup: tuple[Server, Secondary, subprocess.Popen[bytes]]) -> None:
    primary, sec, proc = setup
    before = int(primary.query(ZONE, "SOA").answer[0][0].serial)
    wait_serial(sec, proc, before)
    (sec.mdir / "long.yaml").write_text(LONG_OBJECTS)
    assert wait_for(lambda: primary.query(f"api.long-ports.svc.{ZONE}", "A").answer)
    after = int(primary.query(ZONE, "SOA").answer[0][0].serial)
    assert after != before
    took = wait_serial(sec, proc, after)  # the secondary loaded the new version (NOTIFY, IXFR/AXFR)
    print(f"{sec.name}: serial {before} -> {after} loaded {took * 1000:.0f} ms after the primary served it")
    # the secondary serves the rest of the service, as the primary does
    for host in SERVED_HOSTS:
        assert {rd.address for rr in sec.ask(host, "A").answer for rd in rr}
    targets = {rd.target.to_text() for rr in sec.ask(SVC_NAME, "SRV").answer for rd in rr}
    assert targets == SERVED_HOSTS
    check_answers(primary)
    z = axfr(primary)  # a fresh AXFR parses, and holds no name that cannot be sent
    assert all(len(n.to_wire() or b"") <= 255 for n in z.nodes)
    assert dns.name.from_text(f"short.{LONG_CLUSTER}.{SVC_NAME}") in z.nodes
    # one log line per object, a metric
    logs = primary.logs()
    lines = [ln for ln in logs.splitlines() if "left out of the zone" in ln]
    assert len(lines) == len(LEFT_OUT), lines
    for obj, what in LEFT_OUT.items():
        assert len([ln for ln in lines if f"{obj}: {what} left out" in ln]) == 1, (obj, lines)
    assert primary.metric("mcsdns_zone_names_left_out ") == 2 + 1 + 1 + 1
    # another slice of the service rebuilds it: what is left out did not change, no new line
    (sec.mdir / "more.yaml").write_text(_slice("more", "west", [("more", "10.9.3.1")]))
    assert wait_for(lambda: primary.query(f"more.west.{SVC_NAME}", "A").answer)
    lines = [ln for ln in primary.logs().splitlines() if "left out of the zone" in ln]
    assert len(lines) == len(LEFT_OUT) + 1, lines  # + the new slice's own port p{63}
    assert f"EndpointSlice {NS}/more: 1 port left out" in lines[-1]
    assert primary.metric_sum("mcsdns_skipped_objects_total") >= len(LEFT_OUT)


def test_diagnose_reports_the_names_left_out(tmp_path: Path) -> None:
    """A exports (through the real controller) a headless service whose endpoint names under
    its 41-octet cluster ID are 256 octets: diagnose names it in every member that imports it."""
    a, b = Cluster("a", LONG_CLUSTER, tmp_path), Cluster("b", "west", tmp_path)
    try:
        for cl in (a, b):
            cl.kube.namespace(NS)
        a.kube.service(NS, SVC, headless=True, ports=(("http", 80, "TCP"),))
        a.kube.endpoints(NS, SVC, "eps", [("10.9.0.1", HOST), ("10.9.0.2", "short")], port=("http", 80))
        a.kube.export(NS, SVC)
        sync(a, b)
        with run_server(["--kubeconfig", str(b.kubeconfig)], tmp_path) as sb:  # asks b's served names
            rc, report = diagnose(*clusterset(a, b), "--dns", f"b=127.0.0.1:{sb.port}")
        # the controller ran once (`sync`) and is gone: diagnose says so too
        assert rc == 1 and fails(report) == {("names", "a", f"{NS}/{SVC}"), ("names", "b", f"{NS}/{SVC}"),
                                             ("controller", "", "")}
        assert {r["subject"] for r in report["results"] if r["check"] == "dns"} == {
            SVC_NAME, f"short.{LONG_CLUSTER}.{SVC_NAME}"}  # all OK; the name left out is not asked
        msgs = [r["message"] for r in report["results"] if r["check"] == "names"]
        assert all("1 endpoint left out of the zone" in m and "(first: 256 octets" in m for m in msgs), msgs
        # the budget follows --zone: under a zone 3 octets shorter the same names fit
        rc, report = diagnose(*clusterset(a, b), "--zone", "short.example")
        assert "names" not in {r["check"] for r in report["results"]}
    finally:
        a.close()
        b.close()


def test_the_budget_follows_the_zone(tmp_path: Path) -> None:
    """Under a 240-octet --zone the example's longer names no longer fit: they are left out and
    the rest is printed as a zone file dnspython loads; a zone with no room is a flag error."""
    zone = ".".join(["z" * 63] * 3) + "." + "b" * 46  # 240 octets in wire form
    out = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--manifests", str(EXAMPLE),
                          "--zone", zone], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    z = dns.zone.from_text(out.stdout, origin=zone + ".", relativize=False, check_origin=False)
    names = {n.to_text() for n in z.nodes}
    assert f"web.shop.svc.{zone}." in names and f"db.shop.svc.{zone}." in names
    assert not any(n.startswith("db-0.") for n in names)  # db-0.cluster-a.db.shop...: 267 octets
    assert "ServiceImport shop/legacy: 1 service left out" in out.stderr  # legacy.shop.svc.<zone>: 256
    out = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--zone", zone + "bbbbbbbbbb"],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 2 and "too long for the names under it" in out.stderr, out.stderr
