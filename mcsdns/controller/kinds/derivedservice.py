"""Derived Services: the routable ClusterSetIP of a ServiceImport, as in the mcs-api reference
(used in derived mode, the `clustersetip.Derived` strategy): their name, annotation and kind.

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
from typing import Any, ClassVar

from ...kube.apiclient.errors import ApiError
from ...kube.apiclient.keys import Key, key_of
from ...kube.names import SERVICE_NAME_LABEL
from ...kube.resources import SERVICES
from ..contract import Contract, Kind, Obj, Reads, Target, Verb, port_view
from ..engine import Engine
from ..exports import APP_MANAGED_BY, CONTROLLER, labels
from ..member.client import MemberClient

log = logging.getLogger("mcsdns.controller")

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


class DerivedService(Contract):
    """A selectorless ClusterIP Service with the merged ports, owned by the ServiceImport."""

    kind = Kind.SERVICE
    api = SERVICES
    reads: ClassVar[Reads] = {"services": ()}  # of a Service with a derived name: whose it is
    unviewed = (*Contract.unviewed, "spec.ipFamilies", "spec.ipFamilyPolicy",  # set at creation only
                "metadata.ownerReferences.apiVersion", "metadata.ownerReferences.controller",
                "metadata.ownerReferences.blockOwnerDeletion")

    def desired(self, m: MemberClient, key: Key, t: Target) -> dict[Key, Obj]:
        if t.service is None or t.service_import is None:
            return {}
        mg = t.merged
        spec: dict[str, Any] = {"type": "ClusterIP", "sessionAffinity": mg.session_affinity,
                                "ports": [p.to_dict() for p in mg.ports]}
        if mg.session_affinity_config:
            spec["sessionAffinityConfig"] = mg.session_affinity_config
        if mg.traffic_distribution:
            spec["trafficDistribution"] = mg.traffic_distribution
        if len(mg.ip_families) > 1:
            spec["ipFamilyPolicy"], spec["ipFamilies"] = "PreferDualStack", [mg.ip_families[0]]
        elif mg.ip_families:
            spec["ipFamilyPolicy"], spec["ipFamilies"] = "SingleStack", list(mg.ip_families)
        owner = {"apiVersion": m.mcs_api_version(), "kind": "ServiceImport", "name": key[1],
                 "uid": (t.service_import.get("metadata") or {}).get("uid"), "controller": True,
                 "blockOwnerDeletion": False}
        return {(key[0], t.service): {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": t.service, "namespace": key[0],
                         "labels": {APP_MANAGED_BY: CONTROLLER, SERVICE_NAME_LABEL: key[1]},
                         "ownerReferences": [owner]},
            "spec": spec}}

    def view(self, obj: Obj) -> dict[str, Any]:
        """Not the IPs: they are immutable."""
        spec = obj.get("spec") or {}
        lb = labels(obj)
        return {"type": spec.get("type") or "ClusterIP",
                "ports": [port_view(p) for p in spec.get("ports") or []],
                "sessionAffinity": spec.get("sessionAffinity") or "None",
                "sessionAffinityConfig": spec.get("sessionAffinityConfig") or None,
                "selector": spec.get("selector") or None,
                "trafficDistribution": spec.get("trafficDistribution") or None,
                "labels": (lb.get(APP_MANAGED_BY), lb.get(SERVICE_NAME_LABEL)),
                "owners": [(r.get("kind"), r.get("name"), r.get("uid"))
                           for r in (obj.get("metadata") or {}).get("ownerReferences") or []]}

    def merge(self, have: Obj, want: Obj) -> Obj:
        spec = dict(have.get("spec") or {})
        spec.pop("selector", None)
        spec.pop("sessionAffinityConfig", None)
        spec.pop("trafficDistribution", None)
        spec.update({f: v for f, v in want["spec"].items() if f not in ("ipFamilies", "ipFamilyPolicy")})
        md = dict(have["metadata"], labels=dict(labels(have), **want["metadata"]["labels"]),
                  ownerReferences=want["metadata"]["ownerReferences"])
        return dict(have, apiVersion="v1", kind="Service", metadata=md, spec=spec)

    def describe(self, key: Key, k: Key, verb: Verb) -> str:
        return f"{k[0]}/{k[1]}" + (f" for ServiceImport {key[1]}" if verb is Verb.CREATE else "")

    def rejected(self, member: str, want: Obj, e: Exception) -> Obj | None:
        """The exporters' IP family is not configured here: take this cluster's default."""
        spec = want["spec"]
        if not isinstance(e, ApiError) or e.status != 422 or "ipFamilies" not in spec:
            return None
        log.warning("cluster %s: Service %s/%s with ipFamilies %s rejected (%s); creating it with "
                    "the cluster's default IP family", member, want["metadata"]["namespace"],
                    want["metadata"]["name"], spec["ipFamilies"], e.reason)
        spec = {f: v for f, v in spec.items() if f not in ("ipFamilies", "ipFamilyPolicy")}
        return dict(want, spec=spec)

    # --- steps of a member's sync ------------------------------------------------------
    def existing(self, eng: Engine, t: Target | None) -> dict[Key, Obj]:
        have = {key_of(s): s for s in eng.mc.our_services(eng.key)}
        if t is not None and t.service is not None:
            svc = eng.mc.service((eng.key[0], t.service))
            if svc is not None:
                have[key_of(svc)] = svc
        return have

    def claim(self, eng: Engine, t: Target) -> bool:
        """Someone else's Service with the derived name: no ClusterSetIP here (not a stop)."""
        if t.blocked is not None:
            name = key_of(t.blocked)[1]
            eng.foreign(f"Service {name} in cluster {eng.mc.member.cluster_id} exists and is not managed "
                        f"by {CONTROLLER}", "Service %s/%s exists and is not managed by %s; no ClusterSetIP "
                        "for %s there", eng.key[0], name, CONTROLLER, eng.key[1])
        return True

    def sync(self, eng: Engine, t: Target) -> bool:
        """Ours created or updated, any other of ours deleted; its ClusterIPs go to the import."""
        out = eng.sync(self, self.desired(eng.mc.member, eng.key, t), self.existing(eng, t))
        for svc in out.values():
            if svc is not None and cluster_ips(svc)[0]:
                t.ips = cluster_ips(svc)
        return True

    def remove(self, eng: Engine) -> None:
        eng.sync(self, {}, self.existing(eng, None))
