"""The records and digest of one service exactly as mcsdns made them at 58424b2, before
the first-load speed-ups: the oracle `test_records_equal` compares the live code with.
Frozen: never change it with the live code (zone/records.py, zone/journal.py
service_digest, dns/names.py prefix and under, dns/rdata.py srv_wire)."""

from __future__ import annotations

import hashlib
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mcsdns.data.objects import Endpoint, EndpointSlice, Port, ServiceImport, who
from mcsdns.data.store import ENDPOINT_SLICE, SERVICE_IMPORT
from mcsdns.dns.limits import SAFE_COUNT, fitting
from mcsdns.dns.names import prefix as live_prefix
from mcsdns.dns.types import RRType
from mcsdns.kube.keys import Key
from mcsdns.zone.leftout import LeftOut
from mcsdns.zone.locality import OFF, ONLY_WHEN_AVAILABLE, Locality
from mcsdns.zone.rrsets import Names as ZoneNames
from mcsdns.zone.zone import Change, Staged, Zone

MAX_NAME = 255
MAX_LABEL = 63
_SRV_HEAD = struct.Struct("!HHH")


class NameTooLong(ValueError):
    """dns.names.NameTooLong."""

    def __init__(self, name: bytes) -> None:
        super().__init__(f"name of {len(name)} octets")
        self.name = name


def prefix(parts: Iterable[str], base: bytes) -> bytes:
    out = b""
    long_label = False
    for lab in parts:
        b = lab.encode("ascii")
        long_label |= len(b) > MAX_LABEL
        out += bytes((len(b) & 0xFF,)) + b
    out += base
    if long_label or len(out) > MAX_NAME:
        raise NameTooLong(out)
    return out


def under(label: str, base: bytes) -> bytes:
    b = label.encode("ascii")
    out = bytes((len(b) & 0xFF,)) + b + base
    if len(b) > MAX_LABEL or len(out) > MAX_NAME:
        raise NameTooLong(out)
    return out


def srv_wire(priority: int, weight: int, port: int, target: bytes) -> bytes:
    return _SRV_HEAD.pack(priority, weight, port) + target


_cuts = threading.local()  # .into: the `LeftOut.cuts` of this thread's build (on or off the loop)


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class RRset:
    """Records of one type at one name; `extra` are (owner, type, rdata) for Additional."""

    rtype: int
    rdatas: tuple[bytes, ...]
    extra: tuple[tuple[bytes, int, bytes], ...] = ()
    rotate: bool = False  # answer order may be rotated between queries
    groups: tuple[int, ...] = ()  # sizes of consecutive runs rotated separately (tiers)

    def __post_init__(self) -> None:
        if len(self.rdatas) > SAFE_COUNT:  # maybe more than one message holds (dns.limits)
            _cap(self)


def _cap(rrset: RRset) -> None:
    """Keep the first records of `rrset` that fit one message (dns.limits), and its tiers'
    sizes up to them; noted in the LeftOut of this thread's `service_records` call."""
    n = fitting(rrset.rdatas)
    if n == len(rrset.rdatas):
        return
    into = getattr(_cuts, "into", None)
    if into is not None:
        into.append((rrset.rtype, n, len(rrset.rdatas)))
    rrset.rdatas = rrset.rdatas[:n]
    if rrset.groups:
        groups, left = [], n
        for g in rrset.groups:
            if left <= 0:
                break
            groups.append(min(g, left))
            left -= g
        rrset.groups = tuple(groups)


class One(Mapping[int, RRset]):
    """The RRsets of a name that has only one: what most endpoint names have, in a
    quarter of a dict's memory (40,000 endpoints: 5.6 MiB less)."""

    __slots__ = ("rrset",)

    def __init__(self, rrset: RRset) -> None:
        self.rrset = rrset

    def __getitem__(self, rtype: int) -> RRset:
        if rtype != self.rrset.rtype:
            raise KeyError(rtype)
        return self.rrset

    def __iter__(self) -> Iterator[int]:
        yield self.rrset.rtype

    def __len__(self) -> int:
        return 1

    def __contains__(self, rtype: object) -> bool:
        return rtype == self.rrset.rtype

    def get(self, rtype: int, default: Any = None) -> Any:
        return self.rrset if rtype == self.rrset.rtype else default

    def __eq__(self, other: object) -> bool:
        if isinstance(other, One):
            return self.rrset == other.rrset
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # as a dict's


