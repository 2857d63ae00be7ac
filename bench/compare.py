"""Side by side, in one run: mcsdns (batched UDP I/O), mcsdns without its request
histogram, mcsdns on the plain recvfrom/sendto path, knotd, CoreDNS (its `file` plugin, from
$MCSDNS_COREDNS: a binary or its .xz; skipped with a reason when unset) and dnslib.

All servers are started at once, each pinned to CPU 0; only one is loaded at
a time. The runs are interleaved: round after round, every mix against every
server (the order rotates per round), so that load from other processes on a
shared machine hits all servers alike. Each run uses `--loaders` dnsperf
processes on CPU 1. The figure compared is queries answered per server
CPU-second (`/proc/<pid>/stat`), which does not depend on whether dnsperf or
the server was the limit; its median over the rounds is reported, with the
best peak QPS. Afterwards, a latency run per mix at 50% of mcsdns' best peak
QPS (for mcsdns and knotd) gives p50/p99 from `dnsperf -v`; CoreDNS, whose peak is
below that rate, is left out of it.

    python bench/compare.py --rounds 5 --duration 5
    python bench/compare.py --servers mcsdns,knot --mix a,mix --rounds 3 --duration 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import perf  # noqa: E402
from bench.gen_clusterset import MIXES, generate  # noqa: E402
from bench.perf import PerfResult, Proc, dnsperf, wait_quiet  # noqa: E402
from bench.run import (  # noqa: E402
    COREDNS_ENV,
    TCP_MIXES,
    check,
    start_coredns,
    start_dnslib,
    start_knot,
    start_mcsdns,
    table_head,
    write_results,
)

STARTERS: dict[str, Callable[[Path], Proc]] = {
    "mcsdns": lambda d: start_mcsdns(d),
    "mcsdns-nohist": lambda d: start_mcsdns(d, env={"MCSDNS_REQUEST_HISTOGRAM": "0"}, name="mcsdns-nohist"),
    "mcsdns-plain": lambda d: start_mcsdns(d, env={"MCSDNS_BATCHIO": "0"}, name="mcsdns-plain"),
    "mcsdns-plain-nohist": lambda d: start_mcsdns(
        d, env={"MCSDNS_BATCHIO": "0", "MCSDNS_REQUEST_HISTOGRAM": "0"}, name="mcsdns-plain-nohist"),
    "knot": start_knot,
    "coredns": start_coredns,
    "dnslib": start_dnslib,
}
DOC = {
    "mcsdns": "recvmmsg/sendmmsg, request histogram on (the default)",
    "mcsdns-nohist": "the same, MCSDNS_REQUEST_HISTOGRAM=0",
    "mcsdns-plain": "MCSDNS_BATCHIO=0: uvloop recvfrom/sendto per query",
    "mcsdns-plain-nohist": "the plain path, MCSDNS_REQUEST_HISTOGRAM=0",
    "knot": "knotd, udp-workers: 1",
    "coredns": "CoreDNS `file` plugin on the same zone file, GOMAXPROCS=1, no `cache`",
    "dnslib": "dnslib DNSServer + dict resolver",
    "mcsdns-baseline": "mcsdns from the --baseline checkout (its extension built in place)",
    "mcsdns-baseline-plain": "the --baseline checkout with MCSDNS_BATCHIO=0",
}
SLOW = {"dnslib"}  # a few thousand QPS: shorter runs, one per mix


def summary(runs: list[PerfResult]) -> dict[str, Any]:
    per_cpu = [r.qps_per_core for r in runs if r.server_cpu_s > 0]
    return {
        "per_cpu_median": statistics.median(per_cpu) if per_cpu else 0.0,
        "per_cpu_min": min(per_cpu, default=0.0), "per_cpu_max": max(per_cpu, default=0.0),
        "best_qps": max(r.qps for r in runs), "lost": sum(r.lost for r in runs),
        "completed": sum(r.completed for r in runs), "rounds": len(runs),
        "server_cpu": statistics.median(r.server_cpu for r in runs),
        "other_cpu": statistics.median(r.other_cpu for r in runs),
    }


def table(results: dict[str, dict[str, Any]], servers: list[str]) -> str:
    out = []
    for mix, rows in results.items():
        out += table_head(mix, ["server", "QPS per server CPU-s (median)", "min–max", "µs CPU/query",
                                "best QPS", "server CPU", "other load", "lost", "p50 ms @50%", "p99 ms @50%"])
        for s in servers:
            if s not in rows:
                continue
            r, lat = rows[s], rows[s].get("latency") or {}
            med = r["per_cpu_median"]
            p50, p99 = lat.get("p50_ms"), lat.get("p99_ms")
            out.append(f"| {s} | {med:,.0f} | {r['per_cpu_min']:,.0f}–{r['per_cpu_max']:,.0f} | "
                       f"{1e6 / med if med else 0:.2f} | {r['best_qps']:,.0f} | {r['server_cpu']:.2f} | "
                       f"{r['other_cpu']:.2f} | {r['lost']} | {'-' if p50 is None else f'{p50:.3f}'} | "
                       f"{'-' if p99 is None else f'{p99:.3f}'} |")
        base = rows.get("mcsdns", {}).get("per_cpu_median")
        ratios = [f"mcsdns/{s} {base / rows[s]['per_cpu_median']:.2f}" for s in servers
                  if base and s != "mcsdns" and s in rows and rows[s]["per_cpu_median"]]
        if ratios:
            out.append("\nper CPU-s: " + ", ".join(ratios))
        if "latency" in rows.get("mcsdns", {}):
            out.append(f"; latency runs at {rows['mcsdns']['latency']['rate']:,} QPS")
    return "\n".join(out) + "\n"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], list[str]]:
    """The options, the servers and the mixes (with --baseline, its servers added to STARTERS)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-bench"), help="generated clusterset dir")
    p.add_argument("--servers", default="mcsdns,mcsdns-nohist,mcsdns-plain,knot,coredns,dnslib",
                   help=f"comma list of {','.join(STARTERS)}")
    p.add_argument("--mix", default="a,h10,srv,nxdomain,mix", help=f"comma list of {','.join(MIXES)}")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--duration", type=float, default=5, help="seconds per run (default 5)")
    p.add_argument("--latency-duration", type=float, default=10, help="seconds per latency run (default 10)")
    p.add_argument("--no-latency", dest="latency", action="store_false")
    p.add_argument("--loaders", type=int, default=2, help="dnsperf processes per run (default 2)")
    p.add_argument("--loader-cpus", default="1", help="CPUs for dnsperf (taskset -c; default 1)")
    p.add_argument("--clients", type=int, default=4, help="dnsperf -c per process (default 4)")
    p.add_argument("--outstanding", type=int, default=200, help="dnsperf -q per process (default 200)")
    p.add_argument("--wait-quiet", type=float, default=3, help="max s to wait for an idle machine per run")
    p.add_argument("--json", type=Path)
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="also run server mcsdns-baseline: the mcsdns of another checkout, e.g. "
                        "`git worktree add DIR COMMIT && (cd DIR && python setup.py build_ext --inplace)`")
    a = p.parse_args(argv)
    if a.baseline is not None:
        base = str(a.baseline.resolve())
        STARTERS["mcsdns-baseline"] = lambda d: start_mcsdns(
            d, env={"PYTHONSAFEPATH": "1", "PYTHONPATH": base}, name="mcsdns-baseline")
        STARTERS["mcsdns-baseline-plain"] = lambda d: start_mcsdns(
            d, env={"PYTHONSAFEPATH": "1", "PYTHONPATH": base, "MCSDNS_BATCHIO": "0"},
            name="mcsdns-baseline-plain")
    servers = [s for s in a.servers.split(",") if s]
    mixes = [m for m in a.mix.split(",") if m]
    if set(servers) - set(STARTERS) or set(mixes) - set(MIXES):
        p.error("unknown server or mix")
    if "coredns" in servers and not os.environ.get(COREDNS_ENV):
        print(f"skipping coredns: set {COREDNS_ENV} to a coredns binary (or coredns.xz)", file=sys.stderr)
        servers.remove("coredns")
    return a, servers, mixes


