"""mcsdns at scale: 10,000 services / 100,000 endpoints in 5 clusters (by default).

Prints: time from process start to /ready, RSS once ready, how long a change
to one service (its small manifest file replaced) takes to show in DNS, and
QPS on the realistic mix. The manifest source polls every 0.25 s, so a change
waits 0-250 ms for the next poll: the script reports that floor separately,
and also times the in-process part (Store.apply + zone rebuild for one
service) directly.

    python bench/scale.py
    python bench/scale.py --services 2000 --endpoints 20000 --duration 5 --changes 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen_clusterset import generate, write_list  # noqa: E402
from bench.perf import (  # noqa: E402
    SERVER_CPU,
    Proc,
    dnsperf,
    free_port,
    pinned,
    python,
    rss_kib,
    wait_quiet,
)

POLL_INTERVAL = 0.25  # mcsdns.sources.files.FileSource default


def query_a(port: int, name: str, timeout: float = 0.2) -> list[str]:
    """IPv4 addresses in the Answer of an A query over UDP (empty on timeout)."""
    qid = random.randrange(65536)
    wire = b"".join(bytes((len(p),)) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    msg = struct.pack("!HHHHHH", qid, 0, 1, 0, 0, 0) + wire + b"\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(msg, ("127.0.0.1", port))
            data = s.recv(4096)
        except OSError:
            return []
    ancount = struct.unpack_from("!H", data, 6)[0]
    i, out = 12 + len(wire) + 4, []
    for _ in range(ancount):
        while data[i] and data[i] < 0xC0:  # owner name (usually a pointer)
            i += data[i] + 1
        i += 2 if data[i] >= 0xC0 else 1
        rtype, _cls, _ttl, rdlen = struct.unpack_from("!HHIH", data, i)
        i += 10
        if rtype == 1 and rdlen == 4:
            out.append(socket.inet_ntoa(data[i:i + 4]))
        i += rdlen
    return out


def start(data: Path, workers: int) -> tuple[Proc, int, float]:
    """Start mcsdns; returns (proc, health port, seconds from spawn to /ready)."""
    port, health = free_port(), free_port()
    cmd = [python(), "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{port}", "--health",
           f"127.0.0.1:{health}", "--manifests", str(data / "manifests"), "--log-level", "WARNING"]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    proc = Proc("mcsdns", pinned(SERVER_CPU if workers == 1 else "0-1", cmd), data / "logs" / "mcsdns.log",
                port)
    proc.wait_ready(health, 300, poll=0.01)
    return proc, health, time.monotonic() - proc.started


def change_latency(proc: Proc, data: Path, n: int) -> list[float]:
    """Seconds from replacing the churn service's file to DNS answering its new VIP, n times."""
    meta = json.loads((data / "meta.json").read_text())
    path, name = data / meta["churn"]["file"], meta["churn"]["name"]
    doc = json.loads(path.read_text())
    out = []
    for k in range(n):
        vip = f"10.95.{k // 250}.{k % 250 + 1}"
        doc["items"][0]["spec"]["ips"] = [vip]
        time.sleep(random.uniform(0.3, 0.6))  # land at a random point of the poll cycle
        t0 = time.monotonic()
        write_list(path, doc["items"])
        while query_a(proc.port, name) != [vip]:
            if time.monotonic() - t0 > 10:
                raise RuntimeError(f"change to {vip} not visible after 10 s")
        out.append(time.monotonic() - t0)
    return out


def apply_cost(data: Path, n: int) -> tuple[float, float]:
    """(seconds to load everything, median seconds to apply one changed service) in-process."""
    from mcsdns.roles.loader import loader_for
    from mcsdns.serveconfig import Config

    async def go() -> tuple[float, float]:
        loader = loader_for(Config(manifests=str(data / "manifests")))
        app = loader.pipeline
        t0 = time.perf_counter()
        for s in loader.sources:
            await s.start(asyncio.get_running_loop())
        load = time.perf_counter() - t0
        for s in loader.sources:
            await s.stop()
        meta = json.loads((data / "meta.json").read_text())
        items = json.loads((data / meta["churn"]["file"]).read_text())["items"]
        times = []
        for k in range(n):
            items[0]["spec"]["ips"] = [f"10.94.0.{k + 1}"]
            t = time.perf_counter()
            app.store.apply([items[0]], [])
            times.append(time.perf_counter() - t)
        return load, statistics.median(times)

    return asyncio.run(go())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-scale"))
    p.add_argument("--services", type=int, default=10000)
    p.add_argument("--endpoints", type=int, default=100000)
    p.add_argument("--clusters", type=int, default=5)
    p.add_argument("--duration", type=float, default=20, help="seconds of the QPS run (default 20)")
    p.add_argument("--changes", type=int, default=20, help="change-latency trials (default 20)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--wait-quiet", type=float, default=30)
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    a = p.parse_args(argv)
    meta = generate(a.data, a.services, a.endpoints, a.clusters)
    print(f"clusterset: {meta['services']} services ({meta['headless']} headless), {meta['endpoints']} "
          f"endpoints in {meta['clusters']} clusters, {meta['manifest_files']} files -> {a.data}", flush=True)
    res: dict[str, object] = {"meta": meta}
    wait_quiet(a.wait_quiet)
    proc, _health, ready_s = start(a.data, a.workers)
    try:
        rss = rss_kib(proc.pid)
        print(f"startup to /ready: {ready_s:.2f} s   RSS when ready: {rss / 1024:.0f} MiB", flush=True)
        lat = change_latency(proc, a.data, a.changes)
        med, worst, best = statistics.median(lat), max(lat), min(lat)
        print(f"one-service change visible in DNS ({len(lat)} trials): median {med * 1000:.0f} ms, "
              f"min {best * 1000:.0f} ms, max {worst * 1000:.0f} ms "
              f"(includes 0-{POLL_INTERVAL * 1000:.0f} ms waiting for the next manifest poll; "
              f"mean wait {POLL_INTERVAL * 500:.0f} ms)", flush=True)
        wait_quiet(a.wait_quiet)
        perf = dnsperf(proc.port, a.data / "queries" / "mix.txt", a.duration, server_pid=proc.pid)
        rss_after = rss_kib(proc.pid)
        print(f"realistic mix: {perf.qps:,.0f} qps (server CPU {perf.server_cpu:.2f}, "
              f"{perf.qps_per_core:,.0f} per CPU-s, other load {perf.other_cpu:.2f}), "
              f"avg {perf.avg_ms:.3f} ms, "
              f"lost {perf.lost}, rcodes {perf.rcodes}; RSS after {rss_after / 1024:.0f} MiB", flush=True)
        res.update(ready_s=ready_s, rss_kib=rss, rss_after_kib=rss_after, change_s=lat, mix=perf.as_dict())
    finally:
        proc.stop()
    load_s, one_s = apply_cost(a.data, 20)
    print(f"in-process: initial load+build {load_s:.2f} s; Store.apply of one changed service "
          f"{one_s * 1000:.2f} ms (median of 20)", flush=True)
    res.update(inproc_load_s=load_s, inproc_apply_s=one_s)
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
