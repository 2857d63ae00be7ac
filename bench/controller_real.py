"""`mcsdns controller`'s first sync against REAL kube-apiservers (etcd + kube-apiserver each).

Brings up `--clusters` real control planes with `realk8s.sh` (path from $MCSDNS_REALK8S or
`--realk8s`; without it the bench says so and exits 0), loads N exported ClusterSetIP
services spread round-robin over them (one Service, one EndpointSlice with one ready
endpoint and one ServiceExport each, in 50 namespaces, as bench/controller_scale.py does
against the test API server), then runs `python -m mcsdns controller` (derived mode) and
measures, from controller start:

- time to /ready, and time until every member holds N ServiceImports with `ips`, N derived
  Services and N imported EndpointSlices (listed from each API server);
- CPU seconds of the controller, and of each member's kube-apiserver and etcd apart
  (/proc/PID/stat; realk8s.sh records the PIDs), over the same interval;
- the controller's writes by member, resource and verb (mcsdns_controller_writes_total) and
  the API servers' own count of writes (apiserver_request_total, non-GET verbs), per service.

The clusters are taken down (and purged) at the end unless `--keep`.

    MCSDNS_REALK8S=/path/to/realk8s.sh .venv/bin/python bench/controller_real.py -n 1000
    .venv/bin/python bench/controller_real.py -n 3000 --realk8s /path/to/realk8s.sh --repo /tmp/old
    MCSDNS_REALK8S=/path/to/realk8s.sh .venv/bin/python bench/controller_real.py -n 1000 \\
        --clusterset-cidr 10.200.0.0/16
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.helpers import stop_process  # noqa: E402
from support.ports import free_port  # noqa: E402
from support.realk8s import bench_place, run_up  # noqa: E402

from bench.controller_scale import MCS, NAMESPACES, cpu, get, rss, source_slice  # noqa: E402
from mcsdns.kube.apiclient.client import Client  # noqa: E402

Obj = dict[str, Any]
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
IDLE = 5.0  # seconds the servers' idle CPU is sampled over
OURS = ("serviceimports", "services", "endpointslices", "serviceexports")


class Cluster:
    """One realk8s control plane: its kubeconfig, client and process ids."""

    def __init__(self, realk8s: str, home: Path, name: str, crds: Path) -> None:
        self.realk8s, self.home, self.name = realk8s, home, name
        env = dict(os.environ, REALK8S_HOME=str(home), REALK8S_CRDS=str(crds))
        self.kubeconfig = str(run_up(realk8s, name, env))
        self.client = Client.load(self.kubeconfig, None, pool=64, name=name)
        self.pids = {p: int((home / name / f"{p}.pid").read_text()) for p in ("apiserver", "etcd")}

    def down(self) -> None:
        env = dict(os.environ, REALK8S_HOME=str(self.home))
        subprocess.run([self.realk8s, "down", "--purge", self.name], env=env, check=False,
                       capture_output=True)

    def cpu(self) -> dict[str, float]:
        return {p: cpu(pid) for p, pid in self.pids.items()}

    def writes(self) -> Counter[tuple[str, str, str]]:
        """apiserver_request_total of non-GET verbs, by (verb, resource, subresource)."""
        text = self.client.open("GET", "/metrics").data.decode()
        out: Counter[tuple[str, str, str]] = Counter()
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            lb = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if lb.get("verb") in WRITE_VERBS and lb.get("resource") in OURS:
                out[(lb["verb"], lb["resource"], lb.get("subresource", ""))] += int(float(line.split()[-1]))
        return out


def populate(clusters: list[Cluster], n: int, threads: int) -> None:
    """ClusterProperty, namespaces, then N services' objects, created from a thread pool."""
    def create(c: Cluster, path: str, body: Obj) -> None:
        c.client.request("POST", path, body)
    with ThreadPoolExecutor(threads) as pool:
        first = []
        for i, c in enumerate(clusters):
            first.append(pool.submit(create, c, "/apis/about.k8s.io/v1alpha1/clusterproperties", {
                "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": f"c{i}"}}))
            for j in range(NAMESPACES):
                first.append(pool.submit(create, c, "/api/v1/namespaces", {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns{j}"}}))
        for f in first:
            f.result()
        jobs = []
        for k in range(n):
            i, ns, svc = k % len(clusters), f"ns{k % NAMESPACES}", f"s{k}"
            c = clusters[i]
            jobs.append(pool.submit(create, c, f"/api/v1/namespaces/{ns}/services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": svc, "namespace": ns},
                "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}))
            jobs.append(pool.submit(create, c, f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                                    source_slice(ns, svc, f"10.{100 + i}.{k // 250 % 250}.{k % 250 + 1}")))
            jobs.append(pool.submit(create, c, f"/apis/{MCS}/namespaces/{ns}/serviceexports", {
                "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": svc, "namespace": ns}}))
        for f in jobs:
            f.result()


def member_counts(c: Cluster) -> tuple[int, int, int]:
    """(ServiceImports with ips, derived Services, imported slices) in one member."""
    sis = c.client.list(f"/apis/{MCS}/serviceimports")
    svcs = c.client.list("/api/v1/services")
    slices = c.client.list("/apis/discovery.k8s.io/v1/endpointslices",
                           "multicluster.kubernetes.io/source-cluster")
    return (sum(1 for s in sis if (s.get("spec") or {}).get("ips")),
            sum(1 for s in svcs if s["metadata"]["name"].startswith("derived-")), len(slices))


def controller_writes(metrics_port: int) -> Counter[tuple[str, str]]:
    """mcsdns_controller_writes_total over every member, by (resource, verb)."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if line.startswith("mcsdns_controller_writes_total{"):
            lb = dict(re.findall(r'(\w+)="([^"]*)"', line))
            out[(lb["resource"], lb["verb"])] += int(float(line.split()[-1]))
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=1000, help="exported services (default 1000)")
    p.add_argument("--clusters", type=int, default=3)
    p.add_argument("--workers", type=int, default=16, help="controller --workers (default 16)")
    p.add_argument("--threads", type=int, default=24, help="threads loading the objects (default 24)")
    p.add_argument("--timeout", type=float, default=900.0, help="first sync timeout (s)")
    p.add_argument("--realk8s", default=os.environ.get("MCSDNS_REALK8S"),
                   help="path of realk8s.sh (default: $MCSDNS_REALK8S)")
    p.add_argument("--prefix", default="ctlreal", help="cluster name prefix")
    p.add_argument("--keep", action="store_true", help="leave the clusters up")
    p.add_argument("--repo", type=Path, default=REPO, help="checkout whose controller runs")
    p.add_argument("--clusterset-cidr", metavar="CIDR", help="run the controller in cidr mode (no derived "
                   "Services) with this --clusterset-cidr")
    return p.parse_args()


def controller_cmd(clusters: list[Cluster], health: int, metrics: int, workers: int,
                   cidr: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "mcsdns.controller", "--health", f"127.0.0.1:{health}",
           "--metrics", f"127.0.0.1:{metrics}", "--resync", "3600", "--workers", str(workers),
           "--endpoint-ttl", "60", "--log-level", "WARNING"]
    if cidr:
        cmd += ["--clusterset-cidr", cidr]
    for i, c in enumerate(clusters):
        cmd += ["--cluster", f"c{i}={c.kubeconfig}"]
    return cmd


def cpu_line(what: str, before: list[dict[str, float]], after: list[dict[str, float]]) -> float:
    """Print each member's API server and etcd CPU seconds between two samples; their sum."""
    parts, total = [], 0.0
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        d = {p: a[p] - b[p] for p in a}
        total += sum(d.values())
        parts.append(f"c{i} apiserver {d['apiserver']:.1f} s + etcd {d['etcd']:.1f} s")
    print(f"{what}: " + "; ".join(parts) + f" (all {total:.1f} s)")
    return total


def print_writes(n: int, ctl: Counter[tuple[str, str]], srv: Counter[tuple[str, str, str]]) -> None:
    print(f"controller writes per service (mcsdns_controller_writes_total, all members): "
          f"{sum(ctl.values()) / n:.2f}")
    for (res, verb), v in sorted(ctl.items()):
        print(f"  {verb:7} {res:16} {v / n:.2f}")
    print(f"API servers' writes per service (apiserver_request_total): {sum(srv.values()) / n:.2f}")
    for (verb, res, sub), v in sorted(srv.items()):
        print(f"  {verb:7} {res + ('/' + sub if sub else ''):23} {v / n:.2f}")


def sync_once(args: argparse.Namespace, clusters: list[Cluster], tmp: Path, what: str) -> bool:
    """Start the controller, wait for /ready, print its time, CPU and every server's CPU and
    the writes it made; stop it. False when it did not get ready or the sync is incomplete."""
    srv0 = [c.writes() for c in clusters]
    cpu0 = [c.cpu() for c in clusters]
    health, metrics = free_port(), free_port()
    path = tmp / f"controller-{what.replace(' ', '-')}.log"
    log = open(path, "wb")  # noqa: SIM115
    env = dict(os.environ, PYTHONPATH=str(args.repo.resolve()))
    t0 = time.perf_counter()
    cmd = controller_cmd(clusters, health, metrics, args.workers, args.clusterset_cidr)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=args.repo, env=env)
    try:
        while get(f"http://127.0.0.1:{health}/ready") != 200:
            if proc.poll() is not None or time.perf_counter() - t0 > args.timeout:
                print("controller did not get ready; log:", path.read_text()[-3000:])
                return False
            time.sleep(0.1)
        ready = time.perf_counter() - t0
        ctl_cpu, cpu1 = cpu(proc.pid), [c.cpu() for c in clusters]
        print(f"{what}: controller start -> /ready {ready:.1f} s; controller CPU {ctl_cpu:.1f} s, "
              f"RSS {rss(proc.pid)[0]} MiB", flush=True)
        servers = cpu_line("  API servers' CPU, start -> ready", cpu0, cpu1)
        print(f"  busy: the servers {servers / ready:.2f} cores, the controller {ctl_cpu / ready:.2f} "
              f"cores (of 2); the servers' share of the CPU spent {servers / (servers + ctl_cpu):.0%}")
        for i, c in enumerate(clusters):
            got = member_counts(c)
            print(f"  c{i}: {got[0]} ServiceImports with ips, {got[1]} derived Services, "
                  f"{got[2]} imported slices")
            if got != (args.n, 0 if args.clusterset_cidr else args.n, args.n):
                print("incomplete sync")
                return False
        time.sleep(2)
        ctl = controller_writes(metrics)
        srv = sum((c.writes() - s0 for c, s0 in zip(clusters, srv0, strict=True)), Counter())
        print_writes(args.n, ctl, srv)
        return True
    finally:
        stop_process(proc)
        log.close()


def run(args: argparse.Namespace, clusters: list[Cluster], tmp: Path) -> int:
    t = time.perf_counter()
    populate(clusters, args.n, args.threads)
    print(f"loaded {args.n} exported services over {len(clusters)} real API servers in "
          f"{time.perf_counter() - t:.1f}s", flush=True)
    time.sleep(2)  # let the servers settle
    idle0 = [c.cpu() for c in clusters]
    time.sleep(IDLE)
    cpu_line(f"API servers' CPU idle, {IDLE:.0f} s", idle0, [c.cpu() for c in clusters])
    if not sync_once(args, clusters, tmp, "first sync"):
        return 1
    return 0 if sync_once(args, clusters, tmp, "restart") else 1


def main() -> int:
    args = parse_args()
    place = bench_place("controller_real", args.realk8s, "ctlreal-")
    if place is None:
        return 0
    tmp, home, crds = place
    clusters: list[Cluster] = []
    try:
        for i in range(args.clusters):
            clusters.append(Cluster(args.realk8s, home, f"{args.prefix}{i}", crds))
        print(f"{len(clusters)} real API servers up", flush=True)
        return run(args, clusters, tmp)
    finally:
        if not args.keep:
            for c in clusters:
                c.down()


if __name__ == "__main__":
    sys.exit(main())
