"""The objects the Kubernetes-source tests put into the fake API server (a ServiceImport, an
EndpointSlice, the example clusterset's), the names they define, and what a server answers."""

from __future__ import annotations

from typing import Any

import dns.rcode

from mcsdns.sources.manifest import load_file
from support.helpers import EXAMPLE

Z = "clusterset.local"
MCS = "multicluster.x-k8s.io"
SERVICE = "multicluster.kubernetes.io/service-name"
CLUSTER = "multicluster.kubernetes.io/source-cluster"


def example_objects() -> list[dict[str, Any]]:
    return [o for p in sorted(EXAMPLE.glob("*.yaml")) for o in load_file(p)]


def service_import(name: str, ns: str, ips: list[str], version: str = "v1beta1",
                   typ: str = "ClusterSetIP") -> dict[str, Any]:
    return {"apiVersion": f"{MCS}/{version}", "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": typ, "ips": ips, "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}


def endpoint_slice(name: str, ns: str, svc: str, ips: list[str],
                   cluster: str = "cluster-a") -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns, "labels": {SERVICE: svc, CLUSTER: cluster}},
            "addressType": "IPv4", "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


def addrs(srv: Any, name: str, rdtype: str = "A") -> list[str] | str:
    """The sorted addresses of an A/AAAA answer, or the rcode text when not NOERROR."""
    m = srv.query(name, rdtype)
    if m.rcode() != dns.rcode.NOERROR:
        return dns.rcode.to_text(m.rcode())
    return sorted(str(rd) for rr in m.answer for rd in rr)


def example_names() -> list[tuple[str, str]]:
    """Every name the example objects define (service, SRV, per-endpoint), with the types a client asks."""
    qs: list[tuple[str, str]] = []
    for o in example_objects():
        md = o["metadata"]
        if o["kind"] == "ServiceImport":
            base = f"{md['name']}.{md['namespace']}.svc.{Z}"
            qs += [(base, "A"), (base, "AAAA"), (base, "SRV")]
            qs += [(f"_{p['name']}._{p['protocol'].lower()}.{base}", "SRV")
                   for p in o["spec"]["ports"] if p.get("name")]
        elif o["kind"] == "EndpointSlice":
            svc = f"{md['labels'][SERVICE]}.{md['namespace']}.svc.{Z}"
            qs += [(f"{e['hostname']}.{md['labels'][CLUSTER]}.{svc}", "A") for e in o["endpoints"]
                   if e.get("hostname")]
    return qs

