"""Throughput and latency of mcsdns vs knotd vs a plain dnslib server, per query mix.

Each server runs alone, pinned to CPU 0 (`taskset -c 0`); dnsperf runs pinned
to CPU 1. For every mix: a peak run (dnsperf as fast as the server answers),
then a latency run at 50% of mcsdns' peak for that mix (`-Q`, per-query
latencies from `dnsperf -v` give p50/p99; dnslib, which cannot take that
rate, runs at 50% of its own peak). The h100 mix runs over TCP: its 1.6 kB
answer does not fit a UDP response (512 bytes plain, 1232 with EDNS in
mcsdns and knotd), so a real client gets TC=1 and retries over TCP.

    python bench/run.py --duration 20
    python bench/run.py --duration 5 --mix a,mix --servers mcsdns,knot
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen_clusterset import MIX_DOC, MIXES, ZONE, generate  # noqa: E402
from bench.perf import (  # noqa: E402
    REPO,
    SERVER_CPU,
    PerfResult,
    Proc,
    dnsperf,
    free_port,
    pinned,
    python,
    wait_quiet,
)

SERVERS = ("mcsdns", "knot", "dnslib")
TCP_MIXES = {"h100"}
# what each mix must answer (a server that answers otherwise is not measured fairly)
EXPECT = {"a": "NOERROR", "h10": "NOERROR", "h100": "NOERROR", "srv": "NOERROR", "nxdomain": "NXDOMAIN"}


def mcsdns_help() -> str:
    return subprocess.run([python(), "-m", "mcsdns", "serve", "--help"], capture_output=True, text=True,
                          cwd=REPO, check=False).stdout


def start_mcsdns(data: Path, workers: int = 1, env: dict[str, str] | None = None,
                 name: str = "mcsdns", args: tuple[str, ...] = (), kubeconfig: Path | None = None) -> Proc:
    """mcsdns serving `data`'s manifests (or, with `kubeconfig`, that API server's objects),
    its log in `data`/logs, once /ready answers."""
    port, health = free_port(), free_port()
    source = ["--kubeconfig", str(kubeconfig)] if kubeconfig else ["--manifests", str(data / "manifests")]
    cmd = [python(), "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{port}", "--health",
           f"127.0.0.1:{health}", *source, "--log-level", "WARNING", *args]
    cpus = SERVER_CPU
    if workers > 1:
        if "--workers" not in mcsdns_help():
            raise SystemExit("this mcsdns has no --workers option")
        cmd += ["--workers", str(workers)]
        cpus = f"0-{min(workers, os.cpu_count() or 1) - 1}"
    proc = Proc(name, pinned(cpus, cmd), data / "logs" / f"{name}.log", port, env)
    proc.health = health  # type: ignore[attr-defined]
    proc.wait_dns()
    proc.wait_ready(health, time.monotonic() - proc.started + 120)
    return proc


KNOT_CONF = """server:
    rundir: "{d}"
    listen: 127.0.0.1@{port}
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "{d}"
control:
    listen: "{d}/knot.sock"
log:
  - target: stderr
    any: warning
template:
  - id: default
    storage: "{d}"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
    semantic-checks: off
zone:
  - domain: {zone}
    file: {zone}.zone
