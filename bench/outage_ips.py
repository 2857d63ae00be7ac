"""ClusterSetIPs and imports across a member outage longer than the endpoint TTL (issue 39).

Three test API servers (tests/fakeapi/, in this process), namespace `ns` in each; member c
alone exports `--only-c` services, a and b `--shared` more each that c exports too (a third
of all services headless). `python -m mcsdns controller` (derived mode, or `--cidr`) imports
them; then c's API server stops for `--outage` seconds (longer than `--ttl`) and starts again.
Printed: the imports present in a and b before, at the outage's end and once c is back
(every import with c's endpoints again); the ClusterSetIPs (ServiceImport `spec.ips`) that
changed across it; the API writes to a and b during the outage and after it.

    .venv/bin/python bench/outage_ips.py [--only-c 40] [--shared 20] [--ttl 3] [--outage 8]
        [--cidr] [--repo PATH]   # the checkout whose controller runs (default: this one)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.controller_env import IDS, Cluster, eventually  # noqa: E402
from support.helpers import stop_process  # noqa: E402

NS = "ns"


def imports(c: Cluster) -> dict[str, dict[str, Any]]:
    return {si["metadata"]["name"]: si for si in c.kube.items(f"{c.kube.mcs}/namespaces/{NS}/serviceimports")}


def ips(c: Cluster) -> dict[str, tuple[str, ...]]:
    return {n: tuple(si["spec"].get("ips") or ()) for n, si in imports(c).items()}


def north_sources(c: Cluster) -> int:
    """Imported slices from c (cluster ID north)."""
    return len(c.kube.items(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
                            "multicluster.kubernetes.io/source-cluster=north"))


def export(c: Cluster, name: str, ip: str, headless: bool) -> None:
    c.kube.service(NS, name, headless=headless)
    c.kube.endpoints(NS, name, f"{name}-{c.name}", [(ip, None)])
    c.kube.export(NS, name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only-c", type=int, default=40)
    p.add_argument("--shared", type=int, default=20)
    p.add_argument("--ttl", type=float, default=3.0)
    p.add_argument("--outage", type=float, default=8.0)
    p.add_argument("--cidr", action="store_true")
    p.add_argument("--repo", type=Path, default=REPO)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcsdns-outage-"))
    cl = [Cluster(n, cid, tmp) for n, cid in IDS]
    a, b, c = cl
    for x in cl:
        x.kube.namespace(NS)
    a.kube.namespace("kube-system")  # the member Leases
    names = []
    for i in range(args.only_c):
        export(c, f"c{i}", f"10.3.{i // 250}.{i % 250 + 1}", i % 3 == 2)
        names.append(f"c{i}")
    for i in range(args.shared):
        for x, net in ((a, 1), (b, 2), (c, 3)):
            export(x, f"s{i}", f"10.{net}.9.{i % 250 + 1}", i % 3 == 2)
        names.append(f"s{i}")
    cmd = [sys.executable, "-m", "mcsdns.controller", "--endpoint-ttl", str(args.ttl), "--resync", "600"]
    for x in cl:
        cmd += ["--cluster", f"{x.name}={x.kubeconfig}"]
    if args.cidr:
        cmd += ["--clusterset-cidr", "10.77.0.0/16"]
    log = open(tmp / "controller.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=args.repo,
                            env=dict(os.environ, PYTHONPATH=str(args.repo.resolve())))
    want = len(names)
    vips = sum(1 for n in names if int(n[1:]) % 3 != 2)  # ClusterSetIP services
    try:
        eventually(lambda: all(sum(map(bool, ips(x).values())) == vips for x in (a, b)), timeout=120,
                   what="every service imported in a and b")
        eventually(lambda: all(north_sources(x) == want for x in (a, b)), timeout=60, what="c's slices")
        before = {x.name: ips(x) for x in (a, b)}
        w0 = a.writes() + b.writes()
        c.stop()
        time.sleep(args.outage)
        during = {x.name: ips(x) for x in (a, b)}
        w1 = a.writes() + b.writes()
        gone = sum(north_sources(x) for x in (a, b))
        c.start()
        eventually(lambda: all(len(ips(x)) == want and north_sources(x) == want for x in (a, b)), timeout=120,
                   what="every service imported with c's endpoints again")
        time.sleep(2)
        after = {x.name: ips(x) for x in (a, b)}
        w2 = a.writes() + b.writes()
    finally:
        stop_process(proc)
        log.close()
        for x in cl:
            x.close()
    total = 2 * want
    changed = sum(1 for m in before for n, v in before[m].items() if v and after[m].get(n) != v)
    kept = sum(1 for m in before for n, v in before[m].items() if v and during[m].get(n) == v)
    print(f"{'cidr' if args.cidr else 'derived'} mode, {args.only_c} services exported by c alone, "
          f"{args.shared} by a, b and c; TTL {args.ttl:g} s, outage {args.outage:g} s ({args.repo})")
    print(f"imports in a and b: {total} before, {sum(len(v) for v in during.values())} at the outage's end "
          f"({kept} of {2 * vips} ClusterSetIPs the same), {sum(len(v) for v in after.values())} after; "
          f"c's slices left in a and b at the outage's end: {gone}")
    print(f"ClusterSetIPs changed across the outage and return: {changed} of {2 * vips}")
    print(f"writes to a and b: {w1 - w0} during the outage, {w2 - w1} after the return")
    return 0


if __name__ == "__main__":
    sys.exit(main())
