"""Watch-event-to-DNS-answer latency of `mcsdns serve --kubeconfig`.

Starts the test API server (tests/fakeapi/) in this process with
`--services` ServiceImports (plus a headless service with EndpointSlices),
starts `python -m mcsdns serve --kubeconfig` against it, then makes `-n`
changes one at a time: a ClusterSetIP address change, a new service, a
deleted service, a headless service's endpoint replaced. For each change it
takes the time the API server wrote the watch event to the stream
(`KubeAPI.emitted`) and polls the DNS server over UDP every `--poll` seconds
until the answer shows the change; it prints p50/p99/max and fails (exit 1)
when p99 is over `--target-ms` (100 ms by default).

    .venv/bin/python bench/kube_convergence.py -n 200
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeapi import KubeAPI  # noqa: E402
from support.ports import free_port  # noqa: E402

Z = "clusterset.local"
MCS = "multicluster.x-k8s.io/v1beta1"


def service_import(name: str, ips: list[str], typ: str = "ClusterSetIP") -> dict[str, Any]:
    return {"apiVersion": MCS, "kind": "ServiceImport", "metadata": {"name": name, "namespace": "bench"},
            "spec": {"type": typ, "ips": ips, "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}


def endpoint_slice(name: str, svc: str, ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "bench", "labels": {
                "multicluster.kubernetes.io/service-name": svc,
                "multicluster.kubernetes.io/source-cluster": "cluster-a"}},
            "addressType": "IPv4", "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


def ip(i: int) -> str:
    return f"10.{100 + i // 65536 % 100}.{i // 256 % 256}.{i % 256}"


class Prober:
    """Ask one name over UDP until a predicate on (rcode, addresses) holds."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(0.5)

    def ask(self, name: str) -> tuple[str, set[str]]:
        q = dns.message.make_query(name, "A")
        self.sock.send(q.to_wire())
        while True:
            r = dns.message.from_wire(self.sock.recv(4096))
            if r.id == q.id:
                return dns.rcode.to_text(r.rcode()), {str(rd) for rr in r.answer for rd in rr}

    def until(self, name: str, ok: Callable[[str, set[str]], bool], poll: float,
              timeout: float = 10.0) -> float:
        deadline = time.perf_counter() + timeout
        while True:
            got = self.ask(name)
            if ok(*got):
                return time.perf_counter()
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{name} did not converge in {timeout}s; last answer {got}")
            time.sleep(poll)


def answers(want: set[str]) -> Callable[[str, set[str]], bool]:
    """Prober.until's test: the answer holds exactly `want`."""
    return lambda rcode, addrs: addrs == want


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=200, help="changes to measure (default 200)")
    p.add_argument("--services", type=int, default=1000, help="ServiceImports present (default 1000)")
    p.add_argument("--poll", type=float, default=0.001, help="DNS poll interval, seconds (default 0.001)")
    p.add_argument("--target-ms", type=float, default=100.0, help="p99 goal (default 100)")
    p.add_argument("--load-qps", type=int, default=0,
                   help="also run dnsperf at this many queries per second during the changes")
    return p.parse_args()


def start_api(services: int) -> KubeAPI:
    """The test API server holding `services` ServiceImports and a headless service."""
    api = KubeAPI(bookmark_interval=60.0)
    for i in range(services):
        api.put(service_import(f"s{i}", [ip(i)]))
    api.put(service_import("hl", [], typ="Headless"))
    api.put(endpoint_slice("hl-0", "hl", [ip(0)]))
    api.start()
    return api


def ready_after(proc: subprocess.Popen[bytes], health: int, log: Path) -> float | None:
    """Seconds until mcsdns is ready; None (its log printed) if it exits or takes over 60 s."""
    t0 = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/ready", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t0 > 60:
            print(log.read_text(), file=sys.stderr)
            return None
        time.sleep(0.05)


