#!/usr/bin/env python3
"""Query of death: valid objects whose RRset is larger than one DNS message.

One headless service whose EndpointSlice has 656 endpoints and 100 named ports
(within the API's validation) would give 65,600 SRV records at its name. The
script serves it with the example clusterset (`python -m mcsdns serve
--manifests`), then asks for that SRV RRset QUERIES times over UDP at 2/s (and once over TCP),
and prints the server's CPU per query and whether the queries were answered;
then the same again while a bystander asks `web` A every 10 ms, and the
bystander's answers against a run of the same length without the big queries.

    python robustness/query_of_death.py [--repo CHECKOUT] [--queries 20]

`--repo` runs another checkout's server (its C extension built in place), for a
before/after figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rcode  # noqa: E402
from support import helpers  # noqa: E402

BARE = "big.qod.svc.clusterset.local"  # SRV at the service name: endpoints x ports
BYSTANDER = "web.shop.svc.clusterset.local"


def big_slice(endpoints: int = 656, ports: int = 100, name: str = "big", ns: str = "qod") -> str:
    """A headless ServiceImport and one EndpointSlice of `endpoints` ready endpoints
    (hostnames pod-0...) and `ports` named ports: endpoints x ports SRV records at
    the service name."""
    ps = ", ".join(f"{{name: p{i}, protocol: TCP, port: {1000 + i}}}" for i in range(ports))
    eps = "\n".join(f"- addresses: [\"10.{8 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}\"]\n"
                    f"  hostname: pod-{i}\n  conditions: {{ready: true}}" for i in range(endpoints))
    return f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {name}, namespace: {ns}}}
spec: {{type: Headless, ports: [{ps}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-cluster-a
  namespace: {ns}
  labels:
    multicluster.kubernetes.io/service-name: {name}
    multicluster.kubernetes.io/source-cluster: cluster-a
addressType: IPv4
ports: [{ps}]
endpoints:
{eps}
"""


def manifests(dst: Path, endpoints: int = 656, ports: int = 100) -> Path:
    """The example clusterset plus the big service, in `dst`."""
    helpers.copy_example(dst)
    (dst / "big.yaml").write_text(big_slice(endpoints, ports))
    return dst


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bystander:
    """Asks `name` A over UDP every 10 ms from a thread; counts the answers."""

    def __init__(self, port: int, name: str = BYSTANDER) -> None:
        self.port, self.answered, self.sent = port, 0, 0
        self.q = dns.message.make_query(name, "A").to_wire()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0)
            while not self._stop.is_set():
                s.sendto(self.q, ("127.0.0.1", self.port))
                self.sent += 1
                try:
                    s.recv(4096)
                    self.answered += 1
                except TimeoutError:
                    pass
                self._stop.wait(0.01)

    def run_for(self, seconds: float) -> int:
        """Answers received in `seconds`."""
        self._thread.start()
        time.sleep(seconds)
        self._stop.set()
        self._thread.join()
        return self.answered


def ask(port: int, name: str, rdtype: str, tcp: bool, timeout: float) -> dns.message.Message | None:
    """The parsed response, or None when none came within `timeout`."""
    q = dns.message.make_query(name, rdtype, use_edns=0, payload=1232)
    try:
        if tcp:
            return dns.query.tcp(q, "127.0.0.1", port=port, timeout=timeout)
        return dns.query.udp(q, "127.0.0.1", port=port, timeout=timeout)
    except (TimeoutError, dns.exception.Timeout, EOFError, ConnectionError):
        return None


def flood(port: int, name: str, n: int, interval: float) -> int:
    """Send `n` UDP queries for `name` SRV, one every `interval` s whether answered or not;
    the responses received until `interval` after the last."""
    q = dns.message.make_query(name, "SRV", use_edns=0, payload=1232).to_wire()
    got = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        nxt = time.monotonic()
        for i in range(n + 1):
            if i < n:
                s.sendto(q, ("127.0.0.1", port))
            nxt += interval
            while (left := nxt - time.monotonic()) > 0:
                s.settimeout(left)
                try:
                    s.recv(65535)
                    got += 1
                except TimeoutError:
                    break
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose server runs")
    ap.add_argument("--queries", type=int, default=20, help="big queries, at 2 per second")
    a = ap.parse_args()
    helpers.REPO = a.repo.resolve()  # run_server starts `python -m mcsdns` there
    tmp = Path(tempfile.mkdtemp(prefix="qod-"))
    try:
        with helpers.run_server(["--manifests", str(manifests(tmp / "m"))], tmp, timeout=60) as srv:
            pid = srv.proc.pid
            seconds = a.queries / 2
            c0 = cpu_seconds(pid)
            alone = flood(srv.port, BARE, a.queries, 0.5)
            cpu = cpu_seconds(pid) - c0
            base = Bystander(srv.port).run_for(seconds)
            by = Bystander(srv.port)
            t = threading.Thread(target=flood, args=(srv.port, BARE, a.queries, 0.5))
            t.start()
            during = by.run_for(seconds)
            t.join()
            tcp = ask(srv.port, BARE, "SRV", True, 5.0)
            print(f"server: {a.repo}")
            print(f"big SRV queries: {a.queries} over UDP at 2/s, {alone} answered "
                  f"({'TC' if alone else 'no answer'}); server CPU {cpu:.2f} s in all, "
                  f"{cpu / a.queries * 1000:.1f} ms per query")
            if tcp is None:
                print("over TCP: no answer")
            else:
                n = sum(len(rrs) for rrs in tcp.answer)
                print(f"over TCP: {dns.rcode.to_text(tcp.rcode())}, {n} SRV records, "
                      f"{len(tcp.to_wire())} octets, TC={'1' if tcp.flags & dns.flags.TC else '0'}")
            print(f"bystander ({BYSTANDER} A every 10 ms, {seconds:.0f} s): {during} answers "
                  f"(without the big queries: {base})")
            print(f"tracebacks logged: {srv.logs().count('Traceback')}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
