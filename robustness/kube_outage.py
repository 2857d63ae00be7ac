#!/usr/bin/env python3
"""The Kubernetes API killed and restarted under DNS load: answers never stop, and
changes made while the API was away (deletions included) arrive when it returns.

    python robustness/kube_outage.py --duration 20 --qps 40000

Runs the in-memory API server from tests/fakeapi/, `mcsdns serve --kubeconfig`
pinned to core 0 and dnsperf pinned to core 1 at a fixed rate. Twice during the
run the API is stopped for --outage seconds; while it is down, objects are
changed and deleted in its store, and the second time its watch cache is reset
so the server must relist (410 Gone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeapi import KubeAPI  # noqa: E402
from support.helpers import Server, run_server  # noqa: E402

N = 50


def service_import(i: int, ip: str) -> dict[str, object]:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": f"s{i}", "namespace": "outage"},
            "spec": {"type": "ClusterSetIP", "ips": [ip],
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}


def outages(api: KubeAPI, expected: dict[int, str | None], duration: float, outage: float,
            log: list[str]) -> None:
    """Two outages of `outage` s, at a third and two thirds of `duration`, some services changed
    and deleted during each; the second comes back with its watch cache reset (410 Gone)."""
    for round_, reset in enumerate((False, True), start=1):
        time.sleep(duration / 3 - outage / 2)
        api.stop()
        t0 = time.monotonic()
        log.append(f"API stopped (round {round_})")
        for i in range(round_ - 1, N, 7):  # change some, delete some, while down
            if i % 2:
                api.delete("ServiceImport", "outage", f"s{i}")
                expected[i] = None
            else:
                ip = f"10.151.{round_}.{i + 1}"
                api.put(service_import(i, ip))
                expected[i] = ip
        time.sleep(max(0.0, outage - (time.monotonic() - t0)))
        api.start(port=int(api.url.rsplit(":", 1)[1]), reset_watch_cache=reset)
        log.append(f"API back after {time.monotonic() - t0:.1f} s"
                   + (" with its watch cache reset (410 Gone)" if reset else ""))


def converge(srv: Server, expected: dict[int, str | None]) -> tuple[int, float, float]:
    """Wait up to 15 s for every answer to match `expected` and the source to be connected:
    (answers wrong, connected metric, seconds waited)."""
    deadline = time.monotonic() + 15
    while True:
        wrong = 0
        for i in range(N):
            got = sorted(rd.to_text() for rr in srv.query(f"s{i}.outage.svc.clusterset.local.")
                         .answer for rd in rr)
            wrong += got != ([expected[i]] if expected[i] else [])
        connected = srv.metric('mcsdns_source_connected{source="kube"}')
        if (not wrong and connected == 1) or time.monotonic() > deadline:
            return wrong, connected, time.monotonic() + 15 - deadline
        time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--qps", type=int, default=40000)
    ap.add_argument("--outage", type=float, default=3)
    args = ap.parse_args()
    pin = hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1
    if pin:
        os.sched_setaffinity(0, {1})
    api = KubeAPI()
    api.start()
    expected: dict[int, str | None] = {}
    for i in range(N):
        api.put(service_import(i, f"10.150.0.{i + 1}"))
        expected[i] = f"10.150.0.{i + 1}"
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        qfile = tmp / "q.txt"
        qfile.write_text("".join(f"s{i}.outage.svc.clusterset.local A\n" for i in range(N)))
        with run_server(["--kubeconfig", str(kubeconfig)], tmp) as srv:
            if pin:
                os.sched_setaffinity(srv.proc.pid, {0})
            log: list[str] = []
            th = threading.Thread(target=outages, args=(api, expected, args.duration, args.outage, log))
            th.start()
            out = subprocess.run(
                ["dnsperf", "-s", "127.0.0.1", "-p", str(srv.port), "-d", str(qfile),
                 "-l", str(args.duration), "-c", "4", "-q", "200", "-Q", str(args.qps)],
                capture_output=True, text=True).stdout
            th.join()
            wrong, connected, converged = converge(srv, expected)
            errors = srv.logs().count("Traceback")
    api.stop()
    for line in log:
        print(line)
    stats = {k: v for k, v in (ln.split(":", 1) for ln in out.splitlines() if ":" in ln)}
    print("dnsperf: " + ", ".join(f"{k.strip()}={stats[k].strip()}" for k in
                                  ("  Queries sent", "  Queries lost", "  Queries per second",
                                   "  Average Latency (s)") if k in stats))
    lost = int(stats.get("  Queries lost", "1").split()[0])
    print(f"final answers wrong: {wrong} of {N}; source connected at the end: {connected:.0f} "
          f"({converged:.1f} s after the load ended); tracebacks: {errors}")
    ok = lost == 0 and wrong == 0 and connected == 1 and errors == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