RRsets = Mapping[int, RRset]  # the records at one name, by type
EMPTY: RRsets = MappingProxyType({})  # an empty non-terminal's, shared by all of them
Names = dict[bytes, RRsets]


def _address_rrsets(addrs: Sequence[bytes]) -> RRsets:
    """A and/or AAAA RRsets of distinct addresses, in order."""
    if len(addrs) == 1:  # most endpoints: one address (a tuple is kept as it is)
        rd = addrs if isinstance(addrs, tuple) else (addrs[0],)
        return One(RRset(RRType.A if len(rd[0]) == 4 else RRType.AAAA, rd))
    unique = dict.fromkeys(addrs)
    v4 = tuple(a for a in unique if len(a) == 4)
    v6 = tuple(a for a in unique if len(a) == 16)
    out: dict[int, RRset] = {}
    if v4:
        out[RRType.A] = RRset(RRType.A, v4)
    if v6:
        out[RRType.AAAA] = RRset(RRType.AAAA, v6)
    return out


def _answerable(slices: list[EndpointSlice],
                fallback: bool) -> list[tuple[EndpointSlice, Endpoint]]:
    """Ready endpoints; if none and `fallback`, serving+terminating ones (as kube-proxy)."""
    ready = [(s, e) for s in slices for e in s.endpoints if e.ready]
    if ready or not fallback:
        return ready
    return [(s, e) for s in slices for e in s.endpoints if e.serving and e.terminating]


def _srv_names(svc_name: bytes, ports: Iterable[Port]
               ) -> tuple[dict[tuple[str, str], bytes], dict[tuple[str, str], bytes]]:
    """The SRV owner `_<port>._<proto>.<svc>` of each named (port, protocol), and the names
    of those that cannot be sent."""
    out: dict[tuple[str, str], bytes] = {}
    bad: dict[tuple[str, str], bytes] = {}
    for p in ports:
        if p.name:
            try:
                out[(p.name, p.protocol)] = prefix(("_" + p.name, "_" + p.protocol.lower()), svc_name)
            except NameTooLong as e:
                bad[(p.name, p.protocol)] = e.name
    return out, bad


def _run_lengths(values: list[int]) -> list[int]:
    out: list[int] = []
    prev = None
    for v in values:
        if v == prev:
            out[-1] += 1
        else:
            out.append(1)
            prev = v
    return out


Extra = tuple[tuple[bytes, int, bytes], ...]  # Additional records: (owner, type, rdata)


