"""What the fault suite's checker sees of one member, and what it expects there.

Independent of the controller: plain HTTP reads (tests/realk8s.py) and the KEP-1645 rules as
docs/controller.md states them, restated here on purpose (a checker that shared the
controller's code would share its bugs):

- a member's export of s is valid when its ServiceExport s and its Service s exist;
- every member imports every service some member validly exports (the members it cannot
  read count with what was last read of them: an outage keeps names, docs "Outages");
- a member holds one imported slice per source slice of each readable exporter, with the
  same addresses, labelled with the exporter's cluster ID; none for a cluster that does not
  export the service (orphan slice), no import no one exports (orphan import), no derived
  Service without its import;
- an import has ips, the derived Service's ClusterIPs where it names one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from robustness.fault_cluster import EPS, MCS, NS, Member

OUR_APP = ("app.kubernetes.io/managed-by", "mcsdns-controller")
OUR_SLICE = ("endpointslice.kubernetes.io/managed-by", "mcsdns-controller")
SVC_LABEL = "multicluster.kubernetes.io/service-name"
SRC_LABEL = "multicluster.kubernetes.io/source-cluster"
DERIVED = "multicluster.kubernetes.io/derived-service"
PROBE_TIMEOUT = 2.0

Addrs = frozenset[str]


@dataclass
class View:
    """One member's objects in NS as read at one moment."""

    exports: set[str] = field(default_factory=set)
    services: set[str] = field(default_factory=set)
    sources: dict[str, list[Addrs]] = field(default_factory=dict)  # service -> addresses per own slice
    imports: dict[str, tuple[str, ...]] = field(default_factory=dict)  # our ServiceImport -> spec.ips
    import_derived: dict[str, str] = field(default_factory=dict)  # service -> derived Service named
    derived: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # Service -> (svc, IPs)
    imported: dict[str, list[tuple[str, Addrs]]] = field(default_factory=dict)  # svc -> (source, addrs)


def _labels(o: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = (o.get("metadata") or {}).get("labels") or {}
    return out


def _items(m: Member, path: str) -> list[dict[str, Any]] | None:
    out = m.send("GET", f"{path}?resourceVersion=0", timeout=PROBE_TIMEOUT + 1)
    if out is None or out[0] != 200:
        return None
    items: list[dict[str, Any]] = json.loads(out[1]).get("items") or []
    return items


def read(m: Member) -> View | None:
    """m's objects, or None when it does not answer a quorum read (GET namespace default,
    PROBE_TIMEOUT) or a list: unreachable (down, hung, partitioned, or without its etcd)."""
    probe = m.send("GET", "/api/v1/namespaces/default", timeout=PROBE_TIMEOUT)
    if probe is None or probe[0] >= 500:
        return None
    lists = [_items(m, p) for p in (f"{MCS}/namespaces/{NS}/serviceexports",
                                    f"/api/v1/namespaces/{NS}/services",
                                    f"{EPS}/namespaces/{NS}/endpointslices",
                                    f"{MCS}/namespaces/{NS}/serviceimports")]
    if any(x is None for x in lists):
        return None
    exports, services, slices, imports = (x or [] for x in lists)
    v = View(exports={o["metadata"]["name"] for o in exports})
    for s in services:
        name, lb = s["metadata"]["name"], _labels(s)
        if lb.get(OUR_APP[0]) == OUR_APP[1]:
            v.derived[name] = (lb.get(SVC_LABEL, ""), tuple(s["spec"].get("clusterIPs") or ()))
        elif s["spec"].get("type", "ClusterIP") == "ClusterIP":
            v.services.add(name)
    for sl in slices:
        lb = _labels(sl)
        addrs = frozenset(a for e in sl.get("endpoints") or [] for a in e.get("addresses") or [])
        if lb.get(OUR_SLICE[0]) == OUR_SLICE[1]:
            v.imported.setdefault(lb.get(SVC_LABEL, ""), []).append((lb.get(SRC_LABEL, ""), addrs))
        elif "kubernetes.io/service-name" in lb:
            v.sources.setdefault(lb["kubernetes.io/service-name"], []).append(addrs)
    for si in imports:
        if _labels(si).get(OUR_APP[0]) == OUR_APP[1]:
            name = si["metadata"]["name"]
            v.imports[name] = tuple((si.get("spec") or {}).get("ips") or ())
            ann = (si["metadata"].get("annotations") or {}).get(DERIVED)
            if ann:
                v.import_derived[name] = ann
    return v


def exporters(views: dict[str, View]) -> dict[str, set[str]]:
    """Service -> cluster IDs that validly export it (views: cluster ID -> last view)."""
    out: dict[str, set[str]] = {}
    for cid, v in views.items():
        for s in v.exports & v.services:
            out.setdefault(s, set()).add(cid)
    return out


def problems(views: dict[str, View], fresh: set[str]) -> set[tuple[str, str, str]]:
    """(kind, member, service) where a member read now (`fresh`) differs from what every
    member's last view says it should hold. Slices of an exporter not read now are not
    compared (its endpoints may stay until the Endpoint TTL, then go)."""
    exp = exporters(views)
    out: set[tuple[str, str, str]] = set()
    for r in fresh:
        v = views[r]
        for s in exp:
            if s not in v.imports:
                out.add(("missing", r, s))
            elif not v.imports[s]:
                out.add(("no-ips", r, s))
        for s, ips in v.imports.items():
            if s not in exp:
                out.add(("orphan-import", r, s))
            d = v.import_derived.get(s)
            if d is not None and ips and (d not in v.derived or v.derived[d][1] != ips):
                out.add(("ips", r, s))
        for name, (s, _) in v.derived.items():
            if s not in v.imports:
                out.add(("orphan-derived", r, name))
        for s in set(v.imported) | set(exp):
            got = v.imported.get(s, [])
            for src, _ in got:
                if src not in exp.get(s, set()):
                    out.add(("orphan-slice", r, s))
            for x in exp.get(s, set()) & fresh:
                want = sorted(sorted(a) for a in views[x].sources.get(s, []))
                if sorted(sorted(a) for src, a in got if src == x) != want:
                    out.add(("slices", r, s))
    return out


def holding(views: dict[str, View], fresh: set[str], source: str) -> int:
    """Imported slices from cluster `source` held by the members read now, `source` aside."""
    return sum(1 for r in fresh if r != source for got in views[r].imported.values() for src, _ in got
               if src == source)
