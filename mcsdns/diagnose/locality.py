"""`mcsdns diagnose` on locality: for each service that sets `trafficDistribution`, whether each
member's imported EndpointSlices should carry locality hints (the controller's own rule,
`controller.locality.plan`, over the member's Nodes and its own endpoints), why not when
they should not, and whether they do. Nodes are read metadata only, as the controller does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..controller.exports import SERVICE_NAME, is_ours, labels, read_export
from ..controller.informers import slice_index
from ..controller.locality import WARNINGS, ZONE_LABEL, NodeZones, Plan, plan
from ..controller.merge import CLUSTERSET_IP, Merged, merge
from ..kube.apiclient.client import METADATA_ONLY, PAGE, Client
from ..kube.apiclient.errors import ApiError
from ..kube.apiclient.keys import Key
from ..kube.resources import NODES
from .checks import OK, WARN, Result
from .collect import Snapshot, why

Obj = dict[str, Any]
Zones = dict[str, NodeZones | str]  # member name -> its Nodes' zones, or why they could not be read


def read_zones(clients: dict[str, Client], snaps: list[Snapshot]) -> Zones:
    """Each member's Nodes' zones, from a metadata-only list."""
    out: Zones = {}
    for s in snaps:
        c, items, query = clients[s.name], list[Obj](), dict[str, Any](limit=PAGE)
        try:
            while True:
                data = json.loads(c.open("GET", NODES.path(), query, accept=METADATA_ONLY[0]).data)
                items += data.get("items") or []
                query["continue"] = (data.get("metadata") or {}).get("continue")
                if not query["continue"]:
                    break
        except ApiError as e:
            out[s.name] = f"cannot read Nodes: {why(e)}"
            continue
        out[s.name] = NodeZones.of(items)
    return out


def merged(snaps: list[Snapshot], key: Key) -> Merged | None:
    """The service as the controller merges it from every member's export."""
    exports = [read_export(s.cluster_id, s.exports[key], s.services.get(key)).export
               for s in snaps if key in s.exports and s.cluster_id]
    valid = [e for e in exports if e is not None]
    return merge(valid) if valid else None


def own_slices(s: Snapshot, key: Key) -> list[Obj] | None:
    """The member's own EndpointSlices of the service, None when it does not export it."""
    if key not in s.exports:
        return None
    return [o for o in s.slices if not is_ours(o) and labels(o).get(SERVICE_NAME) == key[1]
            and (o.get("metadata") or {}).get("namespace") == key[0]]


def hinted(s: Snapshot, key: Key) -> bool:
    """Whether any endpoint of our imported slices of the service carries hints."""
    return any(e.get("hints") for o in s.slices if slice_index(o) == ("ours", *key)
               for e in o.get("endpoints") or [])


def checks(snaps: list[Snapshot], key: Key, zones: Zones) -> Iterator[Result]:
    """One `locality` line per importing member of a service that opts in (or is in conflict)."""
    m = merged(snaps, key)
    if m is None or m.type != CLUSTERSET_IP:
        return
    subject = f"{key[0]}/{key[1]}"
    conflict = [msg for reason, msg in m.conflicts if reason == "TrafficDistributionConflict"]
    if conflict:
        yield Result(WARN, "locality", "", subject, conflict[0])
    if not m.traffic_distribution:
        return
    for s in snaps:
        if key not in s.imports or not s.cluster_id:
            continue
        z = zones.get(s.name)
        if isinstance(z, str):
            yield Result(WARN, "locality", s.name, subject, f"not known: {z}")
            continue
        p = plan(m.traffic_distribution, s.cluster_id, z, own_slices(s, key))
        yield _verdict(s, key, subject, p, () if z is None else z.unlabeled)


def _verdict(s: Snapshot, key: Key, subject: str, p: Plan, spread: tuple[str, ...]) -> Result:
    if p.active:
        if not hinted(s, key):
            return Result(WARN, "locality", s.name, subject, "should be active, but the imported "
                          "EndpointSlices carry no hints: is the controller running?")
        fallback = f"; zones without a local endpoint ({', '.join(p.extra)}) use every local one" \
            if p.extra else ""
        unlabeled = f"; {len(spread)} Node(s) without the {ZONE_LABEL} label (e.g. {spread[0]}) spread " \
            "over every cluster" if spread else ""
        return Result(WARN if spread else OK, "locality", s.name, subject, "active: a node uses this "
                      f"cluster's ready endpoints in its zone{fallback}; other clusters' only when this one "
                      f"has none ready{unlabeled}")
    status = WARN if p.why in WARNINGS or hinted(s, key) else OK
    stale = "; yet the imported EndpointSlices carry hints" if hinted(s, key) else ""
    return Result(status, "locality", s.name, subject, f"not active: {p.detail}{stale}; every node "
                  "spreads over every cluster")
