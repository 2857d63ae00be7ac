"""One writer per member: two controllers with different member sets do not fight (the second
leaves the first one's objects alone and says so), and --leader-elect replicas find the same
Lease whatever the order of their --cluster flags. Test API servers, the controller as a process."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from support.controller_checks import args_for
from support.controller_env import Cluster, Controller, eventually, run_controller
from support.diagnose_env import diagnose

NS = "ns"
A_SVCS = [f"a{i}" for i in range(4)]  # exported by a
C_SVCS = [f"c{i}" for i in range(4)]  # exported by c only: unknown to a controller without c
WINDOW = float(os.environ.get("MCSDNS_WRITERS_WINDOW", "6"))  # seconds of changes measured
WRITER = "mcsdns.io/writer"


def _fleet(a: Cluster, b: Cluster, c: Cluster) -> None:
    for cl in (a, b, c):
        cl.kube.namespace(NS)
    for cl, svcs in ((a, A_SVCS), (c, C_SVCS)):
        for i, svc in enumerate(svcs):
            cl.kube.service(NS, svc)
            cl.kube.endpoints(NS, svc, f"{svc}-0", [(f"10.{ord(cl.name[0])}.{i}.1", None)])
            cl.kube.export(NS, svc)


def _ips(clusters: tuple[Cluster, ...]) -> dict[tuple[str, str], list[str]]:
    """Every ClusterSetIP import's ips, by (cluster, service)."""
    out = {}
    for cl in clusters:
        for svc in A_SVCS + C_SVCS:
            si = cl.kube.serviceimport(NS, svc)
            out[(cl.name, svc)] = list((si or {}).get("spec", {}).get("ips") or [])
    return out


def _churn(a: Cluster, seconds: float, n: itertools.count[int], fleet: tuple[Cluster, ...]) -> None:
    """`seconds` / 0.25 endpoint changes, one every 0.25 s (a new source slice of an `a`
    service), the same number however slow the machine; returns once the last is imported
    everywhere, so that the writes for them are counted whenever they happened."""
    for _ in range(int(seconds / 0.25)):
        i = next(n)
        svc, ip = A_SVCS[i % len(A_SVCS)], f"10.200.{i // 250}.{i % 250}"
        a.kube.endpoints(NS, svc, f"{svc}-{i + 1}", [(ip, None)])
        time.sleep(0.25)
    eventually(lambda: all(ip in {x for s in cl.kube.imported_slices(NS, svc) for e in s["endpoints"]
                                  for x in e["addresses"]} for cl in fleet), what=f"{ip} imported everywhere")


def _writes(clusters: tuple[Cluster, ...]) -> int:
    return sum(cl.writes() for cl in clusters)


def test_a_second_writer_is_noticed_not_fought(clusters3: list[Cluster], tmp_path: Path) -> None:
    """Controller one manages {a,b,c}, two (started later, no leader election) {a,b}: two would
    delete the imports of the services only c exports, one recreate them on new ClusterSetIPs.
    Now two finds one's objects stamped by another writer that writes and leaves them alone:
    writes stay within 2x those of one alone, no ClusterSetIP changes, and two says so."""
    a, b, c = clusters3
    fleet = (a, b, c)
    _fleet(a, b, c)
    n = itertools.count()
    with run_controller(args_for(a, b, c, extra=("--writer-grace", "5")), tmp_path, name="one") as one:
        eventually(one.ready, what="one's first pass")
        eventually(lambda: all(all(_ips((cl,)).values()) for cl in fleet), what="imports")
        before = _ips(fleet)
        w0 = _writes(fleet)
        _churn(a, WINDOW, n, fleet)
        alone = _writes(fleet) - w0
        w1 = _writes(fleet)
        with run_controller(args_for(a, b, extra=("--writer-grace", "5")), tmp_path, name="two") as two:
            _churn(a, WINDOW, n, fleet)
            both = _writes(fleet) - w1
            after = _ips(fleet)
            logs = two.logs()
            code, report = diagnose("--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}")
        print(f"\nwrites for {int(WINDOW / 0.25)} changes: one alone {alone}, one and two {both}; "
              f"ClusterSetIPs changed: {sum(before[k] != after[k] for k in before)} of {len(before)}")
        assert after == before, logs
        assert both <= 2 * alone, logs
        assert "another controller, writer 'members:3:" in logs and "leaves them to it" in logs
        # every object one wrote says so
        si = b.kube.imported(NS, "c0")
        assert si["metadata"]["annotations"][WRITER].startswith("members:3:")
        events = [e for e in a.api.objects("Event") if e.get("reason") == "WriterConflict"]
        assert events and all(e["involvedObject"]["kind"] == "ServiceExport" for e in events), events
        fails = [r["message"] for r in report["results"] if r["check"] == "writers" and r["status"] == "FAIL"]
        assert code == 1 and fails and "'members:3:" in fails[0] and "'members:2:" in fails[0], report


def _leader(ctl: Controller) -> float:
    return ctl.metrics().get("mcsdns_controller_leader", 0.0)


def test_leader_elect_replicas_find_the_same_lease_whatever_the_flag_order(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    """Replicas with their --cluster flags in different orders: without --lease-cluster each would
    take the Lease in its first cluster and both would lead; now that is refused (exit 2, one
    line), and with it exactly one leads."""
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("kube-system")
    ab = ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}"]
    ba = ["--cluster", f"b={b.kubeconfig}", "--cluster", f"a={a.kubeconfig}"]
    le = ["--leader-elect", "--resync", "600"]
    for i, order in enumerate((ab, ba)):
        with run_controller([*order, *le, "--identity", f"r{i}"], tmp_path, name=f"refused{i}") as ctl:
            assert ctl.proc.wait(20) == 2
            out = ctl.logs()
            assert "--lease-cluster NAME" in out.strip().splitlines()[-1] and "Traceback" not in out, out
    le += ["--lease-cluster", "b"]
    with run_controller([*ab, *le, "--identity", "one"], tmp_path, name="one") as one, \
            run_controller([*ba, *le, "--identity", "two"], tmp_path, name="two") as two:
        eventually(lambda: one.ready() and two.ready(), what="both ready")
        time.sleep(1.0)
        assert _leader(one) + _leader(two) == 1.0
        assert a.api.get("Lease", "kube-system", "mcsdns-controller") is None
        held: dict[str, Any] | None = b.api.get("Lease", "kube-system", "mcsdns-controller")
        assert held is not None and held["spec"]["holderIdentity"] in ("one", "two"), json.dumps(held)
