"""Locality failover through a real kube-proxy: west's own endpoint goes not ready (or ready
again) -> the controller writes west's imported slice -> kube-proxy's next sync moves the
ClusterSetIP's traffic. kube-proxy syncs at most once per --iptables-min-sync-period /
--nftables-min-sync-period (1 s by default): a change right after a sync waits for the rest
of that period, a change on an idle kube-proxy is synced at once.

The set-up of tests/controller/test_real_kube_proxy.py (three real kube-apiservers, the controller, kube-proxy
as west's Node b-1 in a network namespace; root, MCSDNS_REALK8S and MCSDNS_KUBE_PROXY). For each
--min-sync value, kube-proxy is started with it and west's endpoint flips `--flips` times,
alternately after 2.5 s idle ("idle": no sync in the last period) and right after the previous
flip's traffic moved ("busy": a sync just happened). Per flip: the controller's write (the source
slice's PUT -> the imported slice carries the new readiness, polled) and the time until the first
connection to the ClusterSetIP lands on the new side (a probe every ~50 ms).

    sudo -E .venv/bin/python bench/locality_kube_proxy.py --min-sync 1s,100ms
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.controller_env import eventually, run_controller  # noqa: E402
from support.kubeproxy_env import SKIP_REASON as NO_KUBE_PROXY  # noqa: E402
from support.kubeproxy_env import UnixRelay, agent, binary, kube_proxy, netns, probe  # noqa: E402
from support.kubeproxy_fleet import ENDPOINTS, IDS, NODE_IP, NS, SLICES, hinted, set_ready, set_up  # noqa: E402
from support.realk8s import SKIP_REASON, RealK8s, script  # noqa: E402

from mcsdns.controller.kinds.derivedservice import derived_name  # noqa: E402

WEST = ENDPOINTS["b"][0]


def imported_ready(b: RealK8s) -> bool | None:
    """The readiness of west's own endpoint on west's imported slice."""
    sel = "multicluster.kubernetes.io/service-name%3Dweb"
    for s in b.json("GET", f"{SLICES}?labelSelector={sel}")["items"]:
        for e in s["endpoints"]:
            if e["addresses"] == [WEST]:
                return bool(e["conditions"].get("ready", True))
    return None


def flip(b: RealK8s, ns: str, vip: str, ready: bool) -> tuple[float, float]:
    """(the controller's write, traffic moved), in seconds from the source slice's PUT."""
    t0 = time.monotonic()
    set_ready(b, ready)
    write = moved = None
    while moved is None:
        if write is None and imported_ready(b) is ready:
            write = time.monotonic() - t0
        got = next(iter(probe(ns, vip, 80, 1)))
        if (got == "west") is ready:
            moved = time.monotonic() - t0
        assert time.monotonic() - t0 < 30, "traffic did not move"
    while write is None:
        write = time.monotonic() - t0 if imported_ready(b) is ready else None
    return write, moved


def run(exe: str, b: RealK8s, vip: str, home: Path, mode: str, min_sync: str, flips: int) -> None:
    port = int(b.url.rsplit(":", 1)[1])
    work = Path(tempfile.mkdtemp(dir=home))
    relay = UnixRelay(work, port)
    eps = {ENDPOINTS[n][0]: IDS[n] for n in IDS}
    with netns(f"mcsdns-kpb-{os.getpid()}", [*eps, NODE_IP]) as ns:
        srv = agent(ns, work, [port], eps)
        proxy = kube_proxy(exe, ns, b.kubeconfig, "b-1", mode, work / "kube-proxy.log", min_sync)
        try:
            eventually(lambda: probe(ns, vip, 80, 1).get("west"), timeout=60, what="kube-proxy routing")
            rows: dict[str, list[tuple[float, float]]] = {"idle": [], "busy": []}
            for i in range(flips):
                kind = "idle" if i % 2 == 0 else "busy"
                if kind == "idle":
                    time.sleep(2.5)
                rows[kind].append(flip(b, ns, vip, ready=i % 2 == 1))
        finally:
            set_ready(b, True)
            for p in (proxy, srv):
                p.terminate()
                p.wait(10)
            relay.close()
    for kind, r in rows.items():
        w = [x[0] * 1000 for x in r]
        m = [x[1] for x in r]
        print(f"{mode} min-sync-period {min_sync}, {kind}: controller write p50 "
              f"{statistics.median(w):.0f} ms "
              f"(max {max(w):.0f}); traffic moved p50 {statistics.median(m):.2f} s "
              f"(min {min(m):.2f}, max {max(m):.2f}), {len(r)} flips")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-sync", default="1s,100ms", help="kube-proxy's min sync periods, comma-separated")
    p.add_argument("--mode", default="iptables", choices=("iptables", "nftables"))
    p.add_argument("--flips", type=int, default=6)
    args = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mcsdns-kp-bench-"))
    exe = binary(home)
    if script() is None or exe is None:
        print(f"skipped: {SKIP_REASON if script() is None else NO_KUBE_PROXY}")
        return 0
    ks: dict[str, RealK8s] = {}
    try:
        for n in IDS:
            ks[n] = RealK8s.up(f"kpb-{n}")
            set_up(n, ks[n])
        args_ = [a for n, k in ks.items() for a in ("--cluster", f"{n}={k.kubeconfig}")]
        with run_controller(args_, home):
            eventually(lambda: hinted(ks["b"]), timeout=60, what="hints on west's imported slices")
            vip = ks["b"].json("GET", f"/api/v1/namespaces/{NS}/services/{derived_name((NS, 'web'))}")
            for ms in args.min_sync.split(","):
                run(exe, ks["b"], vip["spec"]["clusterIP"], home, args.mode, ms, args.flips)
    finally:
        for k in ks.values():
            k.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
