#!/usr/bin/env python3
"""CPU to apply one object of N items, as the server does (the store parses it, the service's
records are built), for the shapes that once had a linear scan per item: named ports of a
ClusterSetIP import, headless endpoints sharing a hostname, ClusterSetIP ips, the addresses
of one endpoint. Linear work costs ~2x per doubling; a scan per item ~4x.

    python robustness/apply_scans.py --sizes 2000,4000,8000,16000
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcsdns.data.store import Store  # noqa: E402
from mcsdns.dns.names import encode_name  # noqa: E402
from mcsdns.kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL  # noqa: E402
from mcsdns.zone.records import service_records  # noqa: E402

ZONE = encode_name("clusterset.local")
Obj = dict[str, Any]


def _ip(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def _import(spec: Obj) -> Obj:
    return {"kind": "ServiceImport", "metadata": {"name": "web", "namespace": "ns"}, "spec": spec}


def _slice(endpoints: list[Obj]) -> Obj:
    return {"kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "web-c1", "namespace": "ns",
                         "labels": {SERVICE_NAME_LABEL: "web", SOURCE_CLUSTER_LABEL: "c1"}},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "endpoints": endpoints}


HEADLESS = _import({"type": "Headless"})

# shape -> the objects (import, then slices) of a service with n items
CASES: dict[str, Callable[[int], list[Obj]]] = {
    "named ports": lambda n: [_import({"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [
        {"name": f"p{i}", "protocol": "TCP", "port": i % 65535 + 1} for i in range(n)]})],
    "endpoints sharing a hostname": lambda n: [HEADLESS, _slice(
        [{"addresses": [_ip(i)], "hostname": "web"} for i in range(n)])],
    "ClusterSetIP ips": lambda n: [_import({"type": "ClusterSetIP", "ips": [_ip(i) for i in range(n)]})],
    "addresses of one endpoint": lambda n: [HEADLESS, _slice([{"addresses": [_ip(i) for i in range(n)]}])],
}


def apply_cpu(objs: list[Obj]) -> float:
    """CPU seconds to apply `objs` to an empty store and build the service's records."""
    store = Store()
    gc.disable()
    try:
        t = time.process_time()
        for obj in objs:
            store.upsert(obj)
        si, slices = store.service(("ns", "web"))
        assert si is not None
        names = service_records(si, slices, ZONE)
        spent = time.process_time() - t
    finally:
        gc.enable()
    assert names
    return spent


def best(case: str, n: int, repeats: int) -> float:
    """The least CPU of `repeats` applies of `case` with n items."""
    return min(apply_cpu(CASES[case](n)) for _ in range(repeats))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="2000,4000,8000,16000", help="items, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many applies")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for case in CASES:
        cpu = [best(case, n, args.repeats) for n in sizes]
        steps = " ".join(f"{n}: {c:.3f} s" for n, c in zip(sizes, cpu, strict=True))
        print(f"{case:<30} {steps}   {sizes[-1] // sizes[0]}x items: {cpu[-1] / max(cpu[0], 1e-6):.1f}x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
