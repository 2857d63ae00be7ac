"""The records one service contributes to the zone (KEP-1645 DNS spec 2.3, 2.4).

`service_records` is a pure function of a ServiceImport and its slices: it
returns every name under `<svc>.<ns>.svc.<zone>` with its RRsets (an empty
map marks an empty non-terminal). Every RRset is a set (RFC 2181 5): the same
address in two slices, or the same port number under two protocols at the
bare service name, gives one record.

The records are made by a list of makers (`_MAKERS`) over one `_Build`: those of the
service's type (ClusterSetIP, spec 2.3; Headless, spec 2.4), then those every service
name has (`_EVERY`). A new kind of record is one maker, listed once with what it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from itertools import chain

from ..data.endpoints import Endpoint
from ..data.objects import ENDPOINT_SLICE, SERVICE_IMPORT, EndpointSlice, Port, ServiceImport, who
from ..dns.names import NameTooLong, prefix, under
from ..dns.rdata import srv_wire
from ..dns.types import RRType
from .leftout import LeftOut
from .locality import OFF, ONLY_WHEN_AVAILABLE, Locality
from .rrsets import EMPTY, Names, Node, One, RRset, RRsets, cuts, family, joined

_A, _AAAA, _SRV = RRType.A, RRType.AAAA, RRType.SRV


def _address_rrsets(addrs: Sequence[bytes]) -> RRsets:
    """A and/or AAAA RRsets of distinct addresses, in order."""
    if len(addrs) == 1:  # most endpoints: one address (a tuple is kept as it is)
        rd = addrs if isinstance(addrs, tuple) else (addrs[0],)
        return One(family(rd[0]), rd)
    unique = dict.fromkeys(addrs)
    v4 = tuple([a for a in unique if len(a) == 4])
    v6 = tuple([a for a in unique if len(a) == 16])
    out: dict[int, RRset] = {}
    if v4:
        out[_A] = RRset(_A, v4)
    if v6:
        out[_AAAA] = RRset(_AAAA, v6)
    return out


def _answerable(slices: list[EndpointSlice], fallback: bool) -> list[tuple[EndpointSlice, Endpoint]]:
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
    for i, v in enumerate(values):
        if i and v == values[i - 1]:
            out[-1] += 1
        else:
            out.append(1)
    return out


@lru_cache(maxsize=1024)
def _srv_head(priority: int, weight: int, port: int) -> bytes:
    """What SRV records of these start with, before the target: one object per value."""
    return srv_wire(priority, weight, port, b"")


class _Build:
    """One service's records as the makers add them: its inputs, the names so far, the
    service name's RRsets (`node`), and what one maker leaves for the next."""

    __slots__ = ("si", "slices", "svc_name", "loc", "left", "names", "node", "srv",
                 "eps", "service_eps", "tier_of", "ep_hosts")

    def __init__(self, si: ServiceImport, slices: list[EndpointSlice], svc_name: bytes, loc: Locality,
                 left: LeftOut) -> None:
        self.si, self.slices, self.svc_name, self.loc, self.left = si, slices, svc_name, loc, left
        self.names: Names = {}
        self.node: dict[int, RRset] = {}  # the service name's RRsets
        self.srv: list[tuple[One, tuple[bytes, ...]]] = []  # each port name's SRV RRset, its rdatas uncut

    def order(self) -> None:
        """Headless, before its makers: the answerable endpoints across clusters in locality
        order, those the service name answers with (the same pairs), and the tier of each
        cluster; the name of each endpoint (None: it cannot be sent) is then filled in."""
        loc = self.loc
        eps = service_eps = _answerable(self.slices, loc.terminating_fallback)
        if loc.enabled:
            eps.sort(key=lambda se: loc.rank(se[0].cluster, se[1].zone))  # stable: keeps slice order
            if loc.policy == ONLY_WHEN_AVAILABLE:
                service_eps = [se for se in eps if se[0].cluster == loc.cluster_id] or eps
        self.eps: list[tuple[EndpointSlice, Endpoint]] = eps
        self.service_eps: list[tuple[EndpointSlice, Endpoint]] = service_eps
        self.tier_of = {c: loc.tier(c) for c in {s.cluster for s in self.slices}}
        self.ep_hosts: list[bytes | None] = []  # the name of each of `eps`, in order

    def port_srv(self, owner: bytes, rdatas: tuple[bytes, ...], extra: tuple[bytes, ...],
                 head: bytes = b"") -> None:
        """The SRV RRset of the port name `owner` (`_<port>._<proto>.<svc>`), also kept
        for the bare name with its records before any cut (the bare name's are cut once,
        from all of them)."""
        rrset = One(_SRV, rdatas, extra, head=head)
        self.names[owner] = rrset
        self.names.setdefault(owner[owner[0] + 1:], EMPTY)  # _proto.<svc> empty non-terminal
        self.srv.append((rrset, rdatas))


Maker = Callable[[_Build], None]  # adds records to a build
# What a maker reads beyond the ServiceImport, as the serial's digest hashes it (None: nothing).
Reads = Callable[[list[EndpointSlice], Locality], object] | None


