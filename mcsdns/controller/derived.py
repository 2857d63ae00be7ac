"""Derived Services' names: the routable ClusterSetIP of a ServiceImport, as in the mcs-api
reference (the kind is `kinds.service.DerivedService`, the mode `clustersetip.Derived`).

In every importing cluster, a ClusterSetIP ServiceImport gets a selectorless
ClusterIP Service named `derived-<hash>` in its namespace, with the merged
ports, owned by the ServiceImport; the imported EndpointSlices carry
`kubernetes.io/service-name: derived-<hash>`, so kube-proxy load-balances the
Service's ClusterIP over every cluster's endpoints. The ServiceImport's `ips`
are that Service's ClusterIPs.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from ..kube.apiclient.keys import Key

DERIVED_ANNOTATION = "multicluster.kubernetes.io/derived-service"


def derived_name(key: Key) -> str:
    """`derived-` + the first 10 characters of base32hex(sha256("namespace/name")), lower case."""
    digest = hashlib.sha256(f"{key[0]}/{key[1]}".encode()).digest()
    return "derived-" + base64.b32hexencode(digest).decode().rstrip("=").lower()[:10]


def cluster_ips(svc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(ClusterIPs, ipFamilies) of a Service; empty while none is allocated."""
    spec = svc.get("spec") or {}
    ips = [ip for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
           if ip and ip != "None"]
    fams = list(spec.get("ipFamilies") or [])[:len(ips)]
    if len(fams) != len(ips):
        fams = ["IPv6" if ":" in ip else "IPv4" for ip in ips]
    return ips, fams
