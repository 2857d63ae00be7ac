"""`mcsdns controller` against two REAL kube-apiservers (etcd + kube-apiserver each, brought up by
realk8s.sh, whose path $MCSDNS_REALK8S names; skipped without it): a first sync gives the importing
member ServiceImports with the ClusterIPs the real server allocated to their derived Services, the
imported EndpointSlices owned by the import, and makes the writes per service that
test_controller_writes counts on the test API server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.controller_checks import DERIVED_WRITES, writes_by_member
from support.controller_env import eventually, run_controller
from support.real_fleet import MCS, Real, clusters, service
from support.realk8s import SKIP_REASON, script

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
N = 3


def populate(a: Real, b: Real) -> None:
    """Cluster IDs a and b, namespace ns in both, N exported services in a."""
    clusters(a, b)
    for i in range(N):
        service(a, f"s{i}")
        a.create("/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"s{i}-x", "namespace": "ns",
                         "labels": {"kubernetes.io/service-name": f"s{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [f"10.9.0.{i + 1}"], "conditions": {"ready": True}}]})
        a.create(f"/apis/{MCS}/namespaces/ns/serviceexports", {
            "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": f"s{i}", "namespace": "ns"}})


def imported(r: Real, i: int) -> dict[str, Any] | None:
    """Service s{i}'s ServiceImport in `r` once it has its ips and status."""
    si = r.get(f"/apis/{MCS}/namespaces/ns/serviceimports/s{i}")
    return si if si and si.get("status") and si["spec"].get("ips") else None


def ready(r: Real, i: int) -> bool:
    """Service s{i}'s ServiceExport in `r` has Ready=True."""
    se = r.get(f"/apis/{MCS}/namespaces/ns/serviceexports/s{i}") or {}
    conds = (se.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def test_first_sync_on_real_apiservers(reals: list[Real], tmp_path: Path) -> None:
    a, b = reals
    populate(a, b)
    args = ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}", "--resync", "600"]
    with run_controller(args, tmp_path) as ctl:
        eventually(ctl.ready, what="first full sync")
        for i in range(N):
            si = eventually(lambda i=i: imported(b, i), what=f"s{i} imported in b")
            assert si["status"]["clusters"] == [{"cluster": "a"}]
            name = si["metadata"]["annotations"]["multicluster.kubernetes.io/derived-service"]
            svc = b.get(f"/api/v1/namespaces/ns/services/{name}")
            assert svc is not None and svc["spec"]["clusterIPs"] == si["spec"]["ips"]  # the real allocator's
            assert [o["uid"] for o in svc["metadata"]["ownerReferences"]] == [si["metadata"]["uid"]]
            slices = b.client.list("/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices",
                                   f"multicluster.kubernetes.io/service-name=s{i}")
            assert [e["addresses"] for s in slices for e in s["endpoints"]] == [[f"10.9.0.{i + 1}"]]
            owners = [o["uid"] for s in slices for o in s["metadata"]["ownerReferences"]]
            assert owners == [si["metadata"]["uid"]]
            eventually(lambda i=i: imported(a, i), what=f"s{i} imported in a")
            eventually(lambda i=i: ready(a, i), what=f"s{i}'s export Ready in a")
        got = writes_by_member(ctl.metrics())
    for name in ("a", "b"):
        want = Counter({k: v * N for k, v in DERIVED_WRITES.items()})
        if name == "a":
            want[("serviceexports/status", "update")] = N
        assert got[name] == want, got
