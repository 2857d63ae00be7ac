"""Pure conflict resolution: the exports of one service → one derived ServiceImport spec.

KEP-1645 "Constraints and Conflict Resolution": properties that cannot be
merged are taken from the oldest ServiceExport (creationTimestamp, then
cluster ID as a tie-break); ports are the union, merged first by name, then
by (protocol, port). Every export of a conflicted service gets the same
Conflict condition, naming the cluster whose value won.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLUSTERSET_IP, HEADLESS = "ClusterSetIP", "Headless"


@dataclass(frozen=True)
class PortSpec:
    """One port of an exported or merged service."""

    name: str
    protocol: str
    port: int
    app_protocol: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "protocol": self.protocol, "port": self.port}
        if self.app_protocol:
            d["appProtocol"] = self.app_protocol
        return d

    def label(self) -> str:
        return f"{self.name or '<unnamed>'} {self.port}/{self.protocol}"


@dataclass(frozen=True)
class Export:
    """What one cluster's ServiceExport + Service contribute."""

    cluster: str
    created: str  # RFC 3339 creationTimestamp of the ServiceExport
    type: str  # ClusterSetIP or Headless
    ports: tuple[PortSpec, ...]
    session_affinity: str = "None"
    session_affinity_config: Any = None
    ip_families: tuple[str, ...] = ()
    traffic_distribution: str | None = None  # the Service's spec.trafficDistribution


@dataclass
class Merged:
    """The derived service and the conflicts found while deriving it."""

    type: str
    ports: list[PortSpec]
    session_affinity: str
    session_affinity_config: Any
    ip_families: tuple[str, ...]
    clusters: list[str]
    winner: str
    traffic_distribution: str | None = None
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)

    def conflict_condition(self) -> tuple[str, str] | None:
        """(reason, message) for the Conflict condition, None when there is none."""
        if not self.conflicts:
            return None
        return self.conflicts[0][0], " ".join(m for _, m in self.conflicts)


def ports_from_service(spec: dict[str, Any]) -> tuple[PortSpec, ...]:
    """Service spec.ports → PortSpecs (protocol defaults to TCP)."""
    out = []
    for p in spec.get("ports") or []:
        if not isinstance(p, dict) or not isinstance(p.get("port"), int):
            continue
        out.append(PortSpec(str(p.get("name") or ""), str(p.get("protocol") or "TCP"), p["port"],
                            p.get("appProtocol") or None))
    return tuple(out)


def _order(exports: list[Export]) -> list[Export]:
    return sorted(exports, key=lambda e: (e.created, e.cluster))


def _disagree(n: int, total: int) -> str:
    return f"{n}/{total} clusters disagree."


def _merge_ports(ordered: list[Export]) -> tuple[list[PortSpec], bool]:
    merged: list[PortSpec] = []
    by_name: dict[str, PortSpec] = {}
    by_proto_port: dict[tuple[str, int], PortSpec] = {}
    for e in ordered:
        for p in e.ports:
            if p.name in by_name or (p.protocol, p.port) in by_proto_port:
                continue  # an older export already decided this name / number
            merged.append(p)
            by_name[p.name] = p
            by_proto_port[(p.protocol, p.port)] = p
    conflict = any(set(e.ports) != set(merged) for e in ordered)
    return merged, conflict


def serving_ports(merged: list[PortSpec], ports: tuple[PortSpec, ...]) -> dict[str, PortSpec | None]:
    """One export's ports by name → the merged port that serves them, None where none can.

    A merged port serves an export's port when it has the same name and
    protocol, else the same protocol and number (the port merge's two keys);
    each merged port serves at most one port of the export, a name match first.
    """
    out: dict[str, PortSpec | None] = {}
    taken: set[PortSpec] = set()
    by_name = {m.name: m for m in merged}
    for p in ports:
        m = by_name.get(p.name)
        if m is not None and m.protocol == p.protocol:
            out[p.name] = m
            taken.add(m)
    by_proto_port = {(m.protocol, m.port): m for m in merged if m not in taken}
    for p in ports:
        if p.name not in out:
            m = by_proto_port.pop((p.protocol, p.port), None)
            out[p.name] = m
    return out


def unserved_message(ports: list[PortSpec], merged: list[PortSpec]) -> str:
    """Why these ports of one export get no traffic (the Ready=False PortConflict message)."""
    return (f"Ports [{', '.join(p.label() for p in ports)}] get no traffic: no port of the merged service "
            f"[{', '.join(m.label() for m in merged)}] has the same name and protocol, or the same "
            "protocol and number.")


def merge(exports: list[Export]) -> Merged:
    """Derive one service from its exports (at least one)."""
    ordered = _order(exports)
    oldest = ordered[0]
    total = len(ordered)
    m = Merged(type=oldest.type, ports=[], session_affinity=oldest.session_affinity,
               session_affinity_config=oldest.session_affinity_config,
               ip_families=oldest.ip_families, clusters=sorted({e.cluster for e in ordered}),
               winner=oldest.cluster, traffic_distribution=oldest.traffic_distribution)
    src = f'from oldest service export in "{oldest.cluster}".'
    n = sum(e.type != oldest.type for e in ordered)
    if n:
        m.conflicts.append(("TypeConflict", f'Conflicting type. Using "{oldest.type}" {src} '
                            + _disagree(n, total)))
    m.ports, port_conflict = _merge_ports(ordered)
    if port_conflict:
        n = sum(set(e.ports) != set(m.ports) for e in ordered)
        used = ", ".join(p.label() for p in m.ports)
        m.conflicts.append(("PortConflict", f"Conflicting ports. Using the union [{used}], "
                            f"duplicates resolved {src} " + _disagree(n, total)))
    n = sum(e.session_affinity != oldest.session_affinity for e in ordered)
    if n:
        m.conflicts.append(("SessionAffinityConflict", "Conflicting session affinity. Using "
                            f'"{oldest.session_affinity}" {src} ' + _disagree(n, total)))
    n = sum(e.session_affinity_config != oldest.session_affinity_config for e in ordered)
    if n and not any(r == "SessionAffinityConflict" for r, _ in m.conflicts):
        m.conflicts.append(("SessionAffinityConfigConflict", "Conflicting session affinity config. "
                            f"Using the one {src} " + _disagree(n, total)))
    fams = [e for e in ordered if e.ip_families]
    n = sum(set(e.ip_families) != set(oldest.ip_families) for e in fams)
    if oldest.ip_families and n:
        want = ",".join(oldest.ip_families)
        m.conflicts.append(("IPFamilyConflict", f'Conflicting IP families. Using "{want}" {src} '
                            + _disagree(n, total)))
    n = sum(e.traffic_distribution != oldest.traffic_distribution for e in ordered)
    if n:
        m.conflicts.append(("TrafficDistributionConflict", "Conflicting traffic distribution. Using "
                            f'"{oldest.traffic_distribution or "none"}" {src} ' + _disagree(n, total)))
    return m
