"""Real control planes for the controller tests (realk8s.sh, $MCSDNS_REALK8S): two of them as
members (`reals`), their cluster IDs and Services, shop/web exported in one, a process stopped
and resumed, and the addresses a member imported."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mcsdns.kube.apiclient.client import Client
from support.controller_env import Cluster
from support.realk8s import RealK8s

MCS = "multicluster.x-k8s.io/v1beta1"


class Real:
    """One realk8s control plane (tests/support/realk8s.py) and a client of it."""

    def __init__(self, k8s: RealK8s) -> None:
        self.k8s = k8s
        self.kubeconfig = str(self.k8s.kubeconfig)
        self.client = Client.load(self.kubeconfig, None, name=k8s.name)

    def down(self) -> None:
        self.client.close()
        self.k8s.down()

    def create(self, path: str, obj: dict[str, Any]) -> None:
        self.client.request("POST", path, obj)

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self.client.get(path)
            return out
        except Exception:
            return None


def start_fleet(tmp_path: Path, names: list[str]) -> list[Real]:
    """Control planes `names`, started at once."""
    return [Real(k) for k in RealK8s.up_many(names, tmp_path / "realk8s")]


@pytest.fixture
def reals(tmp_path: Path) -> Iterator[list[Real]]:
    out = start_fleet(tmp_path, [f"mcsdns-test-{os.getpid()}-{name}" for name in ("a", "b")])
    try:
        yield out
    finally:
        for r in out:
            r.down()


def clusters(a: Real, b: Real) -> None:
    """Cluster IDs a and b, namespace ns in both."""
    for r, cid in ((a, "a"), (b, "b")):
        r.create("/apis/about.k8s.io/v1alpha1/clusterproperties", {
            "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": cid}})
        r.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})


def service(r: Real, name: str) -> None:
    """Service ns/`name`, one port (http 80/TCP)."""
    r.create("/api/v1/namespaces/ns/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "ns"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})


@contextmanager
def stopped(pid: int) -> Iterator[float]:
    """The process SIGSTOPped (yields the time.time() of the signal), SIGCONTed at the end."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.time()
    finally:
        os.kill(pid, signal.SIGCONT)


def populate(c: RealK8s, cluster_id: str = "north", ip: str = "10.3.0.1") -> None:
    """Cluster ID north; shop/web exported with endpoint 10.3.0.1 (or those given)."""
    c.json("POST", "/apis/about.k8s.io/v1alpha1/clusterproperties", {
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": cluster_id}})
    c.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "shop"}})
    c.json("POST", "/api/v1/namespaces/shop/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    c.json("POST", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]})
    c.json("POST", f"/apis/{MCS}/namespaces/shop/serviceexports", {
        "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": "web", "namespace": "shop"}})


def addresses(cl: Cluster | RealK8s) -> set[str]:
    """The endpoint addresses of shop/web's imported slices in a member."""
    path = ("/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices"
            "?labelSelector=multicluster.kubernetes.io%2Fservice-name%3Dweb")
    items = (cl.kube.items(path.split("?")[0], "multicluster.kubernetes.io/service-name=web")
             if isinstance(cl, Cluster) else cl.json("GET", path)["items"])
    return {ip for s in items for e in s.get("endpoints") or [] for ip in e["addresses"]}
