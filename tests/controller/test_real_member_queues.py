"""Each member is its own failure domain for writes: while member c's REAL kube-apiserver
(realk8s.sh, $MCSDNS_REALK8S; skipped without it) hangs (SIGSTOPped), has lost its etcd (etcd
SIGSTOPped) or is partitioned (iptables DROP on its loopback port), a burst of endpoint changes
in a reaches b before the first write to c gives up (its connect or read deadline). Before, a
reconcile returned only when its writes to every member finished: each change after the first
waited for c's write to time out. Once c answers again (after its write timed out), it gets
every change too. The fault is undone in `finally`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support.controller_env import Cluster, eventually, run_controller
from support.real_fleet import addresses, populate, stopped
from support.realk8s import SKIP_REASON, RealK8s, script

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
BURST = 5


def gave_up(logs: str) -> list[str]:
    """The controller's lines saying a write to c timed out."""
    return [ln for ln in logs.splitlines() if "cluster c: " in ln and "timed out" in ln]


@contextmanager
def partitioned(port: int) -> Iterator[None]:
    """Every packet to and from `port` on loopback dropped (tagged rules, deleted at the end)."""
    tag = ["-m", "comment", "--comment", f"mcsdns-test-{os.getpid()}"]
    rules = [["INPUT", "-i", "lo", "-p", "tcp", d, str(port), *tag, "-j", "DROP"]
             for d in ("--dport", "--sport")]
    added = []
    try:
        for r in rules:
            if subprocess.run(["iptables", "-I", *r], capture_output=True).returncode != 0:
                pytest.skip("iptables cannot drop loopback packets here")
            added.append(r)
        yield
    finally:
        for r in added:
            subprocess.run(["iptables", "-D", *r], capture_output=True)


@contextmanager
def fault(kind: str, c: RealK8s) -> Iterator[None]:
    """c's kube-apiserver hung, its etcd stopped, or c partitioned, for the block."""
    if kind == "partition":
        port = urlsplit(c.url).port
        assert port is not None
        with partitioned(port):
            yield
        return
    pid = int((c.kubeconfig.parent / ("apiserver.pid" if kind == "hang" else "etcd.pid")).read_text())
    with stopped(pid):
        yield


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealK8s]:
    """Member c, a real control plane exporting shop/web, for every fault in turn (each test
    undoes its fault and waits until c holds every change)."""
    k8s = RealK8s.up(f"mcsdns-test-{os.getpid()}-queues", tmp_path_factory.mktemp("realk8s-c"))
    try:
        populate(k8s)
        yield k8s
    finally:
        k8s.down()


@pytest.mark.parametrize("kind", ["hang", "etcd", "partition"])
def test_a_hung_member_does_not_hold_up_writes_between_the_others(kind: str, c: RealK8s,
                                                                  tmp_path: Path) -> None:
    if kind == "partition" and (os.geteuid() != 0 or shutil.which("iptables") is None):
        pytest.skip("a partition needs root and iptables")
    a, b = Cluster("a", "east", tmp_path), Cluster("b", "west", tmp_path)
    try:
        a.kube.namespace("shop")
        a.kube.service("shop", "web")
        a.kube.endpoints("shop", "web", "web-0", [("10.1.0.1", None)])
        a.kube.export("shop", "web")
        b.kube.namespace("shop")
        args = ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}", "--cluster",
                f"c={c.kubeconfig}", "--endpoint-ttl", "600", "--resync", "600"]
        with run_controller(args, tmp_path) as ctl:
            eventually(lambda: {"10.1.0.1", "10.3.0.1"} <= addresses(b), what="web in b")
            eventually(ctl.ready, what="first full sync")
            want = {"10.1.0.1", "10.3.0.1"}
            with fault(kind, c):
                t0 = time.monotonic()
                took = []
                for i in range(1, BURST + 1):
                    ip = f"10.1.0.{i + 1}"
                    a.kube.endpoints("shop", "web", f"web-{i}", [(ip, None)])
                    want.add(ip)
                    eventually(lambda: want <= addresses(b), what=f"change {i} in b")
                    took.append(time.monotonic() - t0)
                    # order, not time: b got change i before c's first write gave up
                    assert not gave_up(ctl.logs()), (i, gave_up(ctl.logs()))
                print(f"{BURST} changes a -> b while c is down ({kind}): "
                      + ", ".join(f"{t:.2f}" for t in took) + " s")
                # c's write gives up at its deadline: c counts as unreachable for writes
                eventually(lambda: gave_up(ctl.logs()), what="c's write timed out")
            eventually(lambda: want <= addresses(c), timeout=90, what="every change in c once it answers")
    finally:
        a.close()
        b.close()
