"""`mcsdns controller` at scale: N exported services across member clusters on loopback.

Starts `--clusters` test API servers (tests/fakeapi/, in this process) with N
exported ClusterSetIP services spread round-robin over them (one Service, one
EndpointSlice with one ready endpoint and one ServiceExport each, in 50
namespaces), then `python -m mcsdns controller` (derived mode) against all of
them, and measures:

- first full sync: controller start -> /ready, then checks that every member
  has N ServiceImports with `ips`, N derived Services and N imported slices;
- one endpoint change -> visible in every other member's imported
  EndpointSlice, over `--changes` changes one at a time (p50/p99/max; the
  change is written straight into the source server's store, and each member's
  store is polled every 1 ms);
- API requests per change, over all members: LISTs of services/endpointslices
  (goal 0) and writes by verb (Lease renewals and long-lived watches apart);
- the controller's RSS (VmRSS, VmHWM) and CPU seconds after the first sync and after
  the changes.

`--write-latency MS` makes every write wait that long in the API servers before it is
made, as an etcd commit does on a real one (the in-process servers answer in well under
a millisecond), so that the controller's number of writes in flight shows. `--repo PATH`
runs the controller of another checkout (a worktree of an older commit).

    .venv/bin/python bench/controller_scale.py -n 10000
    .venv/bin/python bench/controller_scale.py -n 3000 --write-latency 10 --changes 20
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeapi import KubeAPI  # noqa: E402
from support.helpers import stop_process  # noqa: E402
from support.ports import free_port  # noqa: E402

MCS = "multicluster.x-k8s.io/v1beta1"
SVC_LABEL = "kubernetes.io/service-name"
MCS_LABEL = "multicluster.kubernetes.io/service-name"
SRC_LABEL = "multicluster.kubernetes.io/source-cluster"
NAMESPACES = 50


def source_slice(ns: str, svc: str, ip: str) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{svc}-src", "namespace": ns,
                         "labels": {SVC_LABEL: svc, "endpointslice.kubernetes.io/managed-by":
                                    "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]}


def populate(apis: list[KubeAPI], n: int) -> list[tuple[int, str, str]]:
    """(source cluster index, namespace, service) of every exported service."""
    out = []
    for i, api in enumerate(apis):
        api.put({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                 "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": f"c{i}"}})
        for j in range(NAMESPACES):
            api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns{j}"}})
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    for k in range(n):
        c, ns, svc = k % len(apis), f"ns{k % NAMESPACES}", f"s{k}"
        api = apis[c]
        api.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": svc, "namespace": ns},
                 "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
        api.put(source_slice(ns, svc, f"10.{100 + c}.{k // 250 % 250}.{k % 250 + 1}"))
        api.put({"apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": svc, "namespace": ns}})
        out.append((c, ns, svc))
    return out


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


def cpu(pid: int) -> float:
    """User + system CPU seconds of a process."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in MiB."""
    vals = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            vals[k] = int(v.split()[0]) // 1024
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def imported(api: KubeAPI) -> dict[tuple[str, str, str], str]:
    """(namespace, service, source cluster) -> our imported slice's name."""
    out = {}
    for s in api.objects("EndpointSlice"):
        lb = s["metadata"].get("labels") or {}
        if MCS_LABEL in lb:
            out[(s["metadata"]["namespace"], lb[MCS_LABEL], lb[SRC_LABEL])] = s["metadata"]["name"]
    return out


def addresses(api: KubeAPI, ns: str, name: str) -> set[str]:
    s = api.get("EndpointSlice", ns, name)
    return {a for e in (s or {}).get("endpoints") or [] for a in e["addresses"]}


def count(apis: list[KubeAPI], marks: list[int]) -> Counter[str]:
    c: Counter[str] = Counter()
    for api, mark in zip(apis, marks, strict=True):
        for method, path in list(api.requests)[mark:]:
            if "/leases" in path:
                continue
            if method == "GET":
                if "watch=" in path:
                    c["watch"] += 1
                elif path.split("?")[0].endswith(("/services", "/endpointslices")):
                    c["list services/endpointslices"] += 1
                else:
                    c["other GET"] += 1
            else:
                c[f"{method} {path.split('?')[0].split('/')[-2] if method != 'POST' else 'create'}"] += 1
    return c


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=10000, help="exported services (default 10000)")
    p.add_argument("--clusters", type=int, default=3)
    p.add_argument("--changes", type=int, default=100)
    p.add_argument("--workers", type=int, default=16, help="controller --workers (default 16)")
    p.add_argument("--timeout", type=float, default=1800.0, help="first sync timeout (s)")
    p.add_argument("--write-latency", type=float, default=0.0, metavar="MS",
                   help="each write waits MS in the API server before it is made (default 0)")
    p.add_argument("--repo", type=Path, default=REPO, help="checkout whose controller runs")
    return p.parse_args()


def controller_cmd(apis: list[KubeAPI], tmp: Path, health: int, workers: int) -> list[str]:
    """The controller's command line, one --cluster per API server."""
    cmd = [sys.executable, "-m", "mcsdns.controller", "--health", f"127.0.0.1:{health}",
           "--resync", "3600", "--workers", str(workers), "--endpoint-ttl", "60",
           "--log-level", "WARNING"]
    for i, api in enumerate(apis):
        cmd += ["--cluster", f"c{i}={api.write_kubeconfig(tmp / f'c{i}.kubeconfig', f'c{i}')}"]
    return cmd


