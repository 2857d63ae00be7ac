"""`mcsdns serve --kubeconfig` against a real kube-apiserver: what the real server does
differently from tests/fakeapi/ (TLS, managedFields and full metadata on every object,
resourceVersion=0 lists from its watch cache, its own watch and bookmark timing) must not
change what is answered.

Needs a real control plane: MCSDNS_REALK8S names realk8s.sh (etcd and kubectl on PATH);
skips otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dns.rcode
import pytest
from support.helpers import Server, run_server, wait_for
from support.realk8s import RealK8s

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import NotFound

NS = "realsrc"
SI = f"/apis/multicluster.x-k8s.io/v1beta1/namespaces/{NS}/serviceimports"
ES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"


@pytest.fixture
def kubeconfig(real_k8s: RealK8s) -> Path:
    """The admin kubeconfig of the session's real control plane (skips without one)."""
    return real_k8s.kubeconfig


def service_import(name: str, typ: str, ips: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": typ, "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}
    if ips:
        spec["ips"] = ips
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def endpoint_slice(service: str, name: str, addrs: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NS, "labels": {
                "multicluster.kubernetes.io/service-name": service,
                "multicluster.kubernetes.io/source-cluster": "cluster-a"}},
            "addressType": "IPv4", "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addrs]}


def addresses(srv: Server, name: str) -> set[str] | None:
    r = srv.query(f"{name}.{NS}.svc.clusterset.local", "A")
    return {str(rd) for rr in r.answer for rd in rr} if r.rcode() == dns.rcode.NOERROR else None


def test_serves_what_the_real_api_server_holds(kubeconfig: Path, tmp_path: Path) -> None:
    api = Client.load(str(kubeconfig), None)
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NS}})
    api.request("POST", SI, service_import("web", "ClusterSetIP", ["10.96.7.7"]))
    api.request("POST", SI, service_import("db", "Headless"))
    api.request("POST", ES, endpoint_slice("db", "db-a", ["10.1.0.1", "10.1.0.2"]))
    # what the test API server never sends: managedFields on every listed object
    listed = api.get(ES, {"resourceVersion": "0"})["items"]
    assert listed and all(o["metadata"].get("managedFields") for o in listed)
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path, timeout=60.0) as srv:
        assert srv.http("/ready")[0] == 200
        assert addresses(srv, "web") == {"10.96.7.7"}
        assert addresses(srv, "db") == {"10.1.0.1", "10.1.0.2"}
        assert addresses(srv, "nope") is None  # NXDOMAIN
        # watched changes: a new slice, a new service, a deletion
        api.request("POST", ES, endpoint_slice("db", "db-b", ["10.1.0.3"]))
        api.request("POST", SI, service_import("api", "ClusterSetIP", ["10.96.8.8"]))
        api.request("DELETE", f"{SI}/web")
        assert wait_for(lambda: addresses(srv, "db") == {"10.1.0.1", "10.1.0.2", "10.1.0.3"})
        assert wait_for(lambda: addresses(srv, "api") == {"10.96.8.8"})
        assert wait_for(lambda: addresses(srv, "web") is None)
        assert srv.http("/ready")[0] == 200
    with pytest.raises(NotFound):
        api.get(f"{SI}/web")
    api.close()
