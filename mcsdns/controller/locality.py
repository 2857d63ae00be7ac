"""Locality through the ClusterSetIP: the EndpointSlice hints that make a stock kube-proxy
prefer, in each importing member, that member's own endpoints in the node's zone, then its
other own endpoints, then every exporting cluster's.

kube-proxy (pkg/proxy/topology.go) reads no `trafficDistribution`; it reads hints. Among a
Service's ready endpoints, when every one carries node hints and one names the node, the
node uses those; else, when every one carries zone hints and one names the node's zone,
those; else all ready endpoints. So in member M, for a Service that opts in:

- M's own endpoint in zone Z hints Z and every zone of M's Nodes where M has no ready
  endpoint of its own (`extra`): a node in such a zone uses all of M's ready endpoints;
- every other cluster's endpoint hints one zone no Node of M has (`elsewhere`): no node
  picks it while M has a ready endpoint; once M has none, no ready endpoint names the
  node's zone and kube-proxy uses every cluster's ready endpoints, with no write needed;
- `PreferSameNode` adds node hints (M's endpoints: their `nodeName`; others: `elsewhere`),
  which kube-proxy uses only when every ready endpoint has one, else the zone hints hold.

Degrading is per node and per service, never per member: a Node without a zone label has no
zone to match, so kube-proxy spreads that node over every ready endpoint while the labelled
ones keep their hints; an own ready endpoint without a zone (on such a Node) hints the zones
of M with no zoned ready own endpoint (else `elsewhere`), so it is used where M's other own
endpoints would be. A service gets no hints in M (`Plan.why`; every node spreads) only when
one of its endpoints would need more than 8 zone hints (the API's limit per endpoint), or
when M's Nodes cannot be read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("mcsdns.controller")

ZONE_LABEL = "topology.kubernetes.io/zone"
MAX_ZONE_HINTS = 8  # kube-apiserver's limit of forZones per endpoint
SAME_ZONE, CLOSE, SAME_NODE = "PreferSameZone", "PreferClose", "PreferSameNode"
TRAFFIC_DISTRIBUTIONS = (SAME_ZONE, CLOSE, SAME_NODE)
ELSEWHERE = "mcsdns-elsewhere"  # the zone (and node) hinted on other clusters' endpoints

# Why a member gets no hints although the service opts in; those that are a warning.
NO_NODES = "no Nodes"
NOT_KNOWN = "the Nodes' zones are not known yet"
TOO_MANY, UNREADABLE = "too-many-zones", "nodes-unreadable"
NOT_EXPORTED = "this cluster exports no endpoints of it"
WARNINGS = (TOO_MANY, UNREADABLE)
NAMED = 10  # services named per member and reason in the metric; the rest are counted as OTHERS
OTHERS = "(others)"

Obj = dict[str, Any]


@dataclass(frozen=True)
class NodeZones:
    """What one member's Nodes say of its zones."""

    zones: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    unlabeled: tuple[str, ...] = ()  # Nodes without a zone label, by name
    error: str | None = None  # why they could not be read (the rest is empty)

    @classmethod
    def of(cls, nodes: Iterable[Obj]) -> NodeZones:
        """From Node objects (metadata is enough)."""
        zones, names, unlabeled = set(), set(), []
        for n in nodes:
            md = n.get("metadata") or {}
            names.add(str(md.get("name") or ""))
            z = (md.get("labels") or {}).get(ZONE_LABEL)
            if z:
                zones.add(str(z))
            else:
                unlabeled.append(str(md.get("name") or ""))
        return cls(frozenset(zones), frozenset(names), tuple(sorted(unlabeled)))


