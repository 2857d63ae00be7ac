"""The locality set-up on real control planes that kube-proxy routes through (three members
a, b, c; shop/web PreferSameZone; b-1 the node kube-proxy runs as): objects, readiness flips,
the hints written."""

from __future__ import annotations

from typing import Any

from mcsdns.controller.locality import ZONE_LABEL
from support.realk8s import RealK8s

Obj = dict[str, Any]
NODES = {"a": {"a-1": "z1"}, "b": {"b-1": "z1", "b-2": "z2"}, "c": {"c-1": "zc"}}
NS = "shop"
IDS = {"a": "east", "b": "west", "c": "north"}
ENDPOINTS = {"a": ("10.244.2.1", "z1"), "b": ("10.244.1.1", "z1"), "c": ("10.244.3.1", "zc")}
NODE_IP = "10.0.0.1"  # b-1's InternalIP, in the namespace
SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"


def set_up(name: str, k: RealK8s) -> None:
    """Cluster ID, Nodes, namespace, the Service (PreferSameZone), its slice and its export."""
    k.json("POST", "/apis/about.k8s.io/v1alpha1/clusterproperties", {
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": IDS[name]}})
    for node, zone in NODES[name].items():
        n = k.json("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                            "metadata": {"name": node, "labels": {ZONE_LABEL: zone}}})
        n["status"] = {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}
        k.json("PUT", f"/api/v1/nodes/{node}/status", n)
    k.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    k.json("POST", f"/api/v1/namespaces/{NS}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                 "trafficDistribution": "PreferSameZone"}})
    ip, zone = ENDPOINTS[name]
    k.json("POST", SLICES, node_slice(ip, zone, next(iter(NODES[name])), True))
    k.json("POST", f"/apis/multicluster.x-k8s.io/v1beta1/namespaces/{NS}/serviceexports", {
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": "web", "namespace": NS}})


def set_ready(k: RealK8s, ready: bool) -> None:
    s = k.json("GET", f"{SLICES}/web-src")
    s["endpoints"][0]["conditions"]["ready"] = ready
    k.json("PUT", f"{SLICES}/web-src", s)


def hinted(k: RealK8s) -> bool:
    sel = "multicluster.kubernetes.io/service-name%3Dweb"
    items = k.json("GET", f"{SLICES}?labelSelector={sel}")["items"]
    return len(items) == 3 and all(e.get("hints") for s in items for e in s["endpoints"])


def node_slice(ip: str, zone: str, node: str, ready: bool) -> Obj:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-src", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "zone": zone, "nodeName": node,
                           "conditions": {"ready": ready}}]}