def synced(apis: list[KubeAPI], n: int) -> list[dict[tuple[str, str, str], str]] | None:
    """Every member's imported slices (see `imported`), once each holds all `n` services' imports,
    derived Services and slices; None (printed) if one does not."""
    names = [imported(api) for api in apis]
    for i, api in enumerate(apis):
        sis = [s for s in api.objects("ServiceImport") if s["spec"].get("ips")]
        derived = [s for s in api.objects("Service") if s["metadata"]["name"].startswith("derived-")]
        print(f"  c{i}: {len(sis)} ServiceImports with ips, {len(derived)} derived Services, "
              f"{len(names[i])} imported slices")
        if len(sis) != n or len(derived) != n or len(names[i]) != n:
            print("incomplete sync")
            return None
    return names


def change(apis: list[KubeAPI], names: list[dict[tuple[str, str, str], str]], service: tuple[int, str, str],
           j: int) -> float | None:
    """Change one exported service's endpoint: ms until every other member's imported slice
    has it (None, printed, after 30 s); returns once the exporter's own import has it too."""
    c, ns, svc = service
    ip = f"10.200.{j // 250}.{j % 250 + 1}"
    others = [(api, names[i][(ns, svc, f"c{c}")]) for i, api in enumerate(apis) if i != c]
    t1 = time.perf_counter()
    apis[c].put(source_slice(ns, svc, ip))
    pending = list(others)
    while pending:
        pending = [(a, nm) for a, nm in pending if ip not in addresses(a, ns, nm)]
        if pending:
            if time.perf_counter() - t1 > 30:
                print(f"change {j} not visible after 30 s")
                return None
            time.sleep(0.001)
    ms = (time.perf_counter() - t1) * 1000
    own = names[c][(ns, svc, f"c{c}")]
    while ip not in addresses(apis[c], ns, own):  # the exporter's own import too
        time.sleep(0.001)
    return ms


def changes(apis: list[KubeAPI], names: list[dict[tuple[str, str, str], str]],
            services: list[tuple[int, str, str]], n: int) -> tuple[list[float], Counter[str]] | None:
    """`n` endpoint changes of random services: their latencies (ms) and the API requests they
    caused, by kind; None if one was not followed."""
    rnd = random.Random(1)
    lat: list[float] = []
    total: Counter[str] = Counter()
    for j in range(n):
        service = services[rnd.randrange(len(services))]
        marks = [len(api.requests) for api in apis]
        ms = change(apis, names, service, j)
        if ms is None:
            return None
        lat.append(ms)
        time.sleep(0.05)
        total += count(apis, marks)
    return lat, total


def main() -> int:
    args = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ctlscale-"))
    apis = [KubeAPI(window=max(20000, 40 * args.n), service_cidrs=("10.96.0.0/12",))
            for _ in range(args.clusters)]
    for api in apis:
        api.write_latency = args.write_latency / 1000
        api.start()
    t = time.perf_counter()
    services = populate(apis, args.n)
    print(f"populated {args.n} exported services over {args.clusters} clusters in "
          f"{time.perf_counter() - t:.1f}s", flush=True)
    health = free_port()
    cmd = controller_cmd(apis, tmp, health, args.workers)
    log = open(tmp / "controller.log", "wb")  # noqa: SIM115
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(args.repo.resolve()))
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=args.repo, env=env)
    try:
        while get(f"http://127.0.0.1:{health}/ready") != 200:
            if proc.poll() is not None or time.perf_counter() - t0 > args.timeout:
                print("controller did not get ready; log:", (tmp / "controller.log").read_text()[-3000:])
                return 1
            time.sleep(0.2)
        sync = time.perf_counter() - t0
        writes = sum(1 for api in apis for m, _ in list(api.requests) if m != "GET")
        print(f"first full sync: {sync:.1f}s ({writes} writes, {writes / args.n:.2f} per service), "
              f"RSS {rss(proc.pid)[0]} MiB, controller CPU {cpu(proc.pid):.1f} s", flush=True)
        names = synced(apis, args.n)
        got = changes(apis, names, services, args.changes) if names is not None else None
        if got is None:
            return 1
        lat, total = got
        vm, hwm = rss(proc.pid)
        print(f"endpoint change -> every other member's slice, {args.changes} changes: "
              f"p50 {statistics.median(lat):.1f} ms, p99 {pct(lat, 0.99):.1f} ms, max {max(lat):.1f} ms")
        print("API requests per change (all members): " + ", ".join(
            f"{k} {v / args.changes:.2f}" for k, v in sorted(total.items())))
        print(f"controller RSS {vm} MiB (peak {hwm} MiB), CPU {cpu(proc.pid):.1f} s")
        return 0 if total["list services/endpointslices"] == 0 else 1
    finally:
        stop_process(proc)
        log.close()
        for api in apis:
            api.stop()


if __name__ == "__main__":
    sys.exit(main())
