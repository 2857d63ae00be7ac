"""`mcsdns diagnose`'s controller line: "running" only while the leader Lease is held and
fresh. The member Leases (`mcsdns-member-<name>`, renewed for the Endpoint TTL) outlive the
controller and never make it "running"; a Lease released by a clean stop is "not running"."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.controller_env import Cluster, eventually, run_controller, shop
from support.diagnose_env import (
    COREFILE,
    NS,
    Report,
    clusterset,
    configmap,
    diagnose,
    fails,
    healthy,
    lease,
    mcsdns_service,
    stamp,
)

from mcsdns.controller.lease import MemberLeases

__all__ = ["healthy"]  # the fixture


def controller(report: Report) -> tuple[str, str, str]:
    """(status, cluster, message) of the controller line."""
    return next((r["status"], r["cluster"], r["message"]) for r in report["results"]
                if r["check"] == "controller")


def member_lease(c: Cluster, member: str, ago: float = 1.0, ttl: int = 120) -> None:
    """A member Lease as the controller renews it for the Endpoint TTL."""
    c.api.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": MemberLeases.PREFIX + member, "namespace": NS},
               "spec": {"holderIdentity": "mcsdns-controller-7d9f-x2", "leaseDurationSeconds": ttl,
                        "renewTime": stamp(ago)}})


@pytest.fixture
def exported(healthy: tuple[Cluster, Cluster]) -> Iterator[tuple[Cluster, Cluster]]:
    """a exports web to b, synced; fresh member Leases of both in a (as a controller leaves them)."""
    a, b = healthy
    for m in ("a", "b"):
        member_lease(a, m)
    yield a, b


def test_a_leader_lease_past_its_duration_is_not_running_whatever_the_member_leases(
        exported: tuple[Cluster, Cluster]) -> None:
    a, b = exported
    lease(a, ago=20, duration=15)  # expired 5 s ago; the member Leases were renewed 1 s ago
    rc, report = diagnose(*clusterset(a, b))
    st, cl, msg = controller(report)
    assert rc == 1 and (st, cl) == ("FAIL", "a") and fails(report) == {("controller", "a", "")}, report
    assert re.match(rf"not running: Lease {NS}/mcsdns-controller held by mcsdns-controller-7d9f-x2, "
                    r"renewed \d+s ago: expired \d+s ago", msg), msg
    lease(a, ago=5, duration=15)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 0 and controller(report)[0] == "OK", report
    assert "held by mcsdns-controller-7d9f-x2" in controller(report)[2]


def test_a_released_lease_is_not_running(exported: tuple[Cluster, Cluster]) -> None:
    a, b = exported
    a.api.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",  # as LeaderElector.release
               "metadata": {"name": "mcsdns-controller", "namespace": NS},
               "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": stamp(2),
                        "acquireTime": stamp(2)}})
    rc, report = diagnose(*clusterset(a, b))
    st, _, msg = controller(report)
    assert rc == 1 and st == "FAIL" and re.search(r"released \d+s ago \(no holder", msg), report


def test_member_leases_alone_never_say_running(exported: tuple[Cluster, Cluster]) -> None:
    a, b = exported
    a.kube.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/mcsdns-controller")
    rc, report = diagnose(*clusterset(a, b))
    st, _, msg = controller(report)
    assert st == "WARN" and msg.startswith("not known: no leader Lease mcsdns-controller"), report
    for m in ("a", "b"):
        member_lease(a, m, ago=200)  # past their TTL too
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and controller(report)[0] == "FAIL", report


def test_a_real_controller_running_then_stopped(clusters2: list[Cluster], tmp_path: Path) -> None:
    """`mcsdns controller --leader-elect`: running while it runs; after SIGTERM its released
    Lease reads "not running" at once, though its member Leases are still within their TTL."""
    a, b = clusters2
    shop(a, clusters2, db=False)
    for c in (a, b):
        configmap(c, "coredns", COREFILE % mcsdns_service(c))
    args = [*clusterset(a, b), "--leader-elect", "--lease-cluster", "a", "--lease-namespace", NS,
            "--identity", "ctl-1"]
    path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/mcsdns-controller"
    with run_controller(args, tmp_path) as ctl:
        eventually(ctl.ready, what="first full sync")
        rc, report = diagnose(*clusterset(a, b))
        st, cl, msg = controller(report)
        assert rc == 0 and (st, cl) == ("OK", "a") and "held by ctl-1" in msg, report
    assert (a.kube.get(path) or {})["spec"]["holderIdentity"] in ("", None)
    assert a.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{MemberLeases.PREFIX}b")
    rc, report = diagnose(*clusterset(a, b))
    st, cl, msg = controller(report)
    assert rc == 1 and (st, cl) == ("FAIL", "a") and "released" in msg, report
