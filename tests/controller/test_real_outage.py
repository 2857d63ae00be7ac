"""An outage keeps names and ClusterSetIPs, on two REAL kube-apiservers (realk8s.sh, named by
$MCSDNS_REALK8S; skipped without it): member b alone exports a service; b's control plane is
stopped past the endpoint TTL and started again; a keeps the ServiceImport and its derived
Service's ClusterIP (the real allocator's) throughout, and gets b's endpoints back."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.controller_env import eventually, run_controller
from support.real_fleet import MCS, Real, clusters, service
from support.realk8s import SKIP_REASON, RealK8s, script

from mcsdns.kube.apiclient.client import Client

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
SLICES = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices"


def stop(r: Real) -> None:
    """Stop r's etcd and kube-apiserver, keeping their data (an outage)."""
    sh = script()
    assert sh is not None
    r.client.close()
    subprocess.run([sh, "down", r.k8s.name], env=dict(os.environ, REALK8S_HOME=str(r.k8s.home)),
                   capture_output=True, timeout=60, check=True)


def start(r: Real) -> None:
    """Start r's control plane again, with its data, on the same ports."""
    shared, r.k8s = r.k8s.shared, RealK8s.up(r.k8s.name, r.k8s.home)
    r.k8s.shared = shared
    r.client = Client.load(r.kubeconfig, None, name=r.k8s.name)


@pytest.fixture
def pair(reals: list[Real]) -> tuple[Real, Real]:  # noqa: F811 - uses the imported fixture
    return reals[0], reals[1]


def populate(a: Real, b: Real) -> None:
    """Cluster IDs a and b, namespace ns in both; b exports web (one endpoint)."""
    clusters(a, b)
    service(b, "web")
    b.create(SLICES, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.9.0.1"], "conditions": {"ready": True}}]})
    b.create(f"/apis/{MCS}/namespaces/ns/serviceexports", {
        "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": "web", "namespace": "ns"}})


def in_a(a: Real) -> tuple[list[str], list[str], int]:
    """web in a: (the import's ips, its derived Service's ClusterIPs, how many imported endpoints)."""
    si: dict[str, Any] = a.get(f"/apis/{MCS}/namespaces/ns/serviceimports/web") or {}
    ann = (si.get("metadata") or {}).get("annotations") or {}
    name = ann.get("multicluster.kubernetes.io/derived-service")
    svc = a.get(f"/api/v1/namespaces/ns/services/{name}") if name else None
    slices = a.client.list(SLICES, "multicluster.kubernetes.io/service-name=web")
    return (list((si.get("spec") or {}).get("ips") or []), list(((svc or {}).get("spec") or {}).get(
        "clusterIPs") or []), sum(len(s.get("endpoints") or []) for s in slices))


def test_an_outage_past_the_ttl_keeps_the_import_and_its_clustersetip(pair: tuple[Real, Real],
                                                                       tmp_path: Path) -> None:
    a, b = pair
    populate(a, b)
    args = ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}", "--endpoint-ttl", "3",
            "--resync", "600"]
    with run_controller(args, tmp_path) as ctl:
        ips, cluster_ips, n = eventually(lambda: (lambda t: t if t[0] and t[2] == 1 else None)(in_a(a)),
                                         what="web imported in a with b's endpoint")
        assert ips == cluster_ips
        stop(b)
        eventually(lambda: in_a(a)[2] == 0, what="b's endpoint gone from a after the TTL")
        ctl.logged("(endpoint TTL 3s): dropping its endpoints")
        assert in_a(a)[:2] == (ips, cluster_ips)  # the import and its ClusterSetIP stay
        start(b)
        eventually(lambda: in_a(a)[2] == 1, what="b's endpoint back in a")
        assert in_a(a)[:2] == (ips, cluster_ips)  # the same ClusterSetIP after its return
