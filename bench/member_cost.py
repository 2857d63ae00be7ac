"""What one more member costs the controller, and the projection for 50 and 255 members.

Runs bench/controller_scale.py (test API servers in one process, N exported services spread
over the members) at several member counts, reads the controller's RSS and CPU after the
first sync and the first sync's writes, fits cost = base + slope x members (least squares),
and prints the projection for 50 and 255 members (Cilium ClusterMesh's limit) in both
topologies: central (one controller, --cluster x M: one set of watches per API server) and
per-cluster (--local: M controllers, each watching and caching every member, so the same RSS
each, M sets of watches per API server, and each writing only into its own member).
A set is one watch per kind the controller reads (`WATCHES`), plus the probe's GET a second.

    .venv/bin/python bench/member_cost.py -n 300 --members 2 4 8 12
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WATCHES = 6  # namespaces, services, endpointslices, serviceexports, serviceimports, nodes (metadata)
SYNC = re.compile(r"first full sync: ([\d.]+)s \((\d+) writes")
USE = re.compile(r"controller RSS (\d+) MiB \(peak (\d+) MiB\), CPU ([\d.]+) s")


def run(n: int, members: int) -> tuple[float, int, float, float]:
    """(first sync s, writes, RSS MiB, CPU s) of one controller_scale run."""
    out = subprocess.run([sys.executable, str(HERE / "controller_scale.py"), "-n", str(n), "--clusters",
                          str(members), "--changes", "3"], capture_output=True, text=True, check=True).stdout
    s, u = SYNC.search(out), USE.search(out)
    if s is None or u is None:
        raise SystemExit(f"unexpected output:\n{out}")
    return float(s.group(1)), int(s.group(2)), float(u.group(2)), float(u.group(3))


def fit(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least squares (base, slope) of ys over xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=300, help="exported services in all (default 300)")
    p.add_argument("--members", type=int, nargs="+", default=[2, 4, 8, 12])
    a = p.parse_args()
    rows = []
    print("| members | first sync s | writes | writes/member | RSS MiB | CPU s |")
    print("|---|---|---|---|---|---|")
    for m in a.members:
        sync, writes, rss, cpu = run(a.n, m)
        rows.append((m, rss, cpu))
        print(f"| {m} | {sync:.1f} | {writes} | {writes / m:.0f} | {rss:.0f} | {cpu:.1f} |")
    ms = [r[0] for r in rows]
    rb, rs = fit(ms, [r[1] for r in rows])
    cb, cs = fit(ms, [r[2] for r in rows])
    print(f"\none more member ({a.n} services in all): RSS +{rs:.1f} MiB, first-sync CPU +{cs:.2f} s "
          f"(base {rb:.0f} MiB, {cb:.1f} s)")
    print("\n| members | topology | watches per API server | controllers | RSS per controller MiB | "
          "RSS in all MiB | first-sync CPU per controller s |")
    print("|---|---|---|---|---|---|---|")
    for m in (50, 255):
        rss, cpu = rb + rs * m, cb + cs * m
        print(f"| {m} | central | {WATCHES} | 1 | {rss:.0f} | {rss:.0f} | {cpu:.0f} |")
        print(f"| {m} | per-cluster (--local) | {WATCHES * m} | {m} | {rss:.0f} | {rss * m:.0f} | "
              f"(writes 1/{m} of central's; not measured here) |")


if __name__ == "__main__":
    main()