"""


def ensure_knot() -> str:
    knotd = shutil.which("knotd") or ("/usr/sbin/knotd" if Path("/usr/sbin/knotd").exists() else None)
    if knotd is None:
        print("knotd missing: apt-get install -y knot", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-qq", "knot"], check=False,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        knotd = shutil.which("knotd") or "/usr/sbin/knotd"
    return knotd


def start_knot(data: Path) -> Proc:
    knotd = ensure_knot()
    d = data / "knot"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir()
    shutil.copy(data / f"{ZONE}.zone", d / f"{ZONE}.zone")
    port = free_port()
    (d / "knot.conf").write_text(KNOT_CONF.format(d=d, port=port, zone=ZONE))
    proc = Proc("knot", pinned(SERVER_CPU, [knotd, "-c", str(d / "knot.conf")]), data / "logs" / "knot.log",
                port)
    proc.wait_dns()
    return proc


def start_dnslib(data: Path) -> Proc:
    try:
        import dnslib  # noqa: F401
    except ImportError:
        subprocess.run([python(), "-m", "pip", "install", "-q", "dnslib"], check=True)
    port = free_port()
    cmd = [python(), str(REPO / "bench" / "dnslib_server.py"), "--zone", str(data / f"{ZONE}.zone"),
           "--port", str(port)]
    proc = Proc("dnslib", pinned(SERVER_CPU, cmd), data / "logs" / "dnslib.log", port)
    proc.wait_dns(timeout=300)
    return proc


COREDNS_ENV = "MCSDNS_COREDNS"
COREDNS_CONF = """{zone}:{port} {{
    bind 127.0.0.1
    file {zonefile} {{
        reload 0
    }}
}}
"""


def start_coredns(data: Path) -> Proc:
    """CoreDNS ($MCSDNS_COREDNS: a binary or its .xz) serving the zone file with its `file` plugin,
    its authoritative path: GOMAXPROCS=1, no `cache` (only the plugins listed run), no reload."""
    from bench.startup_real import coredns_binary  # here: that module reaches the real-API helpers

    d = data / "coredns"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir()
    port = free_port()
    (d / "Corefile").write_text(COREDNS_CONF.format(zone=ZONE, port=port, zonefile=data / f"{ZONE}.zone"))
    binary = coredns_binary(os.environ[COREDNS_ENV], d)
    proc = Proc("coredns", pinned(SERVER_CPU, [str(binary), "-conf", str(d / "Corefile")]),
                data / "logs" / "coredns.log", port, {"GOMAXPROCS": "1"})
    try:
        proc.wait_dns()
    except RuntimeError:
        proc.stop()
        raise
    finally:
        if binary.parent == d:
            binary.unlink()  # the unpacked copy (75 MB): the running process keeps its inode
    return proc


STARTERS: dict[str, Callable[[Path], Proc]] = {"knot": start_knot, "dnslib": start_dnslib}


def check(server: str, mix: str, r: PerfResult) -> None:
    want = EXPECT.get(mix)
    if want and r.completed and r.rcodes.get(want, 0) != r.completed:
        print(f"  WARNING: {server} {mix}: expected all {want}, got {r.rcodes}", file=sys.stderr)


def bench_server(server: str, proc: Proc, data: Path, mixes: list[str], a: argparse.Namespace,
                 results: dict[str, dict[str, dict[str, Any]]]) -> None:
    for mix in mixes:
        qfile = data / "queries" / f"{mix}.txt"
        tcp = mix in TCP_MIXES
        dnsperf(proc.port, qfile, 1, a.clients, a.outstanding, tcp)  # warm-up
        runs = []
        for _ in range(a.repeat):
            wait_quiet(a.wait_quiet)
            runs.append(dnsperf(proc.port, qfile, a.duration, a.clients, a.outstanding, tcp,
                                server_pid=proc.pid))
        peak = max(runs, key=lambda r: r.qps)
        check(server, mix, peak)
        row: dict[str, Any] = {"peak": peak.as_dict()}
        ref = results.get(mix, {}).get("mcsdns", {}).get("peak", {}).get("qps")
        base = ref if ref and server != "dnslib" else peak.qps
        if a.latency and base:
            rate = max(1, int(base * 0.5))
            out = data / "logs" / f"latency-{server}-{mix}.out"
            wait_quiet(a.wait_quiet)
            lat = dnsperf(proc.port, qfile, a.latency_duration, a.clients, a.outstanding, tcp, rate=rate,
                          verbose=True, out=out, server_pid=proc.pid)
            row["latency"] = lat.as_dict()
        results.setdefault(mix, {})[server] = row
        lr = row.get("latency", {})
        print(f"  {server:7s} {mix:9s} {peak.qps:10.0f} qps  avg {peak.avg_ms:6.3f} ms  lost {peak.lost}  "
              f"cpu {peak.server_cpu:.2f}  {peak.qps_per_core:8.0f} q/cpu-s  other {peak.other_cpu:.2f}"
              + (f" | @{lr['rate']} qps p50 {lr['p50_ms']:.3f} p99 {lr['p99_ms']:.3f} ms lost {lr['lost']}"
                 if lr and lr.get("p99_ms") is not None else ""), flush=True)


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table_head(mix: str, columns: list[str]) -> list[str]:
    """The start of a mix's results table: its heading (the mix and what it asks), the header
    row and the alignment row (the first column left, the figures right)."""
    return [f"\n**{mix}** — {MIX_DOC[mix]}{' (TCP)' if mix in TCP_MIXES else ''}\n",
            "| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 1)]


def write_results(path: Path, meta: dict[str, Any], a: argparse.Namespace, results: dict[str, Any]) -> None:
    """The results as JSON, with the clusterset and the options they were run with."""
    path.write_text(json.dumps({"meta": meta, "args": {k: str(v) for k, v in vars(a).items()},
                                "results": results}, indent=2) + "\n")


def table(results: dict[str, dict[str, dict[str, Any]]], servers: list[str]) -> str:
    """Markdown tables, one per mix, with mcsdns/knot and mcsdns/dnslib ratios."""
    out = []
    for mix, rows in results.items():
        out += table_head(mix, ["server", "peak QPS", "server CPU", "QPS per server CPU-s", "other load",
                                "avg ms", "lost", "latency run rate", "p50 ms", "p99 ms", "lost"])
        for s in servers:
            if s not in rows:
                continue
            p, lat = rows[s]["peak"], rows[s].get("latency", {})
            out.append(f"| {s} | {p['qps']:,.0f} | {p['server_cpu']:.2f} | {p['qps_per_core']:,.0f} | "
                       f"{p['other_cpu']:.2f} | {p['avg_ms']:.3f} | {p['lost']} | "
                       f"{fmt(lat.get('rate'), ',')} | {fmt(lat.get('p50_ms'), '.3f')} | "
                       f"{fmt(lat.get('p99_ms'), '.3f')} | {fmt(lat.get('lost'), 'd')} |")
        m = rows.get("mcsdns", {}).get("peak", {}).get("qps")
        c = rows.get("mcsdns", {}).get("peak", {}).get("qps_per_core")
        ratios = [f"mcsdns/{s}: peak QPS {m / rows[s]['peak']['qps']:.2f}, per CPU-s "
                  f"{c / rows[s]['peak']['qps_per_core']:.2f}"
                  for s in ("knot", "dnslib") if m and c and s in rows and rows[s]["peak"]["qps"]
                  and rows[s]["peak"]["qps_per_core"]]
        if ratios:
            out.append("\n" + ", ".join(ratios))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-bench"), help="generated clusterset dir")
    p.add_argument("--duration", type=float, default=20, help="seconds per peak run (default 20)")
    p.add_argument("--latency-duration", type=float, default=10, help="seconds per latency run (default 10)")
    p.add_argument("--no-latency", dest="latency", action="store_false", help="skip the latency runs")
    p.add_argument("--mix", default=",".join(MIXES), help=f"comma list of {','.join(MIXES)}")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"comma list of {','.join(SERVERS)}")
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--endpoints", type=int, default=10000)
    p.add_argument("--clusters", type=int, default=3)
    p.add_argument("--workers", type=int, default=1, help="mcsdns --workers (default 1)")
    p.add_argument("--clients", type=int, default=4, help="dnsperf -c (default 4)")
    p.add_argument("--outstanding", type=int, default=200, help="dnsperf -q (default 200)")
    p.add_argument("--repeat", type=int, default=1, help="peak runs per mix; the best counts (default 1)")
    p.add_argument("--wait-quiet", type=float, default=30,
                   help="before each run wait up to this many s for other processes to go idle (default 30)")
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    a = p.parse_args(argv)
    mixes = [m for m in a.mix.split(",") if m]
    servers = [s for s in a.servers.split(",") if s]
    for name, allowed in ((mixes, MIXES), (servers, SERVERS)):
        bad = set(name) - set(allowed)
        if bad:
            p.error(f"unknown: {', '.join(sorted(bad))}")
    if not shutil.which("dnsperf"):
        raise SystemExit("dnsperf is not installed (apt-get install -y dnsperf)")
    servers.sort(key=SERVERS.index)  # mcsdns first: the latency runs use its peak
    meta = generate(a.data, a.services, a.endpoints, a.clusters)
    print(f"clusterset: {meta['services']} services ({meta['headless']} headless), {meta['endpoints']} "
          f"endpoints in {meta['clusters']} clusters -> {a.data}", flush=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for server in servers:
        proc = start_mcsdns(a.data, a.workers) if server == "mcsdns" else STARTERS[server](a.data)
        try:
            bench_server(server, proc, a.data, mixes, a, results)
        finally:
            proc.stop()
    text = table(results, servers)
    print(text)
    if a.json:
        write_results(a.json, meta, a, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
