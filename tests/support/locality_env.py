"""The three-cluster locality set-up of the controller tests (shop/web, `trafficDistribution:
PreferSameZone`): nodes and zones per member, endpoints, and the hints the controller writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.controller_checks import slices_of
from support.controller_env import Cluster

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
ELSEWHERE = ["mcsdns-elsewhere"]
# cluster name -> its endpoints of ns/web: (address, zone, node)
ENDPOINTS: dict[str, list[tuple[str, str | None, str]]] = {
             "a": [("10.1.0.1", "z1", "a-1")],
             "b": [("10.2.0.1", "z1", "b-1"), ("10.2.0.2", "z2", "b-2")],
             "c": [("10.3.0.1", "zc", "c-1")]}
NODES: dict[str, dict[str, str | None]] = {
    "a": {"a-1": "z1"}, "b": {"b-1": "z1", "b-2": "z2", "b-3": "z3"}, "c": {"c-1": None}}
B_HINTS = {"10.2.0.1": {"forZones": ["z1", "z3"]}, "10.2.0.2": {"forZones": ["z2", "z3"]},
           "10.1.0.1": {"forZones": ELSEWHERE}, "10.3.0.1": {"forZones": ELSEWHERE}}


def node(name: str, zone: str | None) -> Obj:
    md: Obj = {"name": name}
    if zone is not None:
        md["labels"] = {ZONE: zone, "kubernetes.io/hostname": name}
    return {"apiVersion": "v1", "kind": "Node", "metadata": md}


def service(name: str, td: str | None) -> Obj:
    spec: Obj = {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    if td:
        spec["trafficDistribution"] = td
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"},
            "spec": spec}


def source(name: str, eps: Sequence[tuple[str, str | None, str]], ready: dict[str, bool] | None = None,
           host: str | None = None) -> Obj:
    """The Service's own slice, zone and nodeName set (and hints of its own, which are not copied)."""
    out = []
    for ip, zone, n in eps:
        e: Obj = {"addresses": [ip], "conditions": {"ready": (ready or {}).get(ip, True)}, "nodeName": n,
                  "hints": {"forZones": [{"name": zone or "x"}]}}
        if zone:
            e["zone"] = zone
        if host:
            e["hostname"] = host
        out.append(e)
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{name}-src", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": out}


def export(name: str) -> Obj:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": "shop"}}


def hints(cl: Cluster, name: str = "web") -> dict[str, Obj | None]:
    """Address -> its hints as written (forZones/forNodes names) in member `cl`."""
    out: dict[str, Obj | None] = {}
    for s in slices_of(cl, "shop", name):
        for e in s.get("endpoints") or []:
            h = e.get("hints")
            out[e["addresses"][0]] = None if h is None else {
                f: [x["name"] for x in h[f]] for f in ("forZones", "forNodes") if h.get(f)}
    return out