def rounds(a: argparse.Namespace, procs: dict[str, Proc], servers: list[str],
           mixes: list[str]) -> dict[str, dict[str, list[PerfResult]]]:
    """The interleaved peak runs: every round, every mix against every server (order rotating);
    the slow servers in the first round only."""
    runs: dict[str, dict[str, list[PerfResult]]] = {m: {s: [] for s in servers} for m in mixes}
    for rnd in range(a.rounds):
        for mix in mixes:
            qfile, tcp = a.data / "queries" / f"{mix}.txt", mix in TCP_MIXES
            order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
            for s in order:
                if s in SLOW and rnd:
                    continue
                proc = procs[s]
                dur = min(a.duration, 2) if s in SLOW else a.duration
                wait_quiet(a.wait_quiet)
                dnsperf(proc.port, qfile, 0.5, a.clients, a.outstanding, tcp, loaders=a.loaders)
                r = dnsperf(proc.port, qfile, dur, a.clients, a.outstanding, tcp, server_pid=proc.pid,
                            loaders=a.loaders)
                check(s, mix, r)
                runs[mix][s].append(r)
                print(f"  round {rnd + 1} {mix:9s} {s:14s} {r.qps:9.0f} qps  cpu {r.server_cpu:.2f}  "
                      f"{r.qps_per_core:9.0f} q/cpu-s  other {r.other_cpu:.2f}  lost {r.lost}",
                      flush=True)
    return runs