class _Build:
    """One service's records as the makers add them: its inputs, the names so far, the
    service name's RRsets (`node`), and what one maker leaves for the next."""

    __slots__ = ("si", "slices", "svc_name", "loc", "left", "names", "node", "srv",
                 "eps", "service_eps", "host_of", "host_tier")

    def __init__(self, si: ServiceImport, slices: list[EndpointSlice], svc_name: bytes, loc: Locality,
                 left: LeftOut) -> None:
        self.si, self.slices, self.svc_name, self.loc, self.left = si, slices, svc_name, loc, left
        self.names: Names = {}
        self.node: dict[int, RRset] = {}  # the service name's RRsets
        self.srv: list[tuple[tuple[bytes, ...], Extra]] = []  # each port name's SRV records and Additional

    def order(self) -> None:
        """Headless, before its makers: the answerable endpoints across clusters in locality
        order, those the service name answers with; the name of each (cluster, hostname)
        (None: it cannot be sent) and the tier of each name are then filled in."""
        loc = self.loc
        eps = service_eps = _answerable(self.slices, loc.terminating_fallback)
        if loc.enabled:
            eps.sort(key=lambda se: loc.rank(se[0].cluster, se[1].zone))  # stable: keeps slice order
            if loc.policy == ONLY_WHEN_AVAILABLE:
                service_eps = [(s, e) for s, e in eps if s.cluster == loc.cluster_id] or eps
        self.eps: list[tuple[EndpointSlice, Endpoint]] = eps
        self.service_eps: list[tuple[EndpointSlice, Endpoint]] = service_eps
        self.host_of: dict[tuple[str, str], bytes | None] = {}
        self.host_tier: dict[bytes, int] = {}

    def port_srv(self, owner: bytes, rds: tuple[bytes, ...], extra: Extra) -> None:
        """The SRV RRset of the port name `owner` (`_<port>._<proto>.<svc>`), also kept
        for the bare name."""
        self.names[owner] = One(RRset(RRType.SRV, rds, extra))
        self.names.setdefault(owner[owner[0] + 1:], EMPTY)  # _proto.<svc> empty non-terminal
        self.srv.append((rds, extra))  # all of them: the RRset may be cut (dns.limits)


Maker = Callable[[_Build], None]  # adds records to a build


def _vips(b: _Build) -> None:
    """Spec 2.3: the service name's A/AAAA, the VIPs."""
    b.node.update(_address_rrsets(b.si.ips))


def _vip_srvs(b: _Build) -> None:
    """Spec 2.3: an SRV per named port, targeting the service name (the VIPs as Additional)."""
    si, svc_name, node = b.si, b.svc_name, b.node
    extra = tuple((svc_name, t, a) for t in (RRType.A, RRType.AAAA) if t in node for a in node[t].rdatas)
    first: dict[tuple[str, str], int] = {}  # the first port number of each (name, protocol)
    for p in si.ports:
        first.setdefault((p.name, p.protocol), p.port)
    owners, bad = _srv_names(svc_name, si.ports)
    for name in bad.values():
        b.left.add(SERVICE_IMPORT, who(si.namespace, si.name), "port", name)
    for key, owner in owners.items():
        b.port_srv(owner, (srv_wire(0, 100, first[key], svc_name),), extra)


def _endpoint_names(b: _Build) -> None:
    """Spec 2.4: `<hostname>.<clusterid>.<svc>` of each answerable endpoint, with its
    addresses (those of endpoints of the same name merged); `<clusterid>.<svc>` empty."""
    names, host_of, host_tier, left, loc = b.names, b.host_of, b.host_tier, b.left, b.loc
    cluster_names: dict[str, bytes] = {}
    # the endpoint's own tuple, until a second endpoint merges into it: then a dict (a set in order)
    hosts: dict[bytes, Sequence[bytes] | dict[bytes, None]] = {}
    too_long: dict[tuple[str, str], bytes] = {}  # (cluster, hostname) -> the name it would be
    for sl, ep in b.eps:
        key = (sl.cluster, ep.hostname)
        host = host_of.get(key)
        if host is None:
            if key in host_of:
                left.add(ENDPOINT_SLICE, who(sl.namespace, sl.name), "endpoint", too_long[key])
                continue
            cn = cluster_names.get(sl.cluster)
            try:
                if cn is None:
                    cn = cluster_names[sl.cluster] = prefix(sl.cluster.split("."), b.svc_name)
                host = host_of[key] = under(ep.hostname, cn)
            except NameTooLong as e:
                name = e.name  # the endpoint's name, even when <clusterid>.<svc> is already too long
                if cn is None:
                    name = bytes((len(ep.hostname),)) + ep.hostname.encode() + name
                host_of[key], too_long[key] = None, name
                left.add(ENDPOINT_SLICE, who(sl.namespace, sl.name), "endpoint", name)
                continue
            names.setdefault(cn, EMPTY)  # <clusterid>.<svc>: never has records
            hosts[host] = ep.addresses  # shared with the store: no copy per host
            host_tier[host] = loc.tier(sl.cluster)
            continue
        merged = hosts[host]
        if not isinstance(merged, dict):
            merged = hosts[host] = dict.fromkeys(merged)
        merged.update(dict.fromkeys(ep.addresses))
    for host, addrs in hosts.items():
        names[host] = _address_rrsets(tuple(addrs) if isinstance(addrs, dict) else addrs)