def start_load(tmp: Path, port: int, services: int, qps: int) -> subprocess.Popen[bytes]:
    """dnsperf asking for the services at `qps` queries per second."""
    qfile = tmp / "queries.txt"
    qfile.write_text("".join(f"s{i}.bench.svc.{Z} A\n" for i in range(services)))
    load = subprocess.Popen(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(qfile),
                             "-l", "3600", "-Q", str(qps)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    print(f"with dnsperf load of {qps} queries/s")
    return load


def change(api: KubeAPI, prober: Prober, k: int, args: argparse.Namespace) -> tuple[str, float]:
    """The k-th change (in turn: address changed twice, service added, deleted, endpoint replaced)
    and ms from its watch event to the DNS answer showing it."""
    what = ("change", "change", "add", "delete", "endpoint")[k % 5]
    if what == "change":
        i = k % args.services
        new = ip(50_000 + k)
        rv = api.put(service_import(f"s{i}", [new]))["metadata"]["resourceVersion"]
        done = prober.until(f"s{i}.bench.svc.{Z}", answers({new}), args.poll)
    elif what == "add":
        new = ip(60_000 + k)
        rv = api.put(service_import(f"new{k}", [new]))["metadata"]["resourceVersion"]
        done = prober.until(f"new{k}.bench.svc.{Z}", answers({new}), args.poll)
    elif what == "delete":
        api.delete("ServiceImport", "bench", f"new{k - 1}")
        rv = str(api.rv)
        done = prober.until(f"new{k - 1}.bench.svc.{Z}", lambda rc, a: rc == "NXDOMAIN", args.poll)
    else:
        hl_ips = [ip(0), ip(70_000 + k)]  # a new endpoint each time; few enough for UDP
        rv = api.put(endpoint_slice("hl-0", "hl", hl_ips))["metadata"]["resourceVersion"]
        done = prober.until(f"hl.bench.svc.{Z}", answers(set(hl_ips)), args.poll)
    return what, (done - api.emitted[int(rv)]) * 1000


def report(lat: dict[str, list[float]], args: argparse.Namespace) -> int:
    """Print the percentiles; 0 if p99 is within the target, else 1."""
    every = sorted(x for v in lat.values() for x in v)

    def pct(q: float) -> float:
        return every[min(len(every) - 1, int(round(q * (len(every) - 1))))]

    print(f"{len(every)} changes, watch event written -> DNS answer changed (poll every "
          f"{args.poll * 1000:g} ms):")
    print(f"  p50 {pct(0.5):.2f} ms   p90 {pct(0.9):.2f} ms   p99 {pct(0.99):.2f} ms   "
          f"max {every[-1]:.2f} ms   mean {statistics.fmean(every):.2f} ms")
    for what, v in lat.items():
        if v:
            print(f"  {what:9s} n={len(v):4d}  median {statistics.median(v):.2f} ms  max {max(v):.2f} ms")
    ok = pct(0.99) <= args.target_ms
    print(f"p99 {'within' if ok else 'OVER'} the {args.target_ms:g} ms target")
    return 0 if ok else 1


def main() -> int:
    args = parse_args()
    api = start_api(args.services)
    tmp = Path(tempfile.mkdtemp(prefix="kube-convergence-"))
    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    port, health = free_port(), free_port()
    log = open(tmp / "mcsdns.log", "wb")
    load: subprocess.Popen[bytes] | None = None
    proc = subprocess.Popen([sys.executable, "-m", "mcsdns", "serve", "--kubeconfig", str(kubeconfig),
                             "--listen", f"127.0.0.1:{port}", "--health", f"127.0.0.1:{health}"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        took = ready_after(proc, health, tmp / "mcsdns.log")
        if took is None:
            return 2
        print(f"initial sync of {args.services + 1} ServiceImports: {took:.2f}s")
        if args.load_qps:
            load = start_load(tmp, port, args.services, args.load_qps)
        prober = Prober(port)
        lat: dict[str, list[float]] = {"change": [], "add": [], "delete": [], "endpoint": []}
        for k in range(args.n):
            what, ms = change(api, prober, k, args)
            lat[what].append(ms)
        return report(lat, args)
    finally:
        if load is not None:
            load.terminate()
            load.wait(10)
        proc.terminate()
        proc.wait(10)
        api.stop()


if __name__ == "__main__":
    sys.exit(main())