def latency_runs(a: argparse.Namespace, procs: dict[str, Proc], mixes: list[str],
                 results: dict[str, dict[str, Any]]) -> None:
    """Per mix, mcsdns and knotd at half mcsdns' best peak QPS: their latency into `results`."""
    for mix in mixes:
        qfile, tcp = a.data / "queries" / f"{mix}.txt", mix in TCP_MIXES
        rate = int(results[mix]["mcsdns"]["best_qps"] * 0.5)
        for s in ("mcsdns", "knot"):
            if s not in procs:
                continue
            wait_quiet(a.wait_quiet)
            lat = dnsperf(procs[s].port, qfile, a.latency_duration, a.clients, a.outstanding, tcp,
                          rate=rate, verbose=True, server_pid=procs[s].pid, loaders=a.loaders)
            results[mix][s]["latency"] = lat.as_dict()
            print(f"  latency {mix:9s} {s:14s} @{rate} qps p50 {lat.p50_ms or 0:.3f} "
                  f"p99 {lat.p99_ms or 0:.3f} ms lost {lat.lost}", flush=True)


def main(argv: list[str] | None = None) -> int:
    a, servers, mixes = parse_args(argv)
    perf.CLIENT_CPU = a.loader_cpus
    if not shutil.which("dnsperf"):
        raise SystemExit("dnsperf is not installed (apt-get install -y dnsperf)")
    meta = generate(a.data, 1000, 10000, 3)
    print(f"clusterset: {meta['services']} services, {meta['endpoints']} endpoints -> {a.data}", flush=True)
    procs: dict[str, Proc] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        for s in servers:
            procs[s] = STARTERS[s](a.data)
        runs = rounds(a, procs, servers, mixes)
        for mix in mixes:
            results[mix] = {s: summary(runs[mix][s]) for s in servers if runs[mix][s]}
        if a.latency and "mcsdns" in servers:
            latency_runs(a, procs, mixes, results)
    finally:
        for proc in procs.values():
            proc.stop()
    print("\n".join(f"- {s}: {DOC[s]}" for s in servers))
    print(table(results, servers))
    if a.json:
        write_results(a.json, meta, a, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