class ZoneTracker:
    """A member's Nodes' zones kept from Node events, in O(1) per event; `update` says whether
    what the hints depend on changed (the zones, whether there are Nodes), so a busy fleet's
    Node updates re-queue nothing. A Node that turns unlabeled is logged, by name: it spreads."""

    def __init__(self, member: str = "") -> None:
        self.member = member
        self.zone_of: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}
        self.unlabeled = 0
        self._current: NodeZones | None = None
        self.lock = threading.Lock()

    def _summary(self) -> tuple[frozenset[str], bool]:
        return frozenset(self.counts), bool(self.zone_of)

    def _count(self, zone: str | None, d: int) -> None:
        if zone is None:
            self.unlabeled += d
            return
        self.counts[zone] = self.counts.get(zone, 0) + d
        if not self.counts[zone]:
            del self.counts[zone]

    def update(self, name: str, node: Obj | None) -> bool:
        """Node `name` is now `node` (None: deleted); True when the summary changed."""
        zone = None if node is None else ((node.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
        zone = str(zone) if zone else None
        with self.lock:
            had = name in self.zone_of
            was_unlabeled = had and self.zone_of[name] is None
            if node is not None and had and self.zone_of[name] == zone:
                return False
            if node is None and not had:
                return False
            before = self._summary()
            if had:
                self._count(self.zone_of.pop(name), -1)
            if node is not None:
                self.zone_of[name] = zone
                self._count(zone, 1)
            self._current = None
            changed = self._summary() != before
        if node is not None and not zone:
            log.warning("cluster %s: Node %s has no %s label: it spreads over every cluster (kube-proxy "
                        "ignores hints there); the other Nodes keep their locality hints", self.member, name,
                        ZONE_LABEL)
        elif node is not None and was_unlabeled:
            log.info("cluster %s: Node %s is in zone %s", self.member, name, zone)
        return changed

    def current(self) -> NodeZones:
        with self.lock:
            if self._current is None:
                self._current = NodeZones(frozenset(self.counts), frozenset(self.zone_of),
                                          tuple(sorted(n for n, z in self.zone_of.items() if z is None)))
            return self._current


def ready(e: Obj) -> bool:
    """Ready as kube-proxy reads it: no `ready` condition counts as ready."""
    return (e.get("conditions") or {}).get("ready") is not False


def elsewhere(taken: Iterable[str]) -> str:
    """A zone / node name none of `taken` is."""
    taken, name, i = set(taken), ELSEWHERE, 0
    while name in taken:
        i += 1
        name = f"{ELSEWHERE}-{i}"
    return name


@dataclass(frozen=True)
class Plan:
    """The hints of one member's imported slices of one service; `why` says, when the service
    opts in but gets none there, why not (`active` False)."""

    own: str = ""  # the member's cluster ID
    extra: tuple[str, ...] = ()  # zones of the member with no ready own endpoint
    other: str = ELSEWHERE
    nodes: bool = False  # PreferSameNode: node hints too
    why: str | None = None
    detail: str = ""  # the `why`, for a person
    asked: bool = True  # the service sets a trafficDistribution

    @property
    def active(self) -> bool:
        return self.asked and self.why is None

    def hints(self, cluster: str, e: Obj) -> Obj | None:
        """The `hints` of endpoint `e` of `cluster`'s slice, None for none."""
        if not self.active:
            return None
        if cluster != self.own:
            out: Obj = {"forZones": [{"name": self.other}]}
            if self.nodes:
                out["forNodes"] = [{"name": self.other}]
            return out
        zones = zone_hints(e, self.extra) or [self.other]
        out = {"forZones": [{"name": z} for z in zones]}
        if self.nodes and e.get("nodeName"):
            out["forNodes"] = [{"name": str(e["nodeName"])}]
        return out or None


def zone_hints(e: Obj, extra: Iterable[str]) -> list[str]:
    """An own endpoint's zone hints: its zone and the `extra` ones (may be none)."""
    return sorted({str(e["zone"]), *extra} if e.get("zone") else set(extra))


def off(why: str, detail: str) -> Plan:
    return Plan(why=why, detail=detail)


def plan(td: str | None, own: str, nodes: NodeZones | None, own_slices: list[Obj] | None) -> Plan:
    """The hints of member `own` for a service with trafficDistribution `td`, from the member's
    Nodes and its own exported slices (None: it exports none)."""
    if td not in TRAFFIC_DISTRIBUTIONS:
        return Plan(asked=False, why="no trafficDistribution" if not td else f"trafficDistribution {td!r}",
                    detail="the exported Service sets no trafficDistribution" if not td else
                    f"trafficDistribution {td!r} is not one of {', '.join(TRAFFIC_DISTRIBUTIONS)}")
    if nodes is None:
        return off(NOT_KNOWN, NOT_KNOWN)
    if nodes.error:
        return off(UNREADABLE, f"cannot read the Nodes: {nodes.error}")
    if not nodes.names:
        return off(NO_NODES, "the cluster has no Nodes")
    if own_slices is None:
        return off(NOT_EXPORTED, NOT_EXPORTED)
    eps = [e for s in own_slices for e in s.get("endpoints") or []]
    covered = {str(e["zone"]) for e in eps if ready(e) and e.get("zone")}
    extra = tuple(sorted(nodes.zones - covered))
    most = max((len(zone_hints(e, extra)) for e in eps), default=0)
    if most > MAX_ZONE_HINTS:
        return off(TOO_MANY, f"an endpoint would need {most} zone hints; the API takes at most "
                             f"{MAX_ZONE_HINTS}")
    return Plan(own=own, extra=extra, other=elsewhere(nodes.zones | nodes.names), nodes=td == SAME_NODE)


@dataclass
class Verdicts:
    """Each member's last verdict per service: a warning logged when it turns into one;
    `degraded` for the metric."""

    by_member: dict[str, dict[tuple[str, str], Plan]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, member: str, key: tuple[str, str], p: Plan | None) -> None:
        """Record `p` (None: the service is gone from the member); log a change."""
        with self.lock:
            held = self.by_member.setdefault(member, {})
            before = held.pop(key, None)
            if p is not None and p.asked:
                held[key] = p
        if p is None or before == p or (before is not None and before.why == p.why and p.why is not None):
            return
        if p.why in WARNINGS:
            log.warning("cluster %s: Service %s/%s: no locality hints: %s; its nodes spread over every "
                        "cluster", member, *key, p.detail)
        elif p.active and (before is None or not before.active):
            log.info("cluster %s: Service %s/%s: locality hints active", member, *key)
        elif not p.active and before is not None and before.active:
            log.info("cluster %s: Service %s/%s: no locality hints: %s", member, *key, p.detail)

    def degraded(self) -> dict[tuple[str, str, str], int]:
        """(member, reason, service) -> services that opt in but get no hints there: 1 for each of
        the first NAMED per member and reason by name, the rest counted under service OTHERS
        (so the series stay bounded however many services degrade)."""
        by: dict[tuple[str, str], list[str]] = {}
        with self.lock:
            for member, held in self.by_member.items():
                for key, p in held.items():
                    if p.why in WARNINGS:
                        by.setdefault((member, p.why), []).append(f"{key[0]}/{key[1]}")
        out: dict[tuple[str, str, str], int] = {}
        for (member, why), names in by.items():
            names.sort()
            out.update({(member, why, n): 1 for n in names[:NAMED]})
            if len(names) > NAMED:
                out[(member, why, OTHERS)] = len(names) - NAMED
        return out
