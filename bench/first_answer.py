"""Records on demand, measured: the first answer for services nobody asked yet, and a
whole-zone AXFR, right after /ready, with 10,000 services (40,000 endpoints) loaded.

Generates the clusterset (bench/gen_clusterset.py), starts `mcsdns serve --manifests` and,
once /ready answers 200: (1) asks A for `--names` services in random order, each for the
first time, one at a time over UDP, and prints p50/p99/max of the answer time (the
background pass that builds every record after ready runs meanwhile: the worst case);
(2) in a second start, transfers the whole zone with dig (AXFR) as soon as /ready answers,
then once more (every record built by then): seconds and records of each.

    .venv/bin/python bench/first_answer.py --services 10000 --endpoints 40000
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


def first_answers(data: Path, qnames: list[str]) -> list[float]:
    """Seconds per first answer, asked one at a time right after /ready."""
    proc = start_mcsdns(data)
    try:
        out = []
        for q in qnames:
            msg = dns.message.make_query(q, dns.rdatatype.A)
            t0 = time.perf_counter()
            r = dns.query.udp(msg, "127.0.0.1", port=proc.port, timeout=2)
            out.append(time.perf_counter() - t0)
            if not r.answer:
                raise SystemExit(f"no answer for {q}: {r}")
        return out
    finally:
        proc.stop()


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", type=int, default=10000)
    p.add_argument("--endpoints", type=int, default=40000)
    p.add_argument("--names", type=int, default=2000, help="services asked once each (default 2000)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "clusterset"
        generate(data, a.services, a.endpoints, 3)
        qnames = names(a.services, a.endpoints)
        random.Random(2).shuffle(qnames)
        ts = sorted(first_answers(data, qnames[:a.names]))
        p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))]
        print(f"first answer, {len(ts)} services never asked, right after ready: p50 "
              f"{statistics.median(ts) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, max {ts[-1] * 1000:.2f} ms")
        (t1, n1), (t2, n2) = axfr_after_ready(data)
        print(f"AXFR with dig right after ready: {n1} records in {t1:.2f} s; again: {n2} in {t2:.2f} s")


if __name__ == "__main__":
    main()
