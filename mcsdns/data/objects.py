"""Kubernetes objects parsed into validated, immutable records.

Only what DNS needs is kept. Anything malformed raises `Malformed` (whole
object) or is dropped with a reason (single endpoint or address), so the
caller can log it and count it.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from typing import Any

from ..kube.names import (
    CLUSTER_PROPERTY_ID,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    is_dns_label,
    valid_cluster_id,
)
from ..ops.logs import cut
from ..ops.logs import show as _show

# Endpoint hostnames and system-assigned labels may start or end with '-'
# (dashed IPv6 addresses such as "2001-db8--1"), but never contain a dot.
_HOST_LABEL = re.compile(r"[a-z0-9-]{1,63}\Z")

DROPPED_KEPT = 3  # reasons kept per slice for its log line; the rest only counted


class Malformed(ValueError):
    """The object cannot be used at all."""


def who(ns: str, name: str) -> str:
    """An object's namespace/name for a message (escaped and cut: they may be anything)."""
    return f"{cut(ns)}/{cut(name)}"


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class Port:
    """A service or endpoint port."""

    name: str  # "" when unnamed
    protocol: str  # TCP, UDP, SCTP
    port: int


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class ServiceImport:
    """A parsed ServiceImport: what DNS needs of it."""

    namespace: str
    name: str
    headless: bool
    ips: tuple[bytes, ...]  # packed, 4 or 16 octets, in spec order
    ports: tuple[Port, ...]


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class Endpoint:
    """A parsed endpoint of an EndpointSlice."""

    addresses: tuple[bytes, ...]  # packed
    hostname: str  # validated label, or system-assigned dashed IP
    ready: bool
    serving: bool
    terminating: bool
    zone: str


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class EndpointSlice:
    """A parsed imported EndpointSlice: its service, source cluster, endpoints and ports."""

    namespace: str
    name: str
    service: str
    cluster: str
    ipv6: bool
    endpoints: tuple[Endpoint, ...]
    ports: tuple[Port, ...]
    dropped: tuple[str, ...] = field(default=())  # reasons for the first DROPPED_KEPT skipped parts
    n_dropped: int = 0  # skipped parts (endpoints or addresses)


_KEPT = ("kind", "apiVersion", "spec", "addressType", "ports")
_KEPT_META = ("name", "namespace", "labels")
_KEPT_ENDPOINT = ("addresses", "hostname", "conditions", "zone")


def essentials(obj: dict[str, Any]) -> dict[str, Any]:
    """The parts of an object the parsers here read (the rest dropped), so that it can be
    kept or passed on small; a malformed part is kept as it is, to be reported the same."""
    out = {k: obj[k] for k in _KEPT if k in obj}
    meta = obj.get("metadata")
    out["metadata"] = {k: meta[k] for k in _KEPT_META if k in meta} if isinstance(meta, dict) else meta
    eps = obj.get("endpoints")
    if eps is not None:
        out["endpoints"] = [{k: e[k] for k in _KEPT_ENDPOINT if k in e} if isinstance(e, dict) else e
                            for e in eps] if isinstance(eps, list) else eps
    return out


def _meta(obj: dict[str, Any]) -> tuple[str, str, dict[str, str]]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Malformed("missing metadata")
    ns, name = meta.get("namespace", "default"), meta.get("name")
    if not isinstance(name, str) or not isinstance(ns, str):
        raise Malformed("metadata.name/namespace must be strings")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise Malformed("metadata.labels must be a map")
    return ns, name, labels


