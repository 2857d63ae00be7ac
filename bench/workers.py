"""`--workers N` scaling on the A mix, measured in server CPU-seconds.

On a 2-core machine N workers and dnsperf share the cores, so raw QPS cannot
show the scaling. What decides it is measured instead, with every worker
given the same load (N workers get N x `--rate` queries per second, so each
sees the rate one worker sees, and batches of the same size): (1) the work
per query with N workers (queries per server CPU-second, all workers and the
supervisor together) against one worker, and (2) how evenly SO_REUSEPORT
spreads the load (each worker's CPU-seconds: mean/max). With N cores free,
throughput scales by N x efficiency x mean/max (the busiest worker limits);
efficiencies above 1 (noise: light per-worker loads are cheap or dear per
query depending on wake-ups) are counted as 1 in that projection.

    python bench/workers.py --workers 1,2 --rate 15000 --rounds 3 --duration 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen_clusterset import generate  # noqa: E402
from bench.perf import _descendants, cpu_seconds, dnsperf, wait_quiet  # noqa: E402
from bench.run import start_mcsdns  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-bench"))
    p.add_argument("--workers", default="1,2", help="comma list of worker counts (default 1,2)")
    p.add_argument("--mix", default="a")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--loaders", type=int, default=2, help="dnsperf processes (default 2)")
    p.add_argument("--clients", type=int, default=16, help="dnsperf -c per process (default 16: many "
                   "source ports, so that SO_REUSEPORT's hash spreads them)")
    p.add_argument("--rate", type=int, default=15000, help="queries per second per worker (default 15000)")
    p.add_argument("--wait-quiet", type=float, default=3)
    a = p.parse_args(argv)
    counts = [int(n) for n in a.workers.split(",")]
    generate(a.data, 1000, 10000, 3)
    qfile = a.data / "queries" / f"{a.mix}.txt"
    procs = {n: start_mcsdns(a.data, n, name=f"mcsdns-w{n}") for n in counts}
    eff: dict[int, list[float]] = {n: [] for n in counts}
    shares: dict[int, list[float]] = {n: [] for n in counts}
    try:
        time.sleep(1)
        for rnd in range(a.rounds):
            for n in counts:
                proc = procs[n]
                workers = [w for w in _descendants(proc.pid) if w != proc.pid] or [proc.pid]
                wait_quiet(a.wait_quiet)
                dnsperf(proc.port, qfile, 0.5, a.clients, 100, loaders=a.loaders)
                w0 = {w: cpu_seconds(w) for w in workers}
                r = dnsperf(proc.port, qfile, a.duration, a.clients, 100, server_pid=proc.pid,
                            loaders=a.loaders, rate=a.rate * n)
                used = [cpu_seconds(w) - w0[w] for w in workers]
                balance = statistics.mean(used) / max(used) if max(used) > 0 else 0.0
                eff[n].append(r.qps_per_core)
                shares[n].append(balance)
                print(f"  round {rnd + 1} workers {n}: {r.qps:9.0f} qps  server CPU {r.server_cpu:.2f}  "
                      f"{r.qps_per_core:9.0f} q/cpu-s  worker CPU-s {', '.join(f'{u:.2f}' for u in used)}  "
                      f"mean/max {balance:.2f}  lost {r.lost}", flush=True)
    finally:
        for proc in procs.values():
            proc.stop()
    base = statistics.median(eff[1]) if 1 in eff else None
    print("\n| workers | QPS per server CPU-s (median) | efficiency vs 1 | load balance mean/max "
          "| projected scaling on N free cores |")
    print("|---:|---:|---:|---:|---:|")
    for n in counts:
        m, bal = statistics.median(eff[n]), statistics.median(shares[n])
        e = m / base if base else 0.0
        print(f"| {n} | {m:,.0f} | {e:.2f} | {bal:.2f} | {min(e, 1.0) * n * bal:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