def _slices_and_locality(slices: list[EndpointSlice], loc: Locality) -> object:
    return (slices, loc)


def _vips(b: _Build) -> None:
    """Spec 2.3: the service name's A/AAAA, the VIPs."""
    ips = b.si.ips
    if len(ips) == 1:  # most: one VIP, its tuple kept (as _address_rrsets does)
        t = family(ips[0])
        b.node[t] = RRset(t, ips)
    else:
        b.node.update(_address_rrsets(ips))


def _vip_srvs(b: _Build) -> None:
    """Spec 2.3: an SRV per named port, targeting the service name (the VIPs as Additional)."""
    si, svc_name = b.si, b.svc_name
    target = (svc_name,)  # the SRV's target and Additional: one tuple
    first: dict[tuple[str, str], int] = {}  # the first port number of each (name, protocol)
    for p in si.ports:
        first.setdefault((p.name, p.protocol), p.port)
    owners, bad = _srv_names(svc_name, si.ports)
    for name in bad.values():
        b.left.add(SERVICE_IMPORT, who(si.namespace, si.name), "port", name)
    for key, owner in owners.items():
        b.port_srv(owner, target, target, _srv_head(0, 100, first[key]))


def _endpoint_names(b: _Build) -> None:
    """Spec 2.4: `<hostname>.<clusterid>.<svc>` of each answerable endpoint, with its
    addresses (those of endpoints of the same name merged); `<clusterid>.<svc>` empty."""
    names, left, ep_hosts = b.names, b.left, b.ep_hosts
    cluster_names: dict[str, bytes] = {}
    # the endpoint's own tuple, until a second endpoint merges into it: then a dict (a set in order)
    hosts: dict[bytes, Sequence[bytes] | dict[bytes, None]] = {}
    last: EndpointSlice | None = None
    cn: bytes | None = None
    cn_long = b""  # <clusterid>.<svc> when too long (cn None)
    for sl, ep in b.eps:
        if sl is not last:  # the cluster's name, once per run of one slice
            last, cn = sl, cluster_names.get(sl.cluster)
            if cn is None:
                try:
                    cn = cluster_names[sl.cluster] = prefix(sl.cluster.split("."), b.svc_name)
                except NameTooLong as e:
                    cn_long = e.name
        try:
            if cn is None:  # the endpoint's name, even when <clusterid>.<svc> is already too long
                raise NameTooLong(bytes((len(ep.hostname),)) + ep.hostname.encode() + cn_long)
            host = under(ep.hostname, cn)
        except NameTooLong as e:
            left.add(ENDPOINT_SLICE, who(sl.namespace, sl.name), "endpoint", e.name)
            ep_hosts.append(None)
            continue
        ep_hosts.append(host)
        merged = hosts.get(host)
        if merged is None:
            names.setdefault(cn, EMPTY)  # <clusterid>.<svc>: never has records
            hosts[host] = ep.addresses  # shared with the store: no copy per host
            continue
        if not isinstance(merged, dict):
            merged = hosts[host] = dict.fromkeys(merged)
        merged.update(dict.fromkeys(ep.addresses))
    for host, addrs in hosts.items():
        if type(addrs) is tuple and len(addrs) == 1:  # most: one address, its tuple the name's value
            names[host] = addrs
        else:
            names[host] = _address_rrsets(tuple(addrs) if isinstance(addrs, dict) else addrs)


def _tiered_addresses(b: _Build) -> None:
    """Spec 2.4: the service name's A/AAAA, the endpoints' addresses by family in tier
    order, grouped by tier for rotation."""
    tier_of = b.tier_of
    if len(set(tier_of.values())) == 1:  # one tier (locality off): the addresses in order, one group
        addrs = dict.fromkeys(chain.from_iterable([ep.addresses for _, ep in b.service_eps]))
        v4 = tuple([a for a in addrs if len(a) == 4])
        v6 = tuple([a for a in addrs if len(a) != 4])
        for t, rds in ((_A, v4), (_AAAA, v6)):
            if rds:
                b.node[t] = RRset(t, rds, rotate=len(rds) > 1, groups=(len(rds),))
        return
    tiered: dict[int, dict[bytes, int]] = {_A: {}, _AAAA: {}}
    for sl, ep in b.service_eps:
        tier = tier_of[sl.cluster]
        for a in ep.addresses:
            tiered[family(a)].setdefault(a, tier)
    for rtype, by_addr in tiered.items():
        if by_addr:
            groups = tuple(_run_lengths(list(by_addr.values())))
            b.node[rtype] = RRset(rtype, tuple(by_addr), rotate=len(by_addr) > 1, groups=groups)


