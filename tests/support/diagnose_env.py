"""What a healthy cluster has besides the MCS objects, for `mcsdns diagnose` tests: an
mcsdns Service with a ready endpoint, CoreDNS forwarding the zone to it, and a controller
keeping its Lease fresh; then `mcsdns diagnose` run on members synced by the controller, and
its report read (`diagnose`, `fails`, `statuses`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.controller_env import SLICES, Cluster, shop
from support.helpers import REPO

Report = dict[str, Any]
NS = "mcsdns-system"
COREFILE = """.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa
    forward . /etc/resolv.conf
}
clusterset.local:53 {
    errors
    cache 5
    forward . %s
}
"""


def stamp(ago: float = 0.0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - ago))


def mcsdns_service(c: Cluster, ready: bool = True) -> str:
    """The mcsdns Service in mcsdns-system with one endpoint; its ClusterIP."""
    if c.kube.get(f"/api/v1/namespaces/{NS}") is None:
        c.kube.namespace(NS)
    c.kube.service(NS, "mcsdns", ports=(("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")))  # deploy/server's
    c.kube.endpoints(NS, "mcsdns", "mcsdns-abc", [("10.244.0.53", None)], port=("dns", 53))
    if not ready:
        sl = c.kube.get(f"{SLICES}/namespaces/{NS}/endpointslices/mcsdns-abc")
        assert sl is not None
        sl["endpoints"][0]["conditions"]["ready"] = False
        c.kube.m.request("PUT", f"{SLICES}/namespaces/{NS}/endpointslices/mcsdns-abc", body=sl)
    svc = c.kube.get(f"/api/v1/namespaces/{NS}/services/mcsdns")
    assert svc is not None
    return str(svc["spec"]["clusterIP"])


def configmap(c: Cluster, name: str, corefile: str) -> None:
    meta = {"name": name, "namespace": "kube-system"}
    c.api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": corefile}})


def lease(c: Cluster, ago: float = 0.0, name: str = "mcsdns-controller", duration: int = 15) -> None:
    """The controller's Lease, renewed `ago` seconds ago."""
    c.api.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"holderIdentity": "mcsdns-controller-7d9f-x2", "leaseDurationSeconds": duration,
                        "acquireTime": stamp(ago + 60), "renewTime": stamp(ago)}})


def pod(c: Cluster, name: str, phase: str = "Running", ready: bool = True, waiting: str = "") -> None:
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}
    if waiting:
        status["containerStatuses"] = [{"name": "controller", "state": {"waiting": {"reason": waiting}}}]
    c.api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS,
        "labels": {"app.kubernetes.io/name": "mcsdns", "app.kubernetes.io/component": "controller"}},
        "spec": {"containers": [{"name": "controller", "image": "mcsdns"}]}, "status": status})


def installed(*clusters: Cluster) -> None:
    """mcsdns and CoreDNS's forward in each cluster, the controller's Lease in the first."""
    for c in clusters:
        configmap(c, "coredns", COREFILE % mcsdns_service(c))
    lease(clusters[0])


def diagnose(*args: str) -> tuple[int, Report]:
    out = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", "--output", "json", *args],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode in (0, 1), out.stderr
    report: Report = json.loads(out.stdout)
    return out.returncode, report


def clusterset(a: Cluster, b: Cluster) -> list[str]:
    return ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}"]


def fails(report: Report) -> set[tuple[str, str, str]]:
    """(check, cluster, subject) of every FAIL."""
    return {(r["check"], r["cluster"], r["subject"]) for r in report["results"] if r["status"] == "FAIL"}


def sync(a: Cluster, b: Cluster) -> None:
    """One pass of the real controller (derived mode) over both members."""
    cmd = [sys.executable, "-m", "mcsdns.controller", *clusterset(a, b), "--once"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr


def statuses(report: Report, check: str) -> dict[str, tuple[str, str]]:
    """cluster -> (status, message) of `check`."""
    return {r["cluster"]: (r["status"], r["message"]) for r in report["results"] if r["check"] == check}


@pytest.fixture
def healthy(clusters2: list[Cluster]) -> Iterator[tuple[Cluster, Cluster]]:
    a, b = clusters2
    shop(a, clusters2, db=False)
    installed(a, b)
    sync(a, b)
    yield a, b


def sync3(cs: list[Cluster]) -> None:
    cmd = [sys.executable, "-m", "mcsdns.controller", *(f"--cluster={c.name}={c.kubeconfig}" for c in cs),
           "--once"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr


def members_dir(tmp: Path, *cs: Cluster) -> Path:
    """A members folder as the controller mounts it: one kubeconfig per member, named by it."""
    d = tmp / "members"
    d.mkdir(exist_ok=True)
    for c in cs:
        shutil.copy(c.kubeconfig, d / c.name)
    return d


def stale_slice(c: Cluster, source: str) -> None:
    """An imported slice of shop/web (ours, endpoint 10.3.0.1) from `source`, named web-gone."""
    c.kube.create(f"{SLICES}/namespaces/shop/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-gone", "namespace": "shop", "labels": {
            "endpointslice.kubernetes.io/managed-by": "mcsdns-controller",
            "multicluster.kubernetes.io/service-name": "web",
            "multicluster.kubernetes.io/source-cluster": source}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.3.0.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
