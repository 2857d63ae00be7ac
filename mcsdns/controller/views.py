"""Normalised views of the objects the controller writes: what is compared between the
desired object and the cached one, so that only real differences are written."""

from __future__ import annotations

from typing import Any

from ..kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL
from .exports import APP_MANAGED_BY, MANAGED_BY, SERVICE_NAME, labels
from .merge import PortSpec

SLICE_LABELS = (MANAGED_BY, SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, SERVICE_NAME)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _port(p: dict[str, Any]) -> dict[str, Any]:
    return _drop_none({"name": p.get("name") or "", "protocol": p.get("protocol") or "TCP",
                       "port": p.get("port"), "appProtocol": p.get("appProtocol") or None})


def endpoint_view(e: dict[str, Any]) -> dict[str, Any]:
    cond = _drop_none({k: (e.get("conditions") or {}).get(k) for k in ("ready", "serving", "terminating")})
    return _drop_none({"addresses": list(e.get("addresses") or []), "conditions": cond,
                       "hostname": e.get("hostname") or None, "zone": e.get("zone") or None})


def slice_ports(ports: list[dict[str, Any]], serving: dict[str, PortSpec | None]) -> list[dict[str, Any]]:
    """A source slice's ports named as the merged ports that serve them (kube-proxy matches a slice's
    ports to its Service's by name and protocol); ports none serves are left out."""
    out: list[dict[str, Any]] = []
    for x in ports:
        p = _port(x)
        if p["name"] in serving:
            m = serving[p["name"]]
            if m is None:
                continue
            p = _drop_none({"name": m.name, "protocol": m.protocol, "port": p.get("port"),
                            "appProtocol": m.app_protocol})
        if all(o["name"] != p["name"] for o in out):
            out.append(p)
    return out


def slice_view(s: dict[str, Any]) -> dict[str, Any]:
    lb = labels(s)
    refs = [(r.get("apiVersion"), r.get("kind"), r.get("name"), r.get("uid"))
            for r in (s.get("metadata") or {}).get("ownerReferences") or []]
    return {"labels": {k: lb.get(k) for k in SLICE_LABELS}, "owners": refs,
            "addressType": s.get("addressType"),
            "endpoints": [endpoint_view(e) for e in s.get("endpoints") or []],
            "ports": [_port(p) for p in s.get("ports") or []]}


def import_spec_view(si: dict[str, Any]) -> dict[str, Any]:
    spec = si.get("spec") or {}
    return {"type": spec.get("type"), "ports": [_port(p) for p in spec.get("ports") or []],
            "ips": list(spec.get("ips") or []), "ipFamilies": list(spec.get("ipFamilies") or []),
            "sessionAffinity": spec.get("sessionAffinity") or "None",
            "sessionAffinityConfig": spec.get("sessionAffinityConfig") or None,
            "managed": labels(si).get(APP_MANAGED_BY)}


def import_status_equal(have: dict[str, Any], want: dict[str, Any]) -> bool:
    h, w = have.get("status") or {}, want.get("status") or {}
    clusters = sorted(str(c.get("cluster")) for c in h.get("clusters") or [])
    # A server whose schema lacks endpointSliceObjects prunes it: absent counts as equal.
    eso = h.get("endpointSliceObjects")
    return clusters == [c["cluster"] for c in w.get("clusters") or []] and (
        eso is None or eso == w.get("endpointSliceObjects"))
