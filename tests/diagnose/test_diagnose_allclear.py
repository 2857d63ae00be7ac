"""`mcsdns diagnose` never gives a false all-clear: exports no member imports, no controller
(its Leases stale or absent, its pods not running), a refused read (one FAIL, the checks that
need it skipped), and the CoreDNS / NodeLocal DNSCache forward of the zone, each reported."""

from __future__ import annotations

import re

import pytest
from support.controller_env import Cluster, shop
from support.diagnose_env import (
    COREFILE,
    clusterset,
    configmap,
    diagnose,
    fails,
    healthy,
    installed,
    lease,
    mcsdns_service,
    pod,
    statuses,
    sync,
)

__all__ = ["healthy"]  # the fixture


def test_healthy_reports_the_controller_and_the_dns_forward(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 0 and report["summary"]["FAIL"] == report["summary"]["WARN"] == 0, report
    assert statuses(report, "controller")["a"][1].startswith("running: Lease mcsdns-system/mcsdns-controller")
    for c in ("a", "b"):
        st, msg = statuses(report, "coredns")[c]
        assert st == "OK" and "clusterset.local forwards to Service mcsdns-system/mcsdns" in msg, msg


def test_exports_with_no_controller_ever_fail(clusters2: list[Cluster]) -> None:
    """Exports, nothing imported, no controller: the state that answered NXDOMAIN with 0 FAIL."""
    a, b = clusters2
    shop(a, clusters2, db=False)
    for c in (a, b):
        configmap(c, "coredns", COREFILE % mcsdns_service(c))
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("import", "a", "shop/web"), ("controller", "", "")}, fails(report)
    msgs = {r["check"]: r["message"] for r in report["results"] if r["status"] == "FAIL"}
    assert msgs["import"].startswith("exported here but imported nowhere")
    assert msgs["controller"].startswith("not running: exports exist but no member has the leader Lease")
    rc, report = diagnose("--kubeconfig", str(a.kubeconfig))  # one cluster: the same export
    assert rc == 1 and ("import", "cluster", "shop/web") in fails(report)


def test_a_stale_lease_is_no_controller(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    lease(a, ago=600)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("controller", "a", "")}, fails(report)
    msg = statuses(report, "controller")["a"][1]
    assert re.search(r"held by mcsdns-controller-7d9f-x2, renewed 60\ds ago: expired", msg), msg


def test_a_fresh_lease_but_no_running_pod_is_no_controller(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    pod(a, "mcsdns-controller-7d9f-x2", phase="Running", ready=False, waiting="CrashLoopBackOff")
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("controller", "a", "")}, fails(report)
    msg = statuses(report, "controller")["a"][1]
    assert "controller pods: mcsdns-controller-7d9f-x2 CrashLoopBackOff" in msg, msg
    pod(a, "mcsdns-controller-7d9f-x3")
    assert diagnose(*clusterset(a, b))[0] == 0


@pytest.mark.parametrize("plural", ["endpointslices", "services", "serviceimports"])
def test_a_refused_read_is_one_fail(healthy: tuple[Cluster, Cluster], plural: str) -> None:
    a, b = healthy
    b.api.deny(plural, ("list",))
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("permissions", "b", "")}, report
    msg = statuses(report, "permissions")["b"][1]
    assert f"list {plural}" in msg and f"skipped the checks that need {plural}" in msg, msg


def test_refused_reads_beyond_the_role_warn(healthy: tuple[Cluster, Cluster]) -> None:
    """Leases and ConfigMaps are not the controller's to read: a WARN names the check not made."""
    a, b = healthy
    for c in (a, b):
        c.api.deny("leases", ("list",))
    b.api.deny("configmaps", ("get",))
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 0 and not fails(report)
    assert statuses(report, "controller")["a"][0] == "WARN"
    assert statuses(report, "coredns")["b"][0] == "WARN" and statuses(report, "coredns")["a"][0] == "OK"


@pytest.mark.parametrize("corefile,want", [
    (".:53 {\n    forward . /etc/resolv.conf\n}\n",
     "where no block serves clusterset.local: they get block .:53"),
    (COREFILE % "10.96.99.99", "forwards to 10.96.99.99, which is no Service's ClusterIP here"),
    (COREFILE % "MCSDNS_SERVICE_IP", "forwards to MCSDNS_SERVICE_IP: replace it"),
])
def test_coredns_without_a_forward_to_mcsdns(healthy: tuple[Cluster, Cluster], corefile: str,
                                             want: str) -> None:
    a, b = healthy
    configmap(b, "coredns", corefile)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("coredns", "b", "")}, fails(report)
    assert want in statuses(report, "coredns")["b"][1]


def test_coredns_forwarding_to_mcsdns_with_no_ready_endpoint(clusters2: list[Cluster]) -> None:
    a, b = clusters2
    shop(a, clusters2, db=False)
    installed(a)
    configmap(b, "coredns", COREFILE % mcsdns_service(b, ready=False))
    sync(a, b)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("coredns", "b", "")}, fails(report)
    assert "which has no ready endpoint: is mcsdns running?" in statuses(report, "coredns")["b"][1]


NODELOCAL = """cluster.local:53 {
    forward . __PILLAR__CLUSTER__DNS__ {
        force_tcp
    }
}
.:53 {
    forward . __PILLAR__UPSTREAM__SERVERS__
}
"""


def test_nodelocal_dns_needs_its_own_block(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    configmap(b, "node-local-dns", NODELOCAL)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("node-local-dns", "b", "")}, fails(report)
    assert "deploy/coredns/nodelocaldns.snippet" in statuses(report, "node-local-dns")["b"][1]
    ip = b.kube.get("/api/v1/namespaces/mcsdns-system/services/mcsdns")["spec"]["clusterIP"]  # type: ignore[index]
    for target in (ip, "__PILLAR__CLUSTER__DNS__"):
        configmap(b, "node-local-dns", NODELOCAL + "clusterset.local:53 {\n    bind 169.254.20.10\n"
                  f"    forward . {target} {{\n        force_tcp\n    }}\n}}\n")
        rc, report = diagnose(*clusterset(a, b))
        assert rc == 0 and statuses(report, "node-local-dns")["b"][0] == "OK", report


def test_reads_the_role_does_not_need_warn_once(healthy: tuple[Cluster, Cluster]) -> None:
    """`mcsdns serve`'s identity may not list Services or Namespaces, by design: one WARN."""
    a, b = healthy
    for plural in ("services", "namespaces"):
        b.api.deny(plural, ("list",))
    rc, report = diagnose("--kubeconfig", str(b.kubeconfig))
    assert rc == 0 and not fails(report), fails(report)
    st, msg = statuses(report, "read")["cluster"]
    assert st == "WARN" and "may not list namespaces, services (mcsdns serve does not need to)" in msg, msg
