"""The object models: Kubernetes objects parsed into validated, immutable records.

Only what DNS needs is kept. Each model owns its conversions: `parse` (a raw object;
anything malformed raises `Malformed` for the whole object, or is dropped with a reason
for a single endpoint or address, so the caller can log it and count it), `manifest`
(the compact raw form `--state-dir` saves, parsed back to an equal model) and `SOURCE`
(the raw fields `parse` and the store read, from which `essentials`, what `--workers`
relays, is derived). A slice's endpoints are data/endpoints.py's; a listed slice may hold
them as text until first read (`EndpointSlice.settled`: ops/load.py, stage 3).
"""

from __future__ import annotations

from functools import lru_cache
from sys import intern
from typing import Any, ClassVar, TypeAlias

from msgspec import Raw, Struct, structs

from ..kube.names import (
    CLUSTER_PROPERTY_ID,
    SERVICE_NAME_LABEL,
    SOURCE_CLUSTER_LABEL,
    is_dns_label,
    valid_cluster_id,
)
from ..ops import load
from ..ops.logs import cut
from ..ops.logs import show as _show
from .endpoints import ENDPOINTS, Endpoint, Obj, decoded, ip_text, pack, parse_endpoints
from .fields import Each, Fields, Later

SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY = "ServiceImport", "EndpointSlice", "ClusterProperty"
KINDS = (SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY)

_KEY = Fields("namespace", "name")  # what the store reads of any object's metadata (apiclient.keys.key_of)
_META = Fields("namespace", "name", labels=Fields())  # and `_meta`: the labels must be a map
_PORTS = Each(Fields("port", "name", "protocol"))


class Malformed(ValueError):
    """The object cannot be used at all."""


def who(ns: str, name: str) -> str:
    """An object's namespace/name for a message (escaped and cut: they may be anything)."""
    return f"{cut(ns)}/{cut(name)}"


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
                    ips[pack(a)] = None
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


class EndpointSlice(Struct, frozen=True, array_like=True, gc=False):
    """A parsed imported EndpointSlice: its service, source cluster, endpoints and ports."""

    KIND: ClassVar[str] = ENDPOINT_SLICE
    SOURCE: ClassVar[Fields] = Fields(
        "kind", "addressType", metadata=Fields("namespace", "name", labels=Fields(
            SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL)), endpoints=Later(ENDPOINTS), ports=_PORTS)

    namespace: str
    name: str
    service: str
    cluster: str
    ipv6: bool
    endpoints: tuple[Endpoint, ...]
    ports: tuple[Port, ...]
    dropped: tuple[str, ...] = ()  # reasons for the first endpoints.DROPPED_KEPT skipped parts
    n_dropped: int = 0  # skipped parts (endpoints or addresses)
    later: bytes = b""  # the endpoints' JSON text, not parsed yet (`settled`; ops/load.py, stage 3)

    @classmethod
    def parse(cls, obj: Obj, later: bool = False) -> EndpointSlice:
        """`later`: endpoints kept as their text (a `Later` decoder's) may stay so, if the
        stage allows it (load.parse_later)."""
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
        raw_eps, kept = obj.get("endpoints"), b""
        if isinstance(raw_eps, Raw):
            text = bytes(raw_eps)
            if later and text[:1] == b"[" and load.parse_later(len(text)):
                raw_eps, kept = None, text  # parsed by `settled`
            else:
                try:
                    raw_eps = decoded(text)
                except (ValueError, RecursionError):
                    raise Malformed(f"{who(ns, name)}: endpoints do not decode") from None
        raw_eps = raw_eps or []
        if not isinstance(raw_eps, list):
            raise Malformed(f"{who(ns, name)}: endpoints must be a list")
        eps, dropped = parse_endpoints(raw_eps, v6)
        return cls(ns, name, intern(svc), intern(cluster.lower()), v6, eps,
                   Port.parse_list(obj.get("ports"), "ports"), tuple(dropped.reasons), dropped.n, kept)

    def settled(self) -> EndpointSlice:
        """This slice with its endpoints parsed, where they were kept as text."""
        if not self.later:
            return self
        try:
            raw = decoded(self.later)
        except (ValueError, RecursionError):  # valid JSON (msgspec read it), nested past json's depth
            return structs.replace(self, dropped=("endpoints nested too deep",), n_dropped=1, later=b"")
        eps, dropped = parse_endpoints(raw, self.ipv6)
        return structs.replace(self, endpoints=eps, dropped=tuple(dropped.reasons), n_dropped=dropped.n,
                               later=b"")

    @staticmethod
    def size(obj: Obj) -> int:
        """Endpoints and ports of a raw EndpointSlice, what parsing it costs."""
        return _items(obj.get("endpoints"), obj.get("ports"))

    def manifest(self) -> Obj:
        labels = {SERVICE_NAME_LABEL: self.service, SOURCE_CLUSTER_LABEL: self.cluster}
        return {"kind": ENDPOINT_SLICE,
                "metadata": {"namespace": self.namespace, "name": self.name, "labels": labels},
                "addressType": "IPv6" if self.ipv6 else "IPv4",
                "endpoints": [e.manifest() for e in self.settled().endpoints],
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
