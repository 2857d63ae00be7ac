"""kube-proxy's endpoint selection for a Service with internalTrafficPolicy Cluster, restated
from its published rule (pkg/proxy/topology.go, Kubernetes v1.36), to tell which endpoints a
node would use given the EndpointSlices written for the Service:

1. Only ready endpoints count (`conditions.ready` absent counts as ready).
2. Node hints: when every ready endpoint has `hints.forNodes` and one of them names this
   node, the node uses the ready endpoints whose node hints name it.
3. Else zone hints: when every ready endpoint has `hints.forZones` and one of them names
   the node's zone (its `topology.kubernetes.io/zone` label; a node without it has none),
   the node uses the ready endpoints whose zone hints name that zone.
4. Else the node uses every ready endpoint.
5. When that leaves nothing, it uses the endpoints that are serving and terminating.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _ready(e: Obj) -> bool:
    return (e.get("conditions") or {}).get("ready") is not False


def _names(e: Obj, field: str) -> set[str]:
    return {str(h.get("name")) for h in ((e.get("hints") or {}).get(field) or [])}


def used(slices: list[Obj], node: str, zone: str | None) -> set[str]:
    """The addresses node `node` in `zone` sends the Service's connections to."""
    eps = [e for s in slices for e in s.get("endpoints") or []]
    ready = [e for e in eps if _ready(e)]
    chosen = ready
    if ready and all(_names(e, "forNodes") for e in ready) \
            and any(node in _names(e, "forNodes") for e in ready):
        chosen = [e for e in ready if node in _names(e, "forNodes")]
    elif ready and all(_names(e, "forZones") for e in ready) and zone is not None \
            and any(zone in _names(e, "forZones") for e in ready):
        chosen = [e for e in ready if zone in _names(e, "forZones")]
    if not chosen:
        chosen = [e for e in eps if (e.get("conditions") or {}).get("serving")
                  and (e.get("conditions") or {}).get("terminating")]
    return {a for e in chosen for a in e.get("addresses") or []}
