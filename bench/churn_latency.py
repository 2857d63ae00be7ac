"""Latency while the zone changes: p99 at a fixed query rate, with and without
a service changing every P seconds.

The server answers the 1000-service bench clusterset from its manifests; the
`churn` service (alone in `manifests/bench-churn.json`) gets a new VIP every
P seconds (the file is replaced atomically, as a ConfigMap update would be),
and every change gives the zone a new SOA serial. Two dnsperf processes on
CPU 1 send `--rate` QPS of the mix for `--duration` s, `--reps` times per
setting; the server is pinned to CPU 0 and warmed up first. knotd (static
zone) gives the no-change reference at the same rate. At the end the churn
name must answer the last VIP written, or the run fails.

    python bench/churn_latency.py --periods 0,1,0.2 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dns.message  # noqa: E402
import dns.query  # noqa: E402

from bench.gen_clusterset import generate  # noqa: E402
from bench.perf import Proc, dnsperf  # noqa: E402
from bench.run import start_knot, start_mcsdns  # noqa: E402


class Churner:
    """Gives the churn service a new VIP every `period` seconds, in a thread."""

    def __init__(self, path: Path, period: float) -> None:
        self.path, self.period = path, period
        self.doc = json.loads(path.read_text())
        self.changes = 0
        self.last = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            self.changes += 1
            k = self.changes
            self.last = f"10.94.{k // 250}.{k % 250 + 1}"
            self.doc["items"][0]["spec"]["ips"] = [self.last]
            tmp = self.path.with_name("." + self.path.name + ".tmp")
            tmp.write_text(json.dumps(self.doc))
            os.replace(tmp, self.path)

    def __enter__(self) -> Churner:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def p99s(proc: Proc, queries: Path, a: argparse.Namespace) -> list[float]:
    return [dnsperf(proc.port, queries, a.duration, 4, 200, False, rate=a.rate, verbose=True,
                    server_pid=proc.pid, loaders=2).p99_ms or 0.0 for _ in range(a.reps)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-bench"))
    p.add_argument("--mix", default="mix")
    p.add_argument("--rate", type=int, default=60000, help="QPS (default 60000: about 50%% of peak)")
    p.add_argument("--duration", type=float, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--periods", default="0,1,0.2", help="seconds between changes; 0: no changes")
    p.add_argument("--no-knot", dest="knot", action="store_false")
    a = p.parse_args(argv)
    meta = generate(a.data, 1000, 10000, 3)
    queries = a.data / "queries" / f"{a.mix}.txt"
    churn_file, churn_name = a.data / meta["churn"]["file"], meta["churn"]["name"]
    original = churn_file.read_text()
    rows: list[tuple[str, str, list[float], int]] = []
    try:
        proc = start_mcsdns(a.data)
        try:
            dnsperf(proc.port, queries, 2, 4, 200, False, rate=a.rate, loaders=2)  # warm-up
            for period in (float(x) for x in a.periods.split(",")):
                if period <= 0:
                    rows.append(("mcsdns", "no changes", p99s(proc, queries, a), 0))
                    continue
                with Churner(churn_file, period) as ch:
                    got = p99s(proc, queries, a)
                rows.append(("mcsdns", f"a change every {period:g} s", got, ch.changes))
                q = dns.message.make_query(churn_name, "A")
                r = dns.query.udp(q, "127.0.0.1", port=proc.port, timeout=2)
                vip = r.answer[0][0].address if r.answer else None
                if vip != ch.last:
                    raise SystemExit(f"{churn_name} answers {vip}, last written {ch.last}")
                print(f"  {rows[-1][1]}: {ch.changes} changes, last VIP {ch.last} served", flush=True)
        finally:
            proc.stop()
        if a.knot:
            knot = start_knot(a.data)
            try:
                dnsperf(knot.port, queries, 2, 4, 200, False, rate=a.rate, loaders=2)
                rows.append(("knotd", "no changes (static zone)", p99s(knot, queries, a), 0))
            finally:
                knot.stop()
    finally:
        churn_file.write_text(original)
    print(f"\n{a.mix} at {a.rate:,} QPS, {a.reps} runs of {a.duration:g} s each\n")
    print("| server | zone | changes | p99 ms per run | median p99 ms |")
    print("|---|---|---:|---|---:|")
    for server, label, vals, changes in rows:
        print(f"| {server} | {label} | {changes} | {' / '.join(f'{v:.2f}' for v in vals)} "
              f"| {statistics.median(vals):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