def _ports(raw: Any, where: str) -> tuple[Port, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise Malformed(f"{where} must be a list")
    out: list[Port] = []
    for p in raw:
        if not isinstance(p, dict):
            raise Malformed(f"{where} entries must be maps")
        num, name, proto = p.get("port"), p.get("name") or "", p.get("protocol") or "TCP"
        if isinstance(num, bool) or not isinstance(num, int) or not 0 <= num <= 65535:
            raise Malformed(f"{where}: bad port {_show(num)}")
        if not isinstance(name, str) or (name and not is_dns_label(name.lower())):
            raise Malformed(f"{where}: bad port name {_show(name)}")
        if proto not in ("TCP", "UDP", "SCTP"):
            raise Malformed(f"{where}: bad protocol {_show(proto)}")
        out.append(Port(name.lower(), proto, num))
    return tuple(out)


def _packed(addr: Any, v6: bool | None = None) -> bytes:
    """Packed address; strict (inet_pton: no leading zeros, no spaces)."""
    if not isinstance(addr, str):
        raise ValueError(f"address {_show(addr)} is not a string")
    try:
        packed = socket.inet_pton(socket.AF_INET6 if ":" in addr else socket.AF_INET, addr)
    except (OSError, ValueError):
        raise ValueError(f"{_show(addr)} is not an IP address") from None
    if v6 is not None and (len(packed) == 16) != v6:
        raise ValueError(f"address {addr} is not of the slice's family")
    return packed


def parse_service_import(obj: dict[str, Any]) -> ServiceImport:
    ns, name, _ = _meta(obj)
    if not is_dns_label(ns) or not is_dns_label(name):
        raise Malformed(f"{who(ns, name)}: name and namespace must be DNS labels")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise Malformed(f"{who(ns, name)}: missing spec")
    typ = spec.get("type")
    if typ not in ("ClusterSetIP", "Headless"):
        raise Malformed(f"{who(ns, name)}: spec.type {_show(typ)} is not ClusterSetIP or Headless")
    raw_ips = spec.get("ips") or []
    if not isinstance(raw_ips, list):
        raise Malformed(f"{who(ns, name)}: spec.ips must be a list")
    ips: dict[bytes, None] = {}  # distinct, in order
    if typ == "ClusterSetIP":
        for a in raw_ips:
            try:
                ips[_packed(a)] = None
            except ValueError as e:
                raise Malformed(f"{who(ns, name)}: spec.ips: {e}") from None
    return ServiceImport(ns, name, typ == "Headless", tuple(ips), _ports(spec.get("ports"), "spec.ports"))


def _hostname_for(raw: Any, addresses: tuple[bytes, ...]) -> str:
    if raw:
        if not isinstance(raw, str) or not is_dns_label(raw.lower()):
            raise ValueError(f"hostname {_show(raw)} is not a DNS label")
        return raw.lower()
    a = addresses[0]
    ip = socket.inet_ntop(socket.AF_INET if len(a) == 4 else socket.AF_INET6, a)
    dashed = ip.replace(".", "-").replace(":", "-")
    if not _HOST_LABEL.match(dashed):  # pragma: no cover - always true for IPs
        raise ValueError(f"cannot derive a hostname from {ip}")
    return dashed


def _cond(conds: dict[str, Any], key: str, default: bool) -> bool:
    v = conds.get(key)
    return default if v is None else v is True


class _Drops:
    """The skipped parts of one slice: the first DROPPED_KEPT reasons, and how many."""

    __slots__ = ("n", "reasons")

    def __init__(self) -> None:
        self.n = 0
        self.reasons: list[str] = []

    def add(self, reason: str) -> None:
        self.n += 1
        if self.n <= DROPPED_KEPT:
            self.reasons.append(reason)


def parse_endpoint_slice(obj: dict[str, Any]) -> EndpointSlice:
    ns, name, labels = _meta(obj)
    svc = labels.get(SERVICE_NAME_LABEL)
    cluster = labels.get(SOURCE_CLUSTER_LABEL)
    if not isinstance(svc, str) or not is_dns_label(svc):
        raise Malformed(f"{who(ns, name)}: label {SERVICE_NAME_LABEL}={_show(svc)} is not a DNS label")
    if not isinstance(cluster, str) or not valid_cluster_id(cluster.lower()):
        raise Malformed(f"{who(ns, name)}: label {SOURCE_CLUSTER_LABEL}={_show(cluster)} is not a cluster ID")
    if not is_dns_label(ns):
        raise Malformed(f"{who(ns, name)}: namespace is not a DNS label")
    family = obj.get("addressType", "IPv4")
    if family not in ("IPv4", "IPv6"):
        raise Malformed(f"{who(ns, name)}: addressType {_show(family)} is not served")
    v6 = family == "IPv6"
    raw_eps = obj.get("endpoints") or []
    if not isinstance(raw_eps, list):
        raise Malformed(f"{who(ns, name)}: endpoints must be a list")
    eps: list[Endpoint] = []
    dropped = _Drops()
    for i, ep in enumerate(raw_eps):
        try:
            if not isinstance(ep, dict):
                raise ValueError("not a map")
            raw_addrs = ep.get("addresses")
            if not isinstance(raw_addrs, list) or not raw_addrs:
                raise ValueError("no addresses")
            addrs: dict[bytes, None] = {}  # distinct, in order
            for a in raw_addrs:
                try:
                    addrs[_packed(a, v6)] = None
                except ValueError as e:
                    dropped.add(f"endpoint {i}: {e}")
            if not addrs:
                raise ValueError("no valid addresses")
            packed = tuple(addrs)
            host = _hostname_for(ep.get("hostname"), packed)
            conds = ep.get("conditions") or {}
            if not isinstance(conds, dict):
                raise ValueError("conditions must be a map")
            ready = _cond(conds, "ready", True)
            zone = ep.get("zone") or ""
            eps.append(
                Endpoint(
                    packed,
                    host,
                    ready,
                    _cond(conds, "serving", ready),
                    _cond(conds, "terminating", False),
                    zone if isinstance(zone, str) else "",
                )
            )
        except ValueError as e:
            dropped.add(f"endpoint {i}: {e}")
    return EndpointSlice(
        ns, name, svc, cluster.lower(), v6, tuple(eps), _ports(obj.get("ports"), "ports"),
        tuple(dropped.reasons), dropped.n,
    )


def parse_cluster_id(obj: dict[str, Any]) -> str | None:
    """The cluster ID from an about.k8s.io ClusterProperty, or None if it is another property."""
    _, name, _ = _meta(obj)
    if name not in CLUSTER_PROPERTY_ID:
        return None
    value = (obj.get("spec") or {}).get("value")
    if not isinstance(value, str) or not valid_cluster_id(value.lower()):
        raise Malformed(f"ClusterProperty {cut(name)}: value {_show(value)} is not a cluster ID")
    return value.lower()
