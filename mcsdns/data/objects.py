"""The object models: Kubernetes objects parsed into validated, immutable records.

Only what DNS needs is kept. Each model owns its conversions: `parse` (a raw object;
anything malformed raises `Malformed` for the whole object, or is dropped with a reason
for a single endpoint or address, so the caller can log it and count it), `manifest`
(the compact raw form `--state-dir` saves, parsed back to an equal model) and `SOURCE`
(the raw fields `parse` and the store read, from which `essentials`, what `--workers`
relays, is derived).
"""

from __future__ import annotations

import socket
from functools import lru_cache
from socket import AF_INET, AF_INET6, inet_pton
from sys import intern
from typing import Any, ClassVar, TypeAlias

from msgspec import Struct

from ..kube.names import (
    CLUSTER_PROPERTY_ID,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    is_dns_label,
    valid_cluster_id,
)
from ..ops.logs import cut
from ..ops.logs import show as _show
from .fields import Each, Fields

DROPPED_KEPT = 3  # reasons kept per slice for its log line; the rest only counted

SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY = "ServiceImport", "EndpointSlice", "ClusterProperty"
KINDS = (SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY)

Obj: TypeAlias = dict[str, Any]  # a raw object, or a part of one

_KEY = Fields("namespace", "name")  # what the store reads of any object's metadata (apiclient.keys.key_of)
_META = Fields("namespace", "name", labels=Fields())  # and `_meta`: the labels must be a map
_PORTS = Each(Fields("port", "name", "protocol"))


class Malformed(ValueError):
    """The object cannot be used at all."""


def who(ns: str, name: str) -> str:
    """An object's namespace/name for a message (escaped and cut: they may be anything)."""
    return f"{cut(ns)}/{cut(name)}"


def ip_text(packed: bytes) -> str:
    """A packed address (4 or 16 octets) in text."""
    return socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)


def _packed(addr: Any, v6: bool | None = None) -> bytes:
    """Packed address; strict (inet_pton: no leading zeros, no spaces)."""
    if not isinstance(addr, str):
        raise ValueError(f"address {_show(addr)} is not a string")
    try:
        packed = inet_pton(AF_INET6 if ":" in addr else AF_INET, addr)
    except (OSError, ValueError):
        raise ValueError(f"{_show(addr)} is not an IP address") from None
    if v6 is not None and (len(packed) == 16) != v6:
        raise ValueError(f"address {addr} is not of the slice's family")
    return packed


def _meta(obj: Obj) -> tuple[str, str, dict[str, str]]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Malformed("missing metadata")
    ns, name = meta.get("namespace", "default"), meta.get("name")
    if not isinstance(name, str) or not isinstance(ns, str):
        raise Malformed("metadata.name/namespace must be strings")
    ns = intern(ns)  # a few namespaces, each held by thousands of objects
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise Malformed("metadata.labels must be a map")
    return ns, name, labels


def _items(*parts: Any) -> int:
    """How many items the lists among `parts` hold."""
    return sum(len(p) for p in parts if isinstance(p, list))


class Port(Struct, frozen=True, array_like=True, gc=False):
    """A service or endpoint port."""

    name: str  # "" when unnamed
    protocol: str  # TCP, UDP, SCTP
    port: int

    @staticmethod
    def parse_list(raw: Any, where: str) -> tuple[Port, ...]:
        """The ports of a `ports` list (`where` names it in messages)."""
        if raw is None:
            return ()
        if not isinstance(raw, list):
            raise Malformed(f"{where} must be a list")
        out: list[Port] = []
        for p in raw:
            if not isinstance(p, dict):
                raise Malformed(f"{where} entries must be maps")
            num, name, proto = p.get("port"), p.get("name") or "", p.get("protocol") or "TCP"
            try:
                out.append(_port(num, name, proto, where))
            except TypeError:  # a value that cannot be a key (a list, a map): checked uncached
                out.append(_port.__wrapped__(num, name, proto, where))
        return _ports(tuple(out))

    def manifest(self) -> Obj:
        if self.name:
            return {"name": self.name, "protocol": self.protocol, "port": self.port}
        return {"protocol": self.protocol, "port": self.port}


@lru_cache(maxsize=4096, typed=True)  # typed: the port True is not the port 1
def _port(num: Any, name: Any, proto: Any, where: str) -> Port:
    """The port of an entry of the `ports` list `where`, from its port, name ("" unnamed) and
    protocol ("TCP" unset), or Malformed; one Port object for each of the (few) distinct
    ports, shared by the objects that have it and checked once (a bounded cache)."""
    if isinstance(num, bool) or not isinstance(num, int) or not 0 <= num <= 65535:
        raise Malformed(f"{where}: bad port {_show(num)}")
    if not isinstance(name, str) or (name and not is_dns_label(name.lower())):
        raise Malformed(f"{where}: bad port name {_show(name)}")
    if proto not in ("TCP", "UDP", "SCTP"):
        raise Malformed(f"{where}: bad protocol {_show(proto)}")
    return Port(intern(name.lower()), proto, num)