def _endpoint_srvs(b: _Build) -> None:
    """Spec 2.4: an SRV per endpoint and named port, targeting the endpoint's name (its
    addresses as Additional); priority = tier, weight spread within it."""
    tier_of, hosts = b.tier_of, b.ep_hosts
    if b.service_eps is not b.eps:  # only this cluster's (only-when-available)
        at = {id(se): h for se, h in zip(b.eps, hosts, strict=True)}
        hosts = [at[id(se)] for se in b.service_eps]
    port_targets: dict[tuple[str, str], dict[tuple[int, bytes], int]] = {}
    last: EndpointSlice | None = None
    named: list[tuple[tuple[str, str], int]] = []  # the named ports of `last`
    tier = 0
    for (sl, _), host in zip(b.service_eps, hosts, strict=True):
        if host is None:
            continue
        if sl is not last:
            last, tier = sl, tier_of[sl.cluster]
            named = [((p.name, p.protocol), p.port) for p in sl.ports if p.name]
        for key, port in named:
            targets = port_targets.get(key)
            if targets is None:
                targets = port_targets[key] = {}
            targets.setdefault((port, host), tier)
    srv_owners, bad = _srv_names(b.svc_name, [Port(n, p, 0) for (n, p) in port_targets])
    if bad:
        for sl in b.slices:
            for k in dict.fromkeys((p.name, p.protocol) for p in sl.ports if (p.name, p.protocol) in bad):
                b.left.add(ENDPOINT_SLICE, who(sl.namespace, sl.name), "port", bad[k])
    for key, owner in srv_owners.items():
        b.port_srv(owner, *_srv_rrset(port_targets[key]))


def _srv_rrset(targets: dict[tuple[int, bytes], int]) -> tuple[tuple[bytes, ...], tuple[bytes, ...], bytes]:
    """The SRV of each (port, target) by its tier: priority = tier, 100 spread in the tier;
    the targets' addresses as Additional. As (rdatas, extra, head) of an RRset."""
    per_tier = Counter(targets.values())
    ports = {port for port, _ in targets}
    hosts = tuple(dict.fromkeys([host for _, host in targets]))
    if len(per_tier) == 1 and len(ports) == 1:  # most: one tier and one port number, one head
        [(tier, n)] = per_tier.items()
        return hosts, hosts, _srv_head(tier, max(1, 100 // n), ports.pop())
    weight = {tier: max(1, 100 // n) for tier, n in per_tier.items()}
    rds = tuple([srv_wire(tier, weight[tier], port, host) for (port, host), tier in targets.items()])
    return rds, hosts, b""


def _service_srv(b: _Build) -> None:
    """The service name's SRV: those of its port names, each once (42/TCP and 42/UDP give
    the same SRV), from all their records (not those left after their cuts): so a cut of it
    notes its true size."""
    if len(b.srv) == 1:  # most: one port name, whose RRset it is (a set already)
        b.node[_SRV] = b.srv[0][0]
    elif b.srv:  # sets, in order
        rds = tuple(dict.fromkeys(chain.from_iterable([joined(rr.head, whole) for rr, whole in b.srv])))
        extra = tuple(dict.fromkeys(chain.from_iterable([rr.extra for rr, _ in b.srv])))
        b.node[_SRV] = RRset(_SRV, rds, extra)


# The makers of a service's records, in order, each with what it reads beyond the
# ServiceImport: those of its type (by `headless`), then those of every service name (which
# may use what the first left in the build). A new kind of record is one line here.
_EVERY: tuple[tuple[Maker, Reads], ...] = ((_service_srv, None),)
_MAKERS: dict[bool, tuple[tuple[Maker, Reads], ...]] = {
    False: ((_vips, None), (_vip_srvs, None), *_EVERY),  # ClusterSetIP, spec 2.3
    True: ((_endpoint_names, _slices_and_locality), (_tiered_addresses, _slices_and_locality),
           (_endpoint_srvs, _slices_and_locality), *_EVERY),  # Headless, spec 2.4
}
# Per type: each distinct `Reads` of its makers, once.
_READS: dict[bool, tuple[Callable[[list[EndpointSlice], Locality], object], ...]] = {
    headless: tuple(dict.fromkeys(r for _, r in makers if r is not None))
    for headless, makers in _MAKERS.items()}


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
    outer, cuts.into = getattr(cuts, "into", None), left.cuts
    try:
        for make, _ in _MAKERS[si.headless]:
            make(b)
    finally:
        cuts.into = outer
    b.names[svc_name] = Node(b.node.values()) if b.node else EMPTY
    return b.names


def reads_slices(si: ServiceImport) -> bool:
    """Whether the service's records depend on its EndpointSlices (or the locality): whether
    any of its makers reads more than the ServiceImport. Headless: yes (spec 2.4);
    ClusterSetIP: no, so endpoint churn behind a VIP rebuilds nothing."""
    return bool(_READS[si.headless])


def inputs(si: ServiceImport, slices: list[EndpointSlice], loc: Locality) -> tuple[object, ...]:
    """What the service's records are made of, as the serial's digest hashes it: the
    ServiceImport and what its makers read (`_MAKERS`). No change here, no new serial."""
    return (si, *[reads(slices, loc) for reads in _READS[si.headless]])
