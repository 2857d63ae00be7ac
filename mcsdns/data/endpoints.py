"""The endpoints of an EndpointSlice: their addresses, system-assigned hostnames and
conditions, parsed from the raw `endpoints` list (`parse_endpoints`); a malformed endpoint
or address is dropped with a reason, counted in the slice. A listed slice may keep its
endpoints' JSON text (`data.fields.Later`) until first read (`EndpointSlice.settled`): the
same rules then run on `decoded` text."""

from __future__ import annotations

import json
from socket import AF_INET, AF_INET6, inet_ntop, inet_pton
from sys import intern
from typing import Any, ClassVar, TypeAlias

import msgspec
from msgspec import Struct

from ..kube.names import is_dns_label
from ..ops.logs import show as _show
from .fields import Each, Fields

Obj: TypeAlias = dict[str, Any]  # a raw object, or a part of one
DROPPED_KEPT = 3  # reasons kept per slice for its log line; the rest only counted


def ip_text(packed: bytes) -> str:
    """A packed address (4 or 16 octets) in text."""
    return inet_ntop(AF_INET if len(packed) == 4 else AF_INET6, packed)


def pack(addr: Any, v6: bool | None = None) -> bytes:
    """Packed address; strict (inet_pton: no leading zeros, no spaces)."""
    if not isinstance(addr, str):
        raise ValueError(f"address {_show(addr)} is not a string")
    try:
        out = inet_pton(AF_INET6 if ":" in addr else AF_INET, addr)
    except (OSError, ValueError):
        raise ValueError(f"{_show(addr)} is not an IP address") from None
    if v6 is not None and (len(out) == 16) != v6:
        raise ValueError(f"address {addr} is not of the slice's family")
    return out


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
            return (pack(raw[0], v6),)
        except ValueError as e:
            dropped.add(f"endpoint {i}: {e}")
            raise ValueError("no valid addresses") from None
    addrs: dict[bytes, None] = {}  # distinct, in order
    for a in raw:
        try:
            addrs[pack(a, v6)] = None
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


ENDPOINTS = Each(Endpoint.SOURCE)  # a slice's `endpoints`, as its parser reads them
_DECODE = msgspec.json.Decoder(ENDPOINTS.member("Endpoints", False)).decode


def decoded(text: bytes) -> Any:
    """A slice's `endpoints` from their kept JSON text, as the list decoder would have
    given them (by json where not of the declared shape: the parser says what is wrong)."""
    try:
        return _DECODE(text)
    except msgspec.DecodeError:  # not of the declared shape (a ValidationError), or not JSON
        return json.loads(text)


def parse_endpoints(raw: list[Any], v6: bool) -> tuple[tuple[Endpoint, ...], _Drops]:
    """The usable endpoints of a slice's `endpoints` list (of IPv6 addresses if `v6`) and
    what was dropped of it."""
    eps: list[Endpoint] = []
    add, parse = eps.append, Endpoint.parse
    dropped = _Drops()
    for i, ep in enumerate(raw):
        try:
            add(parse(ep, i, v6, dropped))
        except ValueError as e:
            dropped.add(f"endpoint {i}: {e}")
    return tuple(eps), dropped