@lru_cache(maxsize=4096)
def _ports(ports: tuple[Port, ...]) -> tuple[Port, ...]:
    """One tuple for each distinct list of ports, shared likewise."""
    return ports


class ServiceImport(Struct, frozen=True, array_like=True, gc=False):
    """A parsed ServiceImport: what DNS needs of it."""

    KIND: ClassVar[str] = SERVICE_IMPORT
    SOURCE: ClassVar[Fields] = Fields("kind", metadata=_META, spec=Fields("type", "ips", ports=_PORTS))

    namespace: str
    name: str
    headless: bool
    ips: tuple[bytes, ...]  # packed, 4 or 16 octets, in spec order
    ports: tuple[Port, ...]

    @classmethod
    def parse(cls, obj: Obj) -> ServiceImport:
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
        return cls(ns, name, typ == "Headless", tuple(ips), Port.parse_list(spec.get("ports"), "spec.ports"))

    @staticmethod
    def size(obj: Obj) -> int:
        """Ports of a raw ServiceImport (0 where malformed), what parsing it costs."""
        spec = obj.get("spec")
        return _items(spec.get("ports")) if isinstance(spec, dict) else 0

    def manifest(self) -> Obj:
        return {"kind": SERVICE_IMPORT, "metadata": {"namespace": self.namespace, "name": self.name},
                "spec": {"type": "Headless" if self.headless else "ClusterSetIP",
                         "ips": [ip_text(a) for a in self.ips], "ports": [p.manifest() for p in self.ports]}}


def system_hostname(packed: bytes) -> str:
    """The system-assigned hostname of an endpoint: its first address, dashed (it may start
    or end with '-', as "2001-db8--1", but never holds a dot)."""
    return ip_text(packed).replace(".", "-").replace(":", "-")


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


def _addresses(raw: list[Any], i: int, v6: bool, dropped: _Drops) -> tuple[bytes, ...]:
    """The distinct valid addresses of endpoint `i`, in order, packed; ValueError if none
    is valid, each invalid one noted in `dropped`."""
    if len(raw) == 1:  # nearly every endpoint
        try:
            return (_packed(raw[0], v6),)
        except ValueError as e:
            dropped.add(f"endpoint {i}: {e}")
            raise ValueError("no valid addresses") from None
    addrs: dict[bytes, None] = {}  # distinct, in order
    for a in raw:
        try:
            addrs[_packed(a, v6)] = None
        except ValueError as e:
            dropped.add(f"endpoint {i}: {e}")
    if not addrs:
        raise ValueError("no valid addresses")
    return tuple(addrs)


_READY, _SERVING, _TERMINATING = 1, 2, 4  # the bits of `Endpoint.conditions`


class Endpoint(Struct, frozen=True, array_like=True, gc=False):
    """A parsed endpoint of an EndpointSlice; its three conditions in one small int (40,000
    endpoints: 0.6 MB less than three fields)."""

    SOURCE: ClassVar[Fields] = Fields("addresses", "hostname", "zone",
                                      conditions=Fields("ready", "serving", "terminating"))

    addresses: tuple[bytes, ...]  # packed
    hostname: str  # validated label, or system-assigned dashed IP
    conditions: int  # _READY | _SERVING | _TERMINATING
    zone: str

    @classmethod
    def of(cls, addresses: tuple[bytes, ...], hostname: str, ready: bool, serving: bool,
           terminating: bool, zone: str) -> Endpoint:
        return cls(addresses, hostname, ready * _READY | serving * _SERVING | terminating * _TERMINATING,
                   zone)

    @property
    def ready(self) -> bool:
        return bool(self.conditions & _READY)

    @property
    def serving(self) -> bool:
        return bool(self.conditions & _SERVING)

    @property
    def terminating(self) -> bool:
        return bool(self.conditions & _TERMINATING)

    @classmethod
    def parse(cls, ep: Any, i: int, v6: bool, dropped: _Drops) -> Endpoint:
        """Endpoint `i` of a slice (of IPv6 addresses if `v6`); ValueError if it is unusable,
        its unusable addresses noted in `dropped`."""
        if not isinstance(ep, dict):
            raise ValueError("not a map")
        raw_addrs = ep.get("addresses")
        if not isinstance(raw_addrs, list) or not raw_addrs:
            raise ValueError("no addresses")
        packed = _addresses(raw_addrs, i, v6, dropped)
        raw_host = ep.get("hostname")
        if raw_host:
            if not isinstance(raw_host, str) or not is_dns_label(host := raw_host.lower()):
                raise ValueError(f"hostname {_show(raw_host)} is not a DNS label")
        else:
            host = system_hostname(packed[0])
        conds = ep.get("conditions") or {}
        if not isinstance(conds, dict):
            raise ValueError("conditions must be a map")
        ready = conds.get("ready")  # unset: ready, as kube-proxy reads it
        ready = ready is None or ready is True
        serving = conds.get("serving")  # unset: as ready
        zone = ep.get("zone") or ""
        return cls.of(packed, host, ready, ready if serving is None else serving is True,
                      conds.get("terminating") is True, intern(zone) if isinstance(zone, str) else "")

    def manifest(self) -> Obj:
        conds = {"ready": self.ready, "serving": self.serving, "terminating": self.terminating}
        e: Obj = {"addresses": [ip_text(a) for a in self.addresses], "conditions": conds}
        if self.hostname != system_hostname(self.addresses[0]):  # a system-assigned one is derived again
            e["hostname"] = self.hostname
        if self.zone:
            e["zone"] = self.zone
        return e


