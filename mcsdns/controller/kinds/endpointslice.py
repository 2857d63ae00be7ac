"""Imported EndpointSlices: one per source slice per exporting cluster, in every importing member."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from ...kube.apiclient.keys import Key, key_of
from ...kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL
from ...kube.resources import ENDPOINT_SLICES
from ..contract import PORT_READS, Contract, Kind, Obj, Reads, Target, drop_none, port_view
from ..engine import Engine
from ..exports import CONTROLLER, MANAGED_BY, SERVICE_NAME, labels
from ..locality import Plan, Verdicts, plan
from ..member.client import MemberClient
from ..merge import CLUSTERSET_IP, PortSpec

LABELS = (MANAGED_BY, SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, SERVICE_NAME)  # ours, in the view
CONDITIONS = ("ready", "serving", "terminating")
ENDPOINT_READS = ("addresses", "hostname", "zone", "nodeName", *(f"conditions.{c}" for c in CONDITIONS))


def slice_name(service: str, cluster: str, source_slice: str) -> str:
    digest = hashlib.sha256(f"{cluster}/{source_slice}".encode()).hexdigest()[:10]
    return f"{service[:200]}-{digest}"


def endpoint_copy(e: dict[str, Any], hints: dict[str, Any] | None = None) -> dict[str, Any]:
    """What an imported endpoint carries of a source endpoint (never its hints), and ours."""
    cond = drop_none({k: (e.get("conditions") or {}).get(k) for k in CONDITIONS})
    return drop_none({"addresses": list(e.get("addresses") or []), "conditions": cond,
                      "hostname": e.get("hostname") or None, "zone": e.get("zone") or None, "hints": hints})


def hints_view(h: Any) -> dict[str, list[str]] | None:
    """Hints as compared: the zone and node names, in order."""
    if not isinstance(h, dict):
        return None
    out = {f: sorted(str(x.get("name")) for x in h.get(f) or [] if isinstance(x, dict))
           for f in ("forZones", "forNodes")}
    return {f: v for f, v in out.items() if v} or None


def endpoint_view(e: dict[str, Any]) -> dict[str, Any]:
    """An endpoint of ours as compared, its hints included."""
    return endpoint_copy(e, hints_view(e.get("hints")))


def slice_ports(ports: list[dict[str, Any]], serving: dict[str, PortSpec | None]) -> list[dict[str, Any]]:
    """A source slice's ports named as the merged ports that serve them (kube-proxy matches a slice's
    ports to its Service's by name and protocol); ports none serves are left out."""
    out: list[dict[str, Any]] = []
    for x in ports:
        p = port_view(x)
        if p["name"] in serving:
            m = serving[p["name"]]
            if m is None:
                continue
            p = drop_none({"name": m.name, "protocol": m.protocol, "port": p.get("port"),
                           "appProtocol": m.app_protocol})
        if all(o["name"] != p["name"] for o in out):
            out.append(p)
    return out


class EndpointSlices(Contract):
    """Our copies of every exporting cluster's slices of the service, owned by the ServiceImport."""

    kind = Kind.ENDPOINT_SLICE
    api = ENDPOINT_SLICES
    # of a Service's own slices: what `desired_one` copies
    reads: ClassVar[Reads] = {"endpointslices": (
        "addressType", *(f"endpoints.{f}" for f in ENDPOINT_READS), *(f"ports.{f}" for f in PORT_READS))}

    unviewed = (*Contract.unviewed, "metadata.ownerReferences.controller")

    def __init__(self) -> None:
        self.verdicts = Verdicts()  # each member's locality verdict per service

    def desired_one(self, m: MemberClient, key: Key, t: Target, cluster: str, src: Obj,
                    serving: dict[str, PortSpec | None], p: Plan) -> Obj:
        name = slice_name(key[1], cluster, key_of(src)[1])
        uid = ((t.service_import or {}).get("metadata") or {}).get("uid")
        owner = {"apiVersion": m.mcs_api_version(), "kind": "ServiceImport", "name": key[1],
                 "uid": uid, "controller": False}
        lb = {MANAGED_BY: CONTROLLER, SERVICE_NAME_LABEL: key[1], SOURCE_CLUSTER_LABEL: cluster,
              **t.slice_labels}
        return {"apiVersion": ENDPOINT_SLICES.api_version(), "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": key[0], "labels": lb, "ownerReferences": [owner]},
                "addressType": src.get("addressType") or "IPv4",
                "endpoints": [endpoint_copy(e, p.hints(cluster, e)) for e in src.get("endpoints") or []],
                "ports": slice_ports(src.get("ports") or [], serving)}

    def desired(self, m: MemberClient, key: Key, t: Target, p: Plan | None = None) -> dict[Key, Obj]:
        out: dict[Key, Obj] = {}
        for ex in t.exports:
            if ex.export is None:
                continue
            for s in ex.slices:
                d = self.desired_one(m, key, t, ex.export.cluster, s, ex.serving, p or Plan(asked=False))
                out[key_of(d)] = d
        return out

    def plan(self, eng: Engine, t: Target) -> Plan:
        """The member's locality hints for the service (`locality`), its verdict noted."""
        own = eng.mc.member.cluster_id or ""
        td = t.merged.traffic_distribution if t.merged.type == CLUSTERSET_IP else None
        mine = [ex.slices for ex in t.exports if ex.export is not None and ex.export.cluster == own]
        p = plan(td, own, eng.mc.zones(), mine[0] if mine else None)
        self.verdicts.note(eng.mc.member.name, eng.key, p)
        return p

    def view(self, obj: Obj) -> dict[str, Any]:
        lb = labels(obj)
        refs = [(r.get("apiVersion"), r.get("kind"), r.get("name"), r.get("uid"))
                for r in (obj.get("metadata") or {}).get("ownerReferences") or []]
        return {"labels": {k: lb.get(k) for k in LABELS}, "owners": refs,
                "addressType": obj.get("addressType"),
                "endpoints": [endpoint_view(e) for e in obj.get("endpoints") or []],
                "ports": [port_view(p) for p in obj.get("ports") or []]}

    def merge(self, have: Obj, want: Obj) -> Obj:
        lb = dict({k: v for k, v in labels(have).items() if k not in LABELS}, **labels(want))
        return dict(want, metadata=dict(have["metadata"], labels=lb,
                                        ownerReferences=want["metadata"]["ownerReferences"]))

    def ours(self, obj: Obj) -> bool:
        return labels(obj).get(MANAGED_BY) == CONTROLLER

    # --- steps of a member's sync ------------------------------------------------------
    def existing(self, eng: Engine) -> dict[Key, Obj]:
        return {key_of(s): s for s in eng.mc.our_slices(eng.key) if self.ours(s)}

    def sync(self, eng: Engine, t: Target) -> bool:
        eng.sync(self, self.desired(eng.mc.member, eng.key, t, self.plan(eng, t)), self.existing(eng))
        return True

    def remove(self, eng: Engine) -> None:
        self.verdicts.note(eng.mc.member.name, eng.key, None)
        eng.sync(self, {}, self.existing(eng))
