"""Real resolvers (unbound, dnsmasq, knot-resolver) forwarding clusterset.local to mcsdns."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest
from support.helpers import EXAMPLE, LIVENESS, Server, headless, run_server
from support.ports import free_port

Launcher = Callable[[Path, int, int], list[str]]


def unbound(tmp: Path, port: int, upstream: int) -> list[str]:
    conf = tmp / "unbound.conf"
    conf.write_text(f"""server:
  interface: 127.0.0.1
  port: {port}
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{tmp}"
  pidfile: ""
  use-syslog: no
  logfile: ""
  do-ip6: no
  do-not-query-localhost: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  domain-insecure: "clusterset.local"
  local-zone: "clusterset.local." nodefault
forward-zone:
  name: "clusterset.local"
  forward-addr: 127.0.0.1@{upstream}
""")
    return ["unbound", "-d", "-c", str(conf)]


def dnsmasq(tmp: Path, port: int, upstream: int) -> list[str]:
    return ["dnsmasq", "--no-daemon", "--keep-in-foreground", f"--port={port}",
            "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
            "--user=root", "--pid-file", f"--server=/clusterset.local/127.0.0.1#{upstream}"]


def kresd(tmp: Path, port: int, upstream: int) -> list[str]:
    conf = tmp / "kresd.conf"
    conf.write_text(f"""net.listen('127.0.0.1', {port}, {{ kind = 'dns' }})
modules.unload('ta_update')
modules.unload('ta_signal_query')
trust_anchors.remove('.')
policy.add(policy.suffix(policy.STUB('127.0.0.1@{upstream}'), {{todname('clusterset.local.')}}))
""")
    (tmp / "kres-cache").mkdir(exist_ok=True)
    return ["kresd", "-n", "-q", "-c", str(conf), str(tmp / "kres-cache")]


RESOLVERS: dict[str, Launcher] = {"unbound": unbound, "dnsmasq": dnsmasq, "kresd": kresd}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("fwd")
    mdir = Path(shutil.copytree(EXAMPLE, tmp / "m"))
    (mdir / "big.yaml").write_text(headless("h60", 60))
    with run_server(["--manifests", str(mdir)], tmp) as srv:
        yield srv


@pytest.fixture(params=sorted(RESOLVERS), scope="module")
def resolver(request: pytest.FixtureRequest, upstream: Server,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    name = request.param
    binary = {"kresd": "kresd"}.get(name, name)
    if not shutil.which(binary):
        pytest.skip(f"{binary} not installed (apt-get install unbound dnsmasq-base knot-resolver)")
    tmp = tmp_path_factory.mktemp(name)
    port = free_port()
    cmd = RESOLVERS[name](tmp, port, upstream.port)
    log = open(tmp / "log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + LIVENESS
        while True:
            try:
                q = dns.message.make_query("dns-version.clusterset.local.", "TXT")
                if dns.query.udp(q, "127.0.0.1", port=port, timeout=0.5).answer:
                    break
            except Exception:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come up: {(tmp / 'log').read_text()}")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(5)
        log.close()


def ask(port: int, name: str, rdtype: str) -> dns.message.Message:
    q = dns.message.make_query(name, rdtype)  # RD=1, as a stub resolver sends
    r = dns.query.udp(q, "127.0.0.1", port=port, timeout=3)
    if r.flags & dns.flags.TC:
        r = dns.query.tcp(q, "127.0.0.1", port=port, timeout=3)
    return r


def rdatas(r: dns.message.Message, rdtype: str) -> set[str]:
    return {rd.to_text() for rr in r.answer if dns.rdatatype.to_text(rr.rdtype) == rdtype for rd in rr}


def test_answers_through_the_resolver_match_mcsdns(resolver: int, upstream: Server) -> None:
    for name, rdtype in [("web.shop.svc.clusterset.local.", "A"),
                         ("db.shop.svc.clusterset.local.", "A"),
                         ("_postgres._tcp.db.shop.svc.clusterset.local.", "SRV"),
                         ("db-0.cluster-a.db.shop.svc.clusterset.local.", "A")]:
        direct = upstream.query(name, rdtype, tcp=True)
        assert direct.answer, name
        assert rdatas(ask(resolver, name, rdtype), rdtype) == rdatas(direct, rdtype), name


def test_aaaa_nodata_and_nxdomain_through_the_resolver(resolver: int, upstream: Server) -> None:
    r = ask(resolver, "web.shop.svc.clusterset.local.", "AAAA")
    direct = upstream.query("web.shop.svc.clusterset.local.", "AAAA")
    assert r.rcode() == direct.rcode() == dns.rcode.NOERROR
    assert rdatas(r, "AAAA") == rdatas(direct, "AAAA")
    r = ask(resolver, "nope.shop.svc.clusterset.local.", "A")
    assert r.rcode() == dns.rcode.NXDOMAIN


def test_truncated_headless_answer_resolves_in_full(resolver: int) -> None:
    r = ask(resolver, "h60.big.svc.clusterset.local.", "A")
    assert len(rdatas(r, "A")) == 60


def test_forward_health_check_query_gets_an_answer(upstream: Server) -> None:
    # CoreDNS's forward plugin probes upstreams with ". IN NS" and only needs a reply.
    r = upstream.query(".", "NS")
    assert r.rcode() == dns.rcode.REFUSED and r.flags & dns.flags.QR