class EndpointSlice(Struct, frozen=True, array_like=True, gc=False):
    """A parsed imported EndpointSlice: its service, source cluster, endpoints and ports."""

    KIND: ClassVar[str] = ENDPOINT_SLICE
    SOURCE: ClassVar[Fields] = Fields(
        "kind", "addressType", metadata=Fields("namespace", "name", labels=Fields(
            SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL)), endpoints=Each(Endpoint.SOURCE), ports=_PORTS)

    namespace: str
    name: str
    service: str
    cluster: str
    ipv6: bool
    endpoints: tuple[Endpoint, ...]
    ports: tuple[Port, ...]
    dropped: tuple[str, ...] = ()  # reasons for the first DROPPED_KEPT skipped parts
    n_dropped: int = 0  # skipped parts (endpoints or addresses)

    @classmethod
    def parse(cls, obj: Obj) -> EndpointSlice:
        ns, name, labels = _meta(obj)
        svc = labels.get(SERVICE_NAME_LABEL)
        cluster = labels.get(SOURCE_CLUSTER_LABEL)
        if not isinstance(svc, str) or not is_dns_label(svc):
            raise Malformed(f"{who(ns, name)}: label {SERVICE_NAME_LABEL}={_show(svc)} is not a DNS label")
        if not isinstance(cluster, str) or not valid_cluster_id(cluster.lower()):
            raise Malformed(f"{who(ns, name)}: label {SOURCE_CLUSTER_LABEL}={_show(cluster)}"
                            " is not a cluster ID")
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
        add, parse = eps.append, Endpoint.parse
        dropped = _Drops()
        for i, ep in enumerate(raw_eps):
            try:
                add(parse(ep, i, v6, dropped))
            except ValueError as e:
                dropped.add(f"endpoint {i}: {e}")
        return cls(ns, name, intern(svc), intern(cluster.lower()), v6, tuple(eps),
                   Port.parse_list(obj.get("ports"), "ports"),
                   tuple(dropped.reasons), dropped.n)

    @staticmethod
    def size(obj: Obj) -> int:
        """Endpoints and ports of a raw EndpointSlice, what parsing it costs."""
        return _items(obj.get("endpoints"), obj.get("ports"))

    def manifest(self) -> Obj:
        labels = {SERVICE_NAME_LABEL: self.service, SOURCE_CLUSTER_LABEL: self.cluster}
        return {"kind": ENDPOINT_SLICE,
                "metadata": {"namespace": self.namespace, "name": self.name, "labels": labels},
                "addressType": "IPv6" if self.ipv6 else "IPv4",
                "endpoints": [e.manifest() for e in self.endpoints],
                "ports": [p.manifest() for p in self.ports]}


class ClusterProperty(Struct, frozen=True, array_like=True, gc=False):
    """The about.k8s.io ClusterProperty that names this cluster's ID (KEP-2149)."""

    KIND: ClassVar[str] = CLUSTER_PROPERTY
    SOURCE: ClassVar[Fields] = Fields("kind", metadata=_META, spec=Fields("value"))

    cluster_id: str

    @classmethod
    def parse(cls, obj: Obj) -> ClusterProperty | None:
        """The cluster ID property, or None if `obj` is another property."""
        _, name, _ = _meta(obj)
        if name not in CLUSTER_PROPERTY_ID:
            return None
        spec = obj.get("spec")
        value = spec.get("value") if isinstance(spec, dict) else None
        if not isinstance(value, str) or not valid_cluster_id(value.lower()):
            raise Malformed(f"ClusterProperty {cut(name)}: value {_show(value)} is not a cluster ID")
        return cls(value.lower())

    def manifest(self) -> Obj:
        return {"kind": CLUSTER_PROPERTY, "metadata": {"name": CLUSTER_PROPERTY_ID[0]},
                "spec": {"value": self.cluster_id}}


Model: TypeAlias = type[ServiceImport] | type[EndpointSlice] | type[ClusterProperty]
MODELS: dict[str, Model] = {m.KIND: m for m in (ServiceImport, EndpointSlice, ClusterProperty)}
_ANY = Fields("kind", metadata=_KEY)  # an object of another kind: what the store reads to skip it


def essentials(obj: Obj, kind: str | None = None) -> Obj:
    """What the store reads of an object (its model's `SOURCE`; `kind` if it names none),
    the rest dropped, so that it can be passed on small; it parses as the whole object,
    malformed parts included (kept as they are, to be reported the same)."""
    k = obj.get("kind", kind)
    model = MODELS.get(k) if isinstance(k, str) else None
    kept: Obj = (model.SOURCE if model is not None else _ANY).keep(obj)
    return kept
