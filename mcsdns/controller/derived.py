"""Derived Services: the routable ClusterSetIP of a ServiceImport, as in the mcs-api reference.

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
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from ..kube.keys import Key
from ..kube.names import SERVICE_NAME_LABEL
from .exports import APP_MANAGED_BY, CONTROLLER, labels
from .member import MemberView
from .merge import Merged
from .writes import create, replace

log = logging.getLogger("mcsdns.controller")

DERIVED_ANNOTATION = "multicluster.kubernetes.io/derived-service"


def derived_name(key: Key) -> str:
    """`derived-` + the first 10 characters of base32hex(sha256("namespace/name")), lower case."""
    digest = hashlib.sha256(f"{key[0]}/{key[1]}".encode()).digest()
    return "derived-" + base64.b32hexencode(digest).decode().rstrip("=").lower()[:10]


def desired_service(key: Key, m: Merged, owner: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "ClusterIP", "sessionAffinity": m.session_affinity,
                            "ports": [p.to_dict() for p in m.ports]}
    if m.session_affinity_config:
        spec["sessionAffinityConfig"] = m.session_affinity_config
    if len(m.ip_families) > 1:
        spec["ipFamilyPolicy"], spec["ipFamilies"] = "PreferDualStack", [m.ip_families[0]]
    elif m.ip_families:
        spec["ipFamilyPolicy"], spec["ipFamilies"] = "SingleStack", list(m.ip_families)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": derived_name(key), "namespace": key[0],
                         "labels": {APP_MANAGED_BY: CONTROLLER, SERVICE_NAME_LABEL: key[1]},
                         "ownerReferences": [owner]},
            "spec": spec}


def _ports(spec: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(p.get("name") or "", p.get("protocol") or "TCP", p.get("port"), p.get("appProtocol") or None)
            for p in spec.get("ports") or []]


def service_view(svc: dict[str, Any]) -> dict[str, Any]:
    """What we compare between a desired and an existing derived Service (not the IPs: immutable)."""
    spec = svc.get("spec") or {}
    lb = labels(svc)
    return {"type": spec.get("type") or "ClusterIP", "ports": _ports(spec),
            "sessionAffinity": spec.get("sessionAffinity") or "None",
            "sessionAffinityConfig": spec.get("sessionAffinityConfig") or None,
            "selector": spec.get("selector") or None,
            "labels": (lb.get(APP_MANAGED_BY), lb.get(SERVICE_NAME_LABEL)),
            "owners": [(r.get("kind"), r.get("name"), r.get("uid"))
                       for r in (svc.get("metadata") or {}).get("ownerReferences") or []]}


def cluster_ips(svc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(ClusterIPs, ipFamilies) of a Service; empty while none is allocated."""
    spec = svc.get("spec") or {}
    ips = [ip for ip in spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
           if ip and ip != "None"]
    fams = list(spec.get("ipFamilies") or [])[:len(ips)]
    if len(fams) != len(ips):
        fams = ["IPv6" if ":" in ip else "IPv4" for ip in ips]
    return ips, fams


def put_derived(mc: MemberView, k: Key, m: Merged, si: dict[str, Any],
                 have: dict[str, Any] | None) -> dict[str, Any]:
    owner = {"apiVersion": mc.member.mcs_api_version(), "kind": "ServiceImport", "name": k[1],
             "uid": (si.get("metadata") or {}).get("uid"), "controller": True,
             "blockOwnerDeletion": False}
    want = desired_service(k, m, owner)
    name, path = derived_name(k), f"/api/v1/namespaces/{k[0]}/services"
    if have is None:
        log.info("cluster %s: create Service %s/%s for ServiceImport %s", mc.member.name, k[0], name,
                 k[1])
        try:
            return create(mc, "services", path, want)
        except ApiException as e:
            if e.status != 422 or "ipFamilies" not in want["spec"]:
                raise
            # the exporters' IP family is not configured here: take this cluster's default
            log.warning("cluster %s: Service %s/%s with ipFamilies %s rejected (%s); creating it with "
                        "the cluster's default IP family", mc.member.name, k[0], name,
                        want["spec"]["ipFamilies"], e.reason)
            want["spec"].pop("ipFamilies")
            want["spec"].pop("ipFamilyPolicy", None)
            return create(mc, "services", path, want)
    if service_view(have) == service_view(want):
        return have
    log.info("cluster %s: update Service %s/%s", mc.member.name, k[0], name)
    spec = dict(have.get("spec") or {})
    spec.pop("selector", None)
    spec.pop("sessionAffinityConfig", None)
    spec.update({f: v for f, v in want["spec"].items() if f not in ("ipFamilies", "ipFamilyPolicy")})
    md = dict(have["metadata"], labels=dict(labels(have), **want["metadata"]["labels"]),
              ownerReferences=want["metadata"]["ownerReferences"])
    body = dict(have, apiVersion="v1", kind="Service", metadata=md, spec=spec)
    return replace(mc, "services", f"{path}/{name}", body)
