"""One writer per member on two REAL kube-apiservers ($MCSDNS_REALK8S; skipped without it):
--leader-elect replicas with their --cluster flags in different orders find one Lease (and are
refused without --lease-cluster), and a second controller without leader election whose member
set lacks b leaves the leader's imports of b's services alone: no ClusterSetIP changes and the
writes stay within twice the leader's alone, while b's endpoints change."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.controller_checks import writes_by_member
from support.controller_env import Controller, eventually, run_controller
from support.real_fleet import MCS, Real, clusters, service
from support.realk8s import SKIP_REASON, script

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
N = 3
SLICES = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices"
WINDOW = 8.0


def _populate(a: Real, b: Real) -> None:
    """Cluster IDs a and b, namespace ns in both, N services exported by b only."""
    clusters(a, b)
    for i in range(N):
        service(b, f"s{i}")
        _slice(b, i, 0)
        b.create(f"/apis/{MCS}/namespaces/ns/serviceexports", {
            "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": f"s{i}", "namespace": "ns"}})


def _slice(b: Real, i: int, n: int) -> None:
    b.create(SLICES, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"s{i}-{n}", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": f"s{i}"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [f"10.9.{n // 200}.{n % 200 + 1}"], "conditions": {"ready": True}}]})


def _ips(a: Real) -> dict[int, Any]:
    return {i: ((a.get(f"/apis/{MCS}/namespaces/ns/serviceimports/s{i}") or {}).get("spec") or {}).get("ips")
            for i in range(N)}


def _writes(*ctls: Controller) -> int:
    return sum(sum(c.values()) for ctl in ctls for c in writes_by_member(ctl.metrics()).values())


def _churn(b: Real, a: Real, start: int) -> int:
    """WINDOW / 0.5 endpoint changes of b's services, one every 0.5 s, the same number however
    slow the machine; returns (the next number) once the last is imported in a, so that the
    writes for them are counted whenever they happened."""
    n = start
    for _ in range(int(WINDOW / 0.5)):
        _slice(b, n % N, n)
        n += 1
        time.sleep(0.5)
    ip = f"10.9.{(n - 1) // 200}.{(n - 1) % 200 + 1}"
    eventually(lambda: any(ip in e.get("addresses", []) for s in (a.get(SLICES) or {}).get("items", [])
                           for e in s.get("endpoints") or []), what=f"{ip} imported in a")
    return n


def _leader(ctl: Controller) -> float:
    return ctl.metrics().get("mcsdns_controller_leader", 0.0)


@pytest.fixture
def two(reals: list[Real]) -> Iterator[tuple[Real, Real]]:  # noqa: F811 - uses the imported fixture
    a, b = reals
    _populate(a, b)
    yield a, b


def test_one_lease_whatever_the_order_and_a_second_writer_yields(two: tuple[Real, Real],
                                                                 tmp_path: Path) -> None:
    a, b = two
    ab = ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}"]
    ba = ["--cluster", f"b={b.kubeconfig}", "--cluster", f"a={a.kubeconfig}"]
    le = ["--leader-elect", "--resync", "600"]
    with run_controller([*ba, *le], tmp_path, name="refused") as ctl:
        assert ctl.proc.wait(60) == 2
        assert "--lease-cluster NAME" in ctl.logs().strip().splitlines()[-1]
    le += ["--lease-cluster", "b"]
    with run_controller([*ab, *le, "--identity", "one"], tmp_path, name="one") as one, \
            run_controller([*ba, *le, "--identity", "two"], tmp_path, name="two") as two_:
        eventually(lambda: one.ready() and two_.ready(), what="both ready")
        eventually(lambda: all(_ips(a).values()), what="b's services imported in a")
        assert _leader(one) + _leader(two_) == 1.0
        leader = one if _leader(one) else two_
        before, w0 = _ips(a), _writes(one, two_)
        n = _churn(b, a, 1)
        alone = _writes(one, two_) - w0
        extra = ["--cluster", f"a={a.kubeconfig}", "--resync", "600", "--writer-grace", "5"]
        with run_controller(extra, tmp_path, name="other") as other:
            eventually(lambda: "writer identity" in other.logs(), what="the other's start")
            w1 = _writes(one, two_)
            _churn(b, a, n)
            both = _writes(one, two_) + _writes(other) - w1
            after = _ips(a)
            logs = other.logs()
        print(f"\nreal: writes for {int(WINDOW / 0.5)} changes: the leader alone {alone}, with a second "
              f"writer {both}; ClusterSetIPs changed: {sum(before[i] != after[i] for i in before)} of {N}")
        assert after == before, logs
        assert both <= 2 * alone, logs
        assert "writer 'lease:b/kube-system/mcsdns-controller'" in logs and "leaves them to it" in logs
        assert _leader(leader) == 1.0
