#!/usr/bin/env python3
"""Sustained load while services change: no errors, no lost updates, p99 reported.

1. Serve a manifest directory (reached through a symlink) on one core.
2. Find peak QPS with a short unthrottled dnsperf run.
3. Run dnsperf at --load (default 80%) of peak for --duration seconds while a
   writer changes a service --rate times a second (new IPs, deletions and
   re-creations), and, halfway, replaces the whole directory atomically by
   swapping the symlink to a new copy.
4. Check that every final answer matches the final objects.

    python robustness/load_churn.py --duration 60
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.helpers import EXAMPLE, Server, run_server  # noqa: E402

SERVICES = 50
NS = "churn"


def service_yaml(i: int, ip: str) -> str:
    return (f"apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\n"
            f"metadata: {{name: s{i}, namespace: {NS}}}\n"
            f"spec: {{type: ClusterSetIP, ips: [\"{ip}\"],"
            f" ports: [{{name: http, protocol: TCP, port: 80}}]}}\n")


def ip_for(step: int) -> str:
    return f"10.200.{(step >> 8) & 255}.{step & 255}"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def dnsperf(port: int, qfile: Path, seconds: float, qps: int | None) -> dict[str, float]:
    cmd = ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(qfile), "-l", str(seconds),
           "-c", "4", "-q", "500", "-v"]
    if qps:
        cmd += ["-Q", str(qps)]
    rcodes: dict[str, int] = {}
    hist = [0] * 100_001  # 10 us buckets up to 1 s
    n = 0
    summary: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        for line in p.stdout:
            if line.startswith("> "):
                parts = line.split()
                rcodes[parts[1]] = rcodes.get(parts[1], 0) + 1
                hist[min(100_000, int(float(parts[-1]) * 100_000))] += 1
                n += 1
            else:
                summary.append(line)
    out: dict[str, float] = {"answered": n}
    for line in summary:
        if "Queries lost:" in line:
            out["lost"] = float(line.split()[2])
        if "Queries per second:" in line:
            out["qps"] = float(line.split()[-1])
    for q in (0.5, 0.99, 0.999):
        acc, target = 0, q * n
        for i, c in enumerate(hist):
            acc += c
            if acc >= target:
                out[f"p{q * 100:g}_ms"] = (i + 1) / 100
                break
    out.update({f"rcode_{k}": float(v) for k, v in rcodes.items()})
    return out


class Writer:
    """Changes a service `rate` times a second in a thread (new IPs, deletions, re-creations)
    and, halfway through `duration`, replaces the whole directory by swapping the symlink;
    `expected` holds each service's address (None: deleted)."""

    def __init__(self, tmp: Path, link: Path, expected: dict[int, str | None], rate: float,
                 duration: float) -> None:
        self.tmp, self.link, self.expected, self.rate, self.duration = tmp, link, expected, rate, duration
        self.changes = 0
        self.step = SERVICES
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run)
        self._th.start()

    def stop(self) -> None:
        self._stop.set()
        self._th.join()

    def _run(self) -> None:
        rng = random.Random(1)
        swapped = False
        t0 = time.monotonic()
        while not self._stop.is_set():
            cur = Path(os.readlink(self.link))
            if not swapped and time.monotonic() - t0 > self.duration / 2:
                self._swap(cur)
                swapped = True
            else:
                self._change(cur, rng)
            self.changes += 1
            self._stop.wait(1 / self.rate)

    def _swap(self, cur: Path) -> None:
        """Replace the whole directory atomically: a new copy, then swap the link."""
        new = Path(shutil.copytree(cur, self.tmp / "v2"))
        for i in range(0, SERVICES, 5):
            self.step += 1
            write_atomic(new / f"s{i}.yaml", service_yaml(i, ip_for(self.step)))
            self.expected[i] = ip_for(self.step)
        tmp_link = self.tmp / "current.new"
        tmp_link.symlink_to(new)
        os.replace(tmp_link, self.link)

    def _change(self, cur: Path, rng: random.Random) -> None:
        i = rng.randrange(SERVICES)
        self.step += 1
        f = cur / f"s{i}.yaml"
        if self.expected[i] is not None and rng.random() < 0.1:
            f.unlink()
            self.expected[i] = None
        else:
            write_atomic(f, service_yaml(i, ip_for(self.step)))
            self.expected[i] = ip_for(self.step)


def setup(tmp: Path) -> tuple[Path, dict[int, str | None], list[str], Path]:
    """The example manifests plus SERVICES services, behind a symlink: (link, expected
    addresses, the services' names, the query file)."""
    v1 = Path(shutil.copytree(EXAMPLE, tmp / "v1"))
    link = tmp / "current"
    link.symlink_to(v1)
    expected: dict[int, str | None] = {}
    for i in range(SERVICES):
        (v1 / f"s{i}.yaml").write_text(service_yaml(i, ip_for(i)))
        expected[i] = ip_for(i)
    names = [f"s{i}.{NS}.svc.clusterset.local" for i in range(SERVICES)]
    qfile = tmp / "queries.txt"
    qfile.write_text("".join(
        [f"{n} A\n" for n in names] + ["web.shop.svc.clusterset.local A\n"] * 20
        + ["db.shop.svc.clusterset.local A\n"] * 10 + ["nope.shop.svc.clusterset.local A\n"] * 5
        + ["_http._tcp.web.shop.svc.clusterset.local SRV\n"] * 5))
    return link, expected, names, qfile


def wrong_answers(srv: Server, names: list[str], expected: dict[int, str | None]) -> int:
    """How many services' answers differ from their final objects (each printed)."""
    wrong = 0
    for i, name in enumerate(names):
        got = sorted(rd.to_text() for rr in srv.query(name + ".").answer for rd in rr)
        want = [expected[i]] if expected[i] else []
        if got != want:
            wrong += 1
            print(f"LOST UPDATE {name}: got {got}, want {want}")
    return wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--rate", type=float, default=10, help="service changes per second")
    ap.add_argument("--load", type=float, default=0.8, help="fraction of peak QPS")
    args = ap.parse_args()
    pin = hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1
    if pin:
        os.sched_setaffinity(0, {1})  # this script and dnsperf on core 1, the server on core 0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        link, expected, names, qfile = setup(tmp)
        with run_server(["--manifests", str(link)], tmp) as srv:
            if pin:
                os.sched_setaffinity(srv.proc.pid, {0})
            peak = dnsperf(srv.port, qfile, 5, None)["qps"]
            target = int(peak * args.load)
            print(f"peak {peak:.0f} QPS; loading at {target} QPS for {args.duration:.0f} s "
                  f"with {args.rate:g} changes/s", flush=True)
            writer = Writer(tmp, link, expected, args.rate, args.duration)
            res = dnsperf(srv.port, qfile, args.duration, target)
            writer.stop()
            time.sleep(1.0)  # the manifest source polls every 0.25 s
            wrong = wrong_answers(srv, names, expected)
            errors = srv.logs().count("Traceback")
        print(f"changes applied: {writer.changes} (incl. one atomic directory swap)")
        print("load: " + ", ".join(f"{k}={v:g}" for k, v in res.items()))
        print(f"final answers wrong: {wrong} of {SERVICES}; tracebacks in log: {errors}")
        servfail = res.get("rcode_SERVFAIL", 0) + res.get("rcode_FORMERR", 0)
        ok = wrong == 0 and errors == 0 and res.get("lost", 1) == 0 and servfail == 0
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
