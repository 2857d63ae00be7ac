"""Locality failover latency: a member's own endpoint goes not ready (or ready again) ->
that member's imported EndpointSlices carry the new hints.

Three test API servers (tests/fakeapi/, in this process) with the three-cluster example of
tests/controller/test_controller_locality.py (shop/web, `trafficDistribution: PreferSameZone`), then
`python -m mcsdns controller` against them; `--flips` times, west's endpoint 10.2.0.1 flips
readiness and west's store is polled every 0.5 ms until the other local endpoint's zone
hints show it (p50/p90/max).

    .venv/bin/python bench/locality_failover.py --flips 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.controller_checks import args_for  # noqa: E402
from support.controller_env import IDS, Cluster, eventually, run_controller  # noqa: E402
from support.locality_env import B_HINTS, ENDPOINTS, NODES, export, hints, node, service, source  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flips", type=int, default=30)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcsdns-locality-"))
    cl = {n: Cluster(n, cid, tmp) for n, cid in IDS}
    for n, c in cl.items():
        c.kube.namespace("shop")
        for nn, z in NODES[n].items():
            c.api.put(node(nn, z or "zc"))
        c.api.put(service("web", "PreferSameZone"))
        c.api.put(source("web", ENDPOINTS[n]))
    for n in ("a", "b", "c"):
        cl[n].api.put(export("web"))
    b, lat = cl["b"], []
    try:
        with run_controller(args_for(*cl.values()), tmp):
            eventually(lambda: hints(b) == B_HINTS, timeout=60)
            for i in range(args.flips):
                down = i % 2 == 0
                want = ["z1", "z2", "z3"] if down else ["z2", "z3"]
                t0 = time.perf_counter()
                b.api.put(source("web", ENDPOINTS["b"], ready={"10.2.0.1": not down}))
                while (hints(b).get("10.2.0.2") or {}).get("forZones") != want:
                    time.sleep(0.0005)
                lat.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.2)
    finally:
        for c in cl.values():
            c.close()
    lat.sort()
    print(f"own endpoint readiness flip -> new hints in the member's imported slices, {len(lat)} flips: "
          f"p50 {statistics.median(lat):.1f} ms, p90 {lat[int(len(lat) * 0.9)]:.1f} ms, max {lat[-1]:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
