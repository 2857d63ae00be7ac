"""What the request duration histogram costs per query, measured in one process
with no load generator in the way.

The real handler (the 1000-service bench clusterset loaded from its manifests)
answers real UDP datagrams on 127.0.0.1 through the batched path
(`_batchio.serve`, cache hits answered in C as in the server), in bursts of B
queries; blocks with and without the histogram's `observe` alternate, and only
the server side is timed (CPU time of this thread). As that A/B difference is
within the noise of a shared machine, the histogram's own work (`observe`,
once per batch; the plain path's timing statements, once per query) is also
timed alone, and its cost per query is set against the per-query time at each burst size.

    python bench/histogram_cost.py --bursts 1,4,16,64
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from bisect import bisect_left
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dns.message  # noqa: E402

from bench.gen_clusterset import generate  # noqa: E402
from mcsdns.publish.pipeline import Pipeline  # noqa: E402
from mcsdns.roles.loader import Loader, loader_for  # noqa: E402
from mcsdns.serveconfig import Config  # noqa: E402
from mcsdns.transport import _batchio  # noqa: E402
from mcsdns.transport.udp import DURATION_BOUNDS_NS, RequestTimer  # noqa: E402


def queries(path: Path, n: int) -> list[bytes]:
    out = []
    for i, line in enumerate(path.read_text().splitlines()[:n]):
        name, rtype = line.split()
        q = dns.message.make_query(name, rtype, use_edns=0 if i % 2 else False)
        q.id = i & 0xFFFF
        out.append(q.to_wire())
    return out


async def loaded_app(data: Path) -> Loader:
    """mcsdns answering from the generated clusterset (sources started, zone loaded), no sockets."""
    generate(data, 1000, 10000, 3)
    loader = loader_for(Config(listen=[], manifests=str(data / "manifests")))
    app = loader.pipeline
    for s in loader.sources:
        await s.start(asyncio.get_running_loop())
    while not loader.synced():  # answer from the data, not SERVFAIL
        await asyncio.sleep(0.01)
    app.zone.set_loaded()
    return loader


def timing_costs(timer: RequestTimer, reps: int = 200_000) -> tuple[float, float]:
    """CPU ns of the histogram's own work per batch (observe) and of the plain path's timing
    statements per query, each timed alone."""
    clock = time.thread_time_ns
    t0 = clock()
    for i in range(reps):
        timer.observe(20_000 + (i & 0xFFFF), 8)
    observe_ns = (clock() - t0) / reps
    pc, bounds, buckets = time.perf_counter_ns, DURATION_BOUNDS_NS, timer.buckets
    t0 = clock()
    for _ in range(reps):
        s0 = pc()
        dt = pc() - s0
        buckets[bisect_left(bounds, dt)] += 1
        timer.total_ns += dt
    return observe_ns, (clock() - t0) / reps


class Bench:
    """Queries sent from a client socket and served by `_batchio.serve` on a server socket."""

    def __init__(self, app: Pipeline, qs: list[bytes], timer: RequestTimer) -> None:
        self.app, self.qs, self.timer, self.k = app, qs, timer, 0
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.setblocking(False)
        self.cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.cli.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.cli.setblocking(False)
        self.addr, self.fd = self.srv.getsockname(), self.srv.fileno()

    def block(self, burst: int, iterations: int, timed: bool) -> float:
        """Server CPU ns per query over `iterations` queries sent `burst` at a time."""
        clock, h = time.thread_time_ns, self.app.handler
        respond, cache = h.respond, h.cache.tables[False]
        spent = count = 0
        for _ in range(iterations // burst):
            for _ in range(burst):
                self.cli.sendto(self.qs[self.k % len(self.qs)], self.addr)
                self.k += 1
            t0 = clock()
            n, elapsed, _ = _batchio.serve(self.fd, respond, h.panics, cache, h.cache.serial)
            if timed:
                self.timer.observe(elapsed, n)
            spent += clock() - t0
            count += n
            try:
                while True:
                    self.cli.recv(4096)
            except BlockingIOError:
                pass
        return spent / count


async def measure(a: argparse.Namespace) -> None:
    loader = await loaded_app(a.data)
    timer = RequestTimer()
    bench = Bench(loader.pipeline, queries(a.data / "queries" / f"{a.mix}.txt", 1000), timer)
    observe_ns, plain_ns = timing_costs(timer)
    print(f"mix {a.mix}; observe() per batch: {observe_ns:,.0f} ns; plain path timing per query: "
          f"{plain_ns:,.0f} ns (the C side reads CLOCK_MONOTONIC twice per batch either way)\n")
    print("| burst (queries per recvmmsg) | server CPU ns per query, histogram off (median of blocks) "
          "| with histogram | A/B difference | histogram cost per query = observe/burst | cost % |")
    print("|---:|---:|---:|---:|---:|---:|")
    for burst in [int(b) for b in a.bursts.split(",")]:
        per: dict[bool, list[float]] = {False: [], True: []}
        bench.k = 0  # each burst size sends the same queries
        for block in range(2 * a.blocks):
            timed = block % 2 == 1
            per[timed].append(bench.block(burst, a.iterations, timed))
        off, on = statistics.median(per[False]), statistics.median(per[True])
        cost = observe_ns / burst
        print(f"| {burst} | {off:,.0f} | {on:,.0f} | {on - off:+,.0f} | {cost:,.0f} "
              f"| {100 * cost / off:.2f}% |")
    for s in loader.sources:
        await s.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-bench"))
    p.add_argument("--mix", default="mix")
    p.add_argument("--bursts", default="1,4,16,64")
    p.add_argument("--iterations", type=int, default=5000, help="queries per block (default 5000)")
    p.add_argument("--blocks", type=int, default=15, help="blocks per mode, alternating (default 15)")
    asyncio.run(measure(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
