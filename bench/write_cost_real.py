"""What each of the controller's first-sync writes costs a REAL kube-apiserver and its etcd.

Brings up one control plane with `realk8s.sh` ($MCSDNS_REALK8S or `--realk8s`; without it
the bench says so and exits 0) and makes N writes of each kind the controller's first sync
makes (bench/controller_real.py counts them), from `--threads` threads, printing for each
the kube-apiserver's and etcd's CPU milliseconds per write (/proc/PID/stat) and the wall
time. Also: a server-side apply of a ServiceImport (create and change), and a merge PATCH,
against the POST and PUT the controller makes.

    MCSDNS_REALK8S=/path/to/realk8s.sh .venv/bin/python bench/write_cost_real.py -n 1000
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.realk8s import bench_place  # noqa: E402

from bench.controller_real import Cluster  # noqa: E402
from bench.controller_scale import MCS, source_slice  # noqa: E402

Obj = dict[str, Any]
NS = "ns"
SI = f"/apis/{MCS}/namespaces/{NS}/serviceimports"
SE = f"/apis/{MCS}/namespaces/{NS}/serviceexports"


def service_import(name: str, ips: list[str] | None = None) -> Obj:
    spec: Obj = {"type": "ClusterSetIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                 "sessionAffinity": "None"}
    if ips:
        spec["ips"] = ips
    return {"apiVersion": MCS, "kind": "ServiceImport", "spec": spec,
            "metadata": {"name": name, "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "bench"}}}


class Phases:
    """Runs one kind of write N times and prints its cost."""

    def __init__(self, c: Cluster, threads: int) -> None:
        self.c, self.threads = c, threads

    def run(self, label: str, fn: Callable[[Any], Obj], items: Iterable[Any]) -> list[Obj]:
        items = list(items)
        time.sleep(1)
        a, t = self.c.cpu(), time.perf_counter()
        with ThreadPoolExecutor(self.threads) as pool:
            out = list(pool.map(fn, items))
        dt, b = time.perf_counter() - t, self.c.cpu()
        ms = {p: (b[p] - a[p]) / len(items) * 1000 for p in a}
        print(f"{label:34} apiserver {ms['apiserver']:4.2f} ms + etcd {ms['etcd']:4.2f} ms per write "
              f"({len(items)} in {dt:.1f} s)", flush=True)
        return out

    def raw(self, method: str, path: str, body: Any, query: list[tuple[str, str]], ctype: str) -> Obj:
        """A request with its own content type (the client sends JSON)."""
        out: Obj = self.c.client.request(method, path, body, dict(query), timeout=(5.0, 30.0),
                                         content_type=ctype)
        return out


def controller_writes(p: Phases, n: int) -> None:
    """The five writes of a member's sync, and the export's status."""
    c = p.c.client
    made = p.run("POST serviceimports", lambda i: c.request("POST", SI, service_import(f"s{i}")), range(n))
    def service(i: int) -> Obj:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"s{i}", "namespace": NS},
                "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}
    p.run("POST services (ClusterIP allocated)", lambda i: c.request(
        "POST", f"/api/v1/namespaces/{NS}/services", service(i)), range(n))

    def put(o: Obj, sub: str = "") -> Obj:
        o = copy.deepcopy(o)
        o["spec"]["ips"] = ["10.96.0.1"]
        o["status"] = {"clusters": [{"cluster": "c0"}]}
        return c.request("PUT", f"{SI}/{o['metadata']['name']}{sub}", o)  # type: ignore[no-any-return]
    made = p.run("PUT serviceimports (ips)", put, made)
    p.run("PUT serviceimports/status", lambda o: put(o, "/status"), made)
    p.run("POST endpointslices", lambda i: c.request(
        "POST", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
        source_slice(NS, f"s{i}", f"10.1.{i // 250}.{i % 250 + 1}")), range(n))
    ses = [c.request("POST", SE, {"apiVersion": MCS, "kind": "ServiceExport",
                                  "metadata": {"name": f"s{i}", "namespace": NS}}) for i in range(n)]
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Exported", "message": "x",
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    p.run("PUT serviceexports/status", lambda o: c.request(
        "PUT", f"{SE}/{o['metadata']['name']}/status", dict(o, status=ready)), ses)


def alternatives(p: Phases, n: int) -> None:
    """Server-side apply and merge PATCH of ServiceImports."""
    def apply(i: int, ips: list[str] | None = None) -> Obj:
        return p.raw("PATCH", f"{SI}/a{i}", json.dumps(service_import(f"a{i}", ips)),
                     [("fieldManager", "bench"), ("force", "true")], "application/apply-patch+yaml")
    p.run("apply serviceimports (create)", apply, range(n))
    p.run("apply serviceimports (ips)", lambda i: apply(i, ["10.96.0.2"]), range(n))
    merge = {"spec": {"ips": ["10.96.0.3"]}}
    p.run("merge PATCH serviceimports (ips)", lambda i: p.raw(
        "PATCH", f"{SI}/a{i}", merge, [], "application/merge-patch+json"), range(n))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1000, help="writes of each kind (default 1000)")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--realk8s", default=os.environ.get("MCSDNS_REALK8S"),
                    help="path of realk8s.sh (default: $MCSDNS_REALK8S)")
    args = ap.parse_args()
    place = bench_place("write_cost_real", args.realk8s, "writecost-")
    if place is None:
        return 0
    _, home, crds = place
    c = Cluster(args.realk8s, home, "writecost", crds)
    try:
        c.client.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": NS}})
        p = Phases(c, args.threads)
        controller_writes(p, args.n)
        alternatives(p, args.n)
        return 0
    finally:
        c.down()


if __name__ == "__main__":
    sys.exit(main())