def _tiered_addresses(b: _Build) -> None:
    """Spec 2.4: the service name's A/AAAA, the endpoints' addresses by family in tier
    order, grouped by tier for rotation."""
    loc = b.loc
    tiered: dict[int, dict[bytes, int]] = {RRType.A: {}, RRType.AAAA: {}}
    for sl, ep in b.service_eps:
        tier = loc.tier(sl.cluster)
        for a in ep.addresses:
            tiered[RRType.A if len(a) == 4 else RRType.AAAA].setdefault(a, tier)
    for family, by_addr in tiered.items():
        if by_addr:
            groups = tuple(_run_lengths(list(by_addr.values())))
            b.node[family] = RRset(family, tuple(by_addr), rotate=len(by_addr) > 1, groups=groups)


def _endpoint_srvs(b: _Build) -> None:
    """Spec 2.4: an SRV per endpoint and named port, targeting the endpoint's name (its
    addresses as Additional); priority = tier, weight spread within it."""
    host_of, host_tier, names = b.host_of, b.host_tier, b.names
    port_targets: dict[tuple[str, str], dict[tuple[int, bytes], int]] = {}
    for sl, ep in b.service_eps:
        host = host_of[(sl.cluster, ep.hostname)]
        if host is None:
            continue
        for p in sl.ports:
            if p.name:
                port_targets.setdefault((p.name, p.protocol), {}).setdefault((p.port, host), host_tier[host])
    srv_owners, bad = _srv_names(b.svc_name, [Port(n, p, 0) for (n, p) in port_targets])
    if bad:
        for sl in b.slices:
            for k in dict.fromkeys((p.name, p.protocol) for p in sl.ports if (p.name, p.protocol) in bad):
                b.left.add(ENDPOINT_SLICE, who(sl.namespace, sl.name), "port", bad[k])
    for key, owner in srv_owners.items():
        targets = port_targets[key]
        per_tier = Counter(targets.values())
        rds = tuple(srv_wire(tier, max(1, 100 // per_tier[tier]), port, host)
                    for (port, host), tier in targets.items())
        b.port_srv(owner, rds, _extra(names, dict.fromkeys(host for _, host in targets)))


def _extra(names: Names, hosts: Iterable[bytes]) -> Extra:
    """The address records of `hosts`, for Additional."""
    out: list[tuple[bytes, int, bytes]] = []
    for h in hosts:
        rrsets = names[h]
        for rr in (rrsets.rrset,) if type(rrsets) is One else rrsets.values():
            t = rr.rtype
            out.extend((h, t, a) for a in rr.rdatas)
    return tuple(out)


def _service_srv(b: _Build) -> None:
    """The service name's SRV: those of its port names, each once (42/TCP and 42/UDP give
    the same SRV)."""
    if b.srv:
        rds: dict[bytes, None] = {}  # sets, in order
        extra: dict[tuple[bytes, int, bytes], None] = {}
        for some, more in b.srv:
            for rd in some:
                rds[rd] = None
            for x in more:
                extra[x] = None
        b.node[RRType.SRV] = RRset(RRType.SRV, tuple(rds), tuple(extra))


# The makers of a service's records, in order: those of its type (by `headless`), then
# those of every service name (which may use what the first left in the build).
_EVERY: tuple[Maker, ...] = (_service_srv,)
_MAKERS: dict[bool, tuple[Maker, ...]] = {
    False: (_vips, _vip_srvs, *_EVERY),  # ClusterSetIP, spec 2.3
    True: (_endpoint_names, _tiered_addresses, _endpoint_srvs, *_EVERY),  # Headless, spec 2.4
}


def service_records(si: ServiceImport, slices: list[EndpointSlice], zone: bytes,
                    loc: Locality = OFF, left: LeftOut | None = None) -> Names:
    """All names and RRsets for one service; empty if the service has no name. A name that
    cannot be sent is left out, with the records it owns or targets, and noted in `left`
    (an endpoint's addresses stay in the service's own A/AAAA). RRsets larger than one
    message are cut (dns.limits) and noted in `left.cuts`."""
    left = LeftOut() if left is None else left
    try:
        svc_name = prefix((si.name, si.namespace, "svc"), zone)
    except NameTooLong as e:
        left.add(SERVICE_IMPORT, who(si.namespace, si.name), "service", e.name)
        return {}
    b = _Build(si, slices, svc_name, loc, left)
    if si.headless:
        b.order()
        if not b.eps:
            return {}  # headless with no ready endpoints: NXDOMAIN (spec 2.4.1)
    outer, _cuts.into = getattr(_cuts, "into", None), left.cuts
    try:
        for make in _MAKERS[si.headless]:
            make(b)
    finally:
        _cuts.into = outer
    b.names[svc_name] = b.node
    return b.names


def service_digest(key: Key, names: Any) -> int:  # any Names, the live ones too
    """Hash of one service's records (0 for none); independent of RRset order and rotation."""
    if not names:
        return 0
    parts = [f"{key[0]}/{key[1]}".encode()]  # hashed as one string: the same digest, fewer calls
    add = parts.append
    for n in sorted(names):
        rrsets = names[n]
        if type(rrsets) is One:  # most names: one RRset, most often of one record
            rr = rrsets.rrset
            add(b"\x00" + n + rr.rtype.to_bytes(2, "big"))
            rds = rr.rdatas
            for rd in (rds if len(rds) == 1 else sorted(rds)):
                add(len(rd).to_bytes(2, "big") + rd)
            continue
        for t in sorted(rrsets):
            add(b"\x00" + n + t.to_bytes(2, "big"))
            for rd in sorted(rrsets[t].rdatas):
                add(len(rd).to_bytes(2, "big") + rd)
    return int.from_bytes(hashlib.blake2b(b"".join(parts), digest_size=16).digest(), "big")


class RefZone(Zone):
    """A Zone whose `stage` and `commit` are those at 58424b2."""

    def stage(self, key: Key, new: ZoneNames) -> Staged:
        """What replacing `key`'s names with `new` changes, computed without changing the
        zone: may run off the loop while this service's names stay as they are."""
        old = self.svc_names.get(key, ())
        names = self.names
        before = {n: names[n] for n in old}
        gone = [n for n in old if n not in new]
        get = names.get  # a name not in the zone (most, on a first load) is put without comparing
        put = {n: rrsets for n, rrsets in new.items() if (cur := get(n)) is None or cur != rrsets}
        changed = set(gone)
        changed.update(put)
        return Staged(key, before, new, gone, put, changed)

    def commit(self, st: Staged) -> Change:
        """Apply a `stage`d change (on the loop; nothing of the service changed since):
        C-level dict updates only, so a large service swaps in one short step."""
        key, new, names = st.key, st.new, self.names
        had = self.svc_names.pop(key, None) is not None
        for n in st.gone:
            del names[n]
        names.update(st.put)
        changed = st.changed
        if had and not new:
            self.ns_refs[key[0]] -= 1
            if not self.ns_refs[key[0]]:
                del self.ns_refs[key[0]]
                ns_name = live_prefix((key[0],), self.svc)  # fits: the service's names did
                del names[ns_name]
                changed.add(ns_name)
        elif new and not had:
            self.ns_refs[key[0]] = self.ns_refs.get(key[0], 0) + 1
            ns_name = live_prefix((key[0],), self.svc)
            if ns_name not in names:
                names[ns_name] = {}
                changed.add(ns_name)
        if new:
            self.svc_names[key] = tuple(new)
        self.version += 1
        return Change(key, st.before, new, changed)
