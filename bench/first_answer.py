"""Records on demand, measured: the first answer for services nobody asked yet, and a
whole-zone AXFR, right after /ready, with 10,000 services (40,000 endpoints) loaded.

Generates the clusterset (bench/gen_clusterset.py), starts `mcsdns serve --manifests` and,
once /ready answers 200: (1) asks A for `--names` services in random order, each for the
first time, one at a time over UDP, and prints p50/p99/max of the answer time (the
background pass that builds every record after ready runs meanwhile: the worst case);
(2) in a second start, transfers the whole zone with dig (AXFR) as soon as /ready answers,
then once more (every record built by then): seconds and records of each; (3) in this
process, the CPU per first answer: the same names asked through the handler of a zone loaded
from the same manifests with no record built yet (the on-demand build, rendering, caching).
Prints the load average before each part: the machine is shared. With --kubeconfig, part (1)
only, served from that API server holding bench/startup.py's objects (bench/startup_real.py
loads them): listed slices keep their endpoints' text until read (ops/load.py, stage 3).

    .venv/bin/python bench/first_answer.py --services 10000 --endpoints 40000
    .venv/bin/python bench/first_answer.py --kubeconfig K --services 10000 --headless 2000
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gen_clusterset import ZONE, Generator, generate  # noqa: E402
from bench.run import start_mcsdns  # noqa: E402


def names(services: int, endpoints: int) -> list[str]:
    """Every service's name, as the generator made them (the same seed)."""
    gen = Generator(services, endpoints, 3, 0.2, 1)
    return [f"{s.name}.{s.namespace}.svc.{ZONE}." for s in gen.services]


def first_answers(data: Path, qnames: list[str],
                  kubeconfig: Path | None = None) -> tuple[list[float], list[float]]:
    """Seconds per first answer, asked one at a time right after /ready; then per answer for
    the same names asked again (from the cache: what this machine's noise alone costs)."""
    proc = start_mcsdns(data, kubeconfig=kubeconfig)
    try:
        out: tuple[list[float], list[float]] = ([], [])
        for times in out:
            for q in qnames:
                msg = dns.message.make_query(q, dns.rdatatype.A)
                t0 = time.perf_counter()
                r = dns.query.udp(msg, "127.0.0.1", port=proc.port, timeout=2)
                times.append(time.perf_counter() - t0)
                if not r.answer:
                    raise SystemExit(f"no answer for {q}: {r}")
        return out
    finally:
        proc.stop()


def percentiles(ts: list[float]) -> str:
    ts = sorted(ts)
    p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))]
    return f"p50 {statistics.median(ts) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, max {ts[-1] * 1000:.2f} ms"


def axfr(port: int) -> tuple[float, int]:
    """(seconds, records) of one AXFR with dig, its output counted, not parsed."""
    t0 = time.perf_counter()
    out = subprocess.run(["dig", "@127.0.0.1", "-p", str(port), ZONE, "AXFR", "+tcp", "+noall", "+answer"],
                         capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, out.count("\n")


def axfr_after_ready(data: Path) -> tuple[tuple[float, int], tuple[float, int]]:
    """An AXFR as soon as /ready answers, and a second one after it (every record built)."""
    proc = start_mcsdns(data, args=("--allow-transfer", "127.0.0.1/32"))
    try:
        return axfr(proc.port), axfr(proc.port)
    finally:
        proc.stop()


def cpu_per_first_answer(data: Path, qnames: list[str]) -> tuple[float, list[float]]:
    """CPU seconds per answer for a service nobody asked yet: the store loaded from the
    manifests in this process, the zone loaded with no record built (no background pass),
    each name asked once through the handler; then the CPU seconds of each turn of the
    background pass that builds the rest (what a query arriving meanwhile waits for at most)."""
    import asyncio

    from mcsdns.publish.pipeline import Pipeline
    from mcsdns.sources.manifest import load_file

    p = Pipeline()
    p.store.apply([o for f in sorted((data / "manifests").iterdir()) for o in load_file(f)], ())
    p.load(fill=False)  # answers from the data; every service still unbuilt
    queries = [dns.message.make_query(q, dns.rdatatype.A).to_wire() for q in qnames]
    t0 = time.process_time()
    for q in queries:
        p.handler.respond(q, False)
    spent = time.process_time() - t0
    if any((q.split(".")[1], q.split(".")[0]) in p.zone.unbuilt for q in qnames):
        raise SystemExit("a service asked was not built")
    turns: list[float] = []
    fill = p.builder._fill

    def timed() -> None:
        t = time.process_time()
        fill()
        turns.append(time.process_time() - t)

    p.builder._fill = timed  # type: ignore[method-assign]
    loop = asyncio.new_event_loop()
    try:
        p.builder.loop = loop
        p.builder.loaded()  # the background pass Pipeline.load starts

        async def until_built() -> None:
            while p.zone.unbuilt:
                await asyncio.sleep(0)

        loop.run_until_complete(until_built())
    finally:
        loop.close()
    return spent / len(queries), turns


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", type=int, default=10000)
    p.add_argument("--endpoints", type=int, default=40000)
    p.add_argument("--names", type=int, default=2000, help="services asked once each (default 2000)")
    p.add_argument("--kubeconfig", type=Path, help="serve from this API server (part 1 only)")
    p.add_argument("--headless", type=int, default=2000, help="of --services, with --kubeconfig")
    a = p.parse_args()
    if a.kubeconfig:
        from bench.startup import NS

        asked = [f"s{i}.{NS}.svc.{ZONE}." for i in range(a.services - a.headless)]
        asked += [f"h{i}.{NS}.svc.{ZONE}." for i in range(a.headless)]
        random.Random(2).shuffle(asked)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "logs").mkdir()
            print(f"load average {load_average()}")
            first, again = first_answers(Path(tmp), asked[:a.names], a.kubeconfig)
        print(f"first answer, {len(first)} services never asked, right after ready: {percentiles(first)}")
        print(f"the same names again (cached): {percentiles(again)}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "clusterset"
        generate(data, a.services, a.endpoints, 3)
        qnames = names(a.services, a.endpoints)
        random.Random(2).shuffle(qnames)
        print(f"load average {load_average()}")
        first, again = first_answers(data, qnames[:a.names])
        print(f"first answer, {len(first)} services never asked, right after ready: {percentiles(first)}")
        print(f"the same names again (cached): {percentiles(again)}")
        print(f"load average {load_average()}")
        (t1, n1), (t2, n2) = axfr_after_ready(data)
        print(f"AXFR with dig right after ready: {n1} records in {t1:.2f} s; again: {n2} in {t2:.2f} s")
        print(f"load average {load_average()}")
        cpu, turns = cpu_per_first_answer(data, qnames[:a.names])
        print(f"CPU per first answer (in process, no background pass): {cpu * 1e6:.0f} us")
        turns.sort()
        print(f"background pass (in process): {len(turns)} turns, CPU per turn p50 "
              f"{statistics.median(turns) * 1e6:.0f} us, p99 {turns[int(len(turns) * 0.99)] * 1e6:.0f} us, "
              f"max {turns[-1] * 1e6:.0f} us, total {sum(turns):.2f} s")


if __name__ == "__main__":
    main()
