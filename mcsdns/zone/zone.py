"""The served zone: name -> RRsets, updated one service at a time.

A service change replaces only its names' RRsets and returns a `Change`: the
names it touched, for the response cache, and the records before and after,
for the journal. Answers are rendered here, on demand, and kept by the response
cache (nameserver/cache.py), never in the zone. The SOA serial of a negative answer
is written into each response sent (`Answer.serial_at`), so a new serial
invalidates none of them.
Updates run on the event-loop thread in one synchronous step, so a query sees
the zone either before or after a service change, never half of one; a large
service's change is worked out first (`stage`, off the loop) and then swapped
in by dict updates alone (`commit`).

Until `set_loaded()` (first full sync, or state restored) every name in the
zone answers SERVFAIL, as CoreDNS does before its first sync: never an
authoritative NXDOMAIN from a zone not yet known.

A service in the data whose records are not built yet is in `unbuilt`: a query for
a name under it (`<...>.<svc>.<ns>.svc.<zone>`, or `<ns>.svc.<zone>` for the
services of a namespace) has `build` make them first, so every answer, negative
ones included, is the one the whole zone would give (publish.builder builds the
rest in the background once loaded; `complete` builds them all at once).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import NamedTuple

from ..dns.answer import RR, Answer, render
from ..dns.names import encode_name, is_subdomain, labels, prefix
from ..dns.rdata import SERIAL_FROM_END, SOA, TXT
from ..dns.types import Rcode, RRClass, RRType
from ..kube.apiclient.keys import Key
from ..ops.stats import Put, define
from .rrsets import Names, RRset, RRsets, family, rrsets_at

DNS_SCHEMA_VERSION = "1.0.0"
ROTATIONS_MAX = 8
_ADDRESSES = (RRType.A, RRType.AAAA)
_ANY_ORDER = (RRType.A, RRType.AAAA, RRType.SRV, RRType.TXT, RRType.SOA, RRType.NS)
_REFUSED_TYPES = (RRType.AXFR, RRType.IXFR)  # answered by transfers, over TCP
_CLASSES = (RRClass.IN, RRClass.ANY)


class Change(NamedTuple):
    """What one `set_service` did: the names whose answers changed, and the service's
    records before and after (for the digest and the journal)."""

    key: Key
    old: Names
    new: Names
    names: set[bytes]


class Staged(NamedTuple):
    """One service's change worked out by `Zone.stage`, for `Zone.commit`: the names it
    had (`before`), its new names, those that go, those whose RRsets are new, and both."""

    key: Key
    before: Names
    new: Names
    gone: list[bytes]
    put: Names
    changed: set[bytes]


def _rotations(rrs: list[RR], groups: tuple[int, ...]) -> list[list[RR]]:
    """Up to ROTATIONS_MAX orders of `rrs`, each group (tier) rotated within itself."""
    count = min(ROTATIONS_MAX, max(groups))
    out = []
    for r in range(count):
        order: list[RR] = []
        start = 0
        for size in groups:
            g = rrs[start:start + size]
            k = (r * max(1, size // count)) % size
            order += g[k:] + g[:k]
            start += size
        out.append(order)
    return out


def _nothing(keys: list[Key]) -> None:
    """No builder attached."""


NAMES = define("mcsdns_zone_names", "gauge", "Names in the zone.")
CHANGES = define("mcsdns_zone_changes_total", "counter", "Service changes applied to the zone.")


class Zone:
    """The served zone: every name's RRsets and the positive Answers rendered from them.

    Invariants: only the event-loop thread changes it, one whole service per
    `set_service`, and RRsets are replaced, never changed in place; before `loaded`
    every name in the zone answers SERVFAIL.
    `serial` is the SOA served; only `publish.publisher.ZonePublisher` sets it.
    """

    def __init__(self, zone: str = "clusterset.local", ttl: int = 5,
                 serial: int | None = None) -> None:
        self.origin = encode_name(zone)
        self.ttl = ttl
        self.serial = int(time.time()) & 0xFFFFFFFF if serial is None else serial
        self.svc = prefix(("svc",), self.origin)
        self.names: Names = {}
        self.svc_names: dict[Key, tuple[bytes, ...]] = {}  # a tuple: a third of a set's size
        self.ns_refs: dict[str, int] = {}
        self.soa = RR(self.origin, RRType.SOA, ttl, SOA.for_zone(self.origin, ttl, self.serial).wire())
        ns_target = prefix(("ns", "dns"), self.origin)
        self.names[self.origin] = {
            RRType.SOA: RRset(RRType.SOA, (self.soa.rdata,)),
            RRType.NS: RRset(RRType.NS, (ns_target,)),
        }
        self.names[prefix(("dns-version",), self.origin)] = {
            RRType.TXT: RRset(RRType.TXT, (TXT.of(DNS_SCHEMA_VERSION).wire(),))}
        self.names[self.svc] = {}
        self.names[prefix(("dns",), self.origin)] = {}
        self.names[ns_target] = {}
        self.version = 0  # bumped on every applied change
        self.loaded = False  # False: SERVFAIL for every name in the zone
        self.unbuilt: set[Key] = set()  # services in the data whose records are not here yet
        self.build: Callable[[list[Key]], None] = _nothing  # builds some of them (publish.builder)

    def set_loaded(self) -> bool:
        """Start answering from the data (first sync or restored state); False if it
        already did (the caller drops every answer rendered before)."""
        if self.loaded:
            return False
        self.loaded = True
        self.version += 1
        return True

    def publish(self, put: Put) -> None:
        put(NAMES, len(self.names))
        put(CHANGES, self.version)

    # ---- updates ----

    def set_service(self, key: Key, new: Names) -> Change:
        """Replace the names of one service (empty `new` removes it)."""
        return self.commit(self.stage(key, new))

    def stage(self, key: Key, new: Names) -> Staged:
        """What replacing `key`'s names with `new` changes, computed without changing the
        zone: may run off the loop while this service's names stay as they are."""
        old = self.svc_names.get(key, ())
        names = self.names
        before = {n: names[n] for n in old} if old else {}  # none, on a first load
        gone = [n for n in old if n not in new] if old else []
        put = new  # less those already in the zone with the same RRsets (none, on a first load)
        if common := new.keys() & names.keys():
            put = {n: rrsets for n, rrsets in new.items() if n not in common or names[n] != rrsets}
        changed = set(gone)
        changed.update(put)
        if put is not new and changed:  # the names whose Additional (by name) changed too
            for n, rrsets in new.items():
                if n not in changed and not isinstance(rrsets, tuple) and any(
                        rr.extra and not changed.isdisjoint(rr.extra) for rr in rrsets.values()):
                    changed.add(n)
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
                ns_name = prefix((key[0],), self.svc)  # fits: the service's names did
                del names[ns_name]
                changed.add(ns_name)
        elif new and not had:
            refs = self.ns_refs.get(key[0], 0)
            self.ns_refs[key[0]] = refs + 1
            if not refs:  # the namespace's first service: its name (in the zone while it has any)
                ns_name = prefix((key[0],), self.svc)
                if ns_name not in names:
                    names[ns_name] = {}
                    changed.add(ns_name)
        if new:
            self.svc_names[key] = tuple(new)
        self.version += 1
        return Change(key, st.before, new, changed)

    def set_serial(self, serial: int) -> bytes:
        """Serve a new SOA serial at the apex; returns the apex, whose answers changed."""
        self.serial = serial
        self.soa = RR(self.origin, RRType.SOA, self.ttl, SOA.for_zone(self.origin, self.ttl, serial).wire())
        apex = rrsets_at(self.names[self.origin])
        self.names[self.origin] = {**apex, RRType.SOA: RRset(RRType.SOA, (self.soa.rdata,))}
        return self.origin

    def complete(self) -> None:
        """Build the records of every service not built yet (a transfer, `mcsdns records`)."""
        if self.unbuilt:
            self.build(list(self.unbuilt))

    def _wanted(self, qname: bytes) -> bool:
        """Build the unbuilt services `qname` may be a name of (it is not in the zone): its
        service's, or every one of the namespace for `<ns>.svc.<zone>`; whether any was."""
        cut = len(qname) - len(self.svc)
        if cut <= 0 or not qname.endswith(self.svc):
            return False
        offsets = [i for i in labels(qname) if i < cut]
        if not offsets or offsets[-1] + qname[offsets[-1]] + 1 != cut:
            return False  # not on a label boundary
        text = [qname[i + 1:i + 1 + qname[i]].decode("latin-1") for i in offsets[-2:]]
        if len(offsets) == 1:
            keys = [k for k in self.unbuilt if k[0] == text[0]]
        else:
            keys = [k] if (k := (text[1], text[0])) in self.unbuilt else []
        if keys:
            self.build(keys)
        return bool(keys)

    # ---- answers (slow path: rendering on a cache miss) ----

    def _additional(self, targets: tuple[bytes, ...]) -> list[RR]:
        """The A and AAAA records of each of `targets` (names of the same service as the
        RRset that names them, so in the zone with it), for Additional."""
        names, ttl, out = self.names, self.ttl, []
        for o in targets:
            rrsets = names.get(o)
            if isinstance(rrsets, tuple):  # `Addresses`
                out += [RR(o, family(rd), ttl, rd) for rd in rrsets]
            elif rrsets:
                for t in _ADDRESSES:
                    rrset = rrsets.get(t)
                    if rrset is not None:
                        out += [RR(o, t, ttl, rd) for rd in rrset.rdatas]
        return out

    def in_zone(self, qname: bytes) -> bool:
        """qname (lowercase wire) is the origin or below it, on a label boundary."""
        return is_subdomain(qname, self.origin)

    def answer(self, qname: bytes, tail: bytes) -> Answer:
        """The Answer, rendered now, for a valid lowercase wire qname and the question's
        type+class bytes."""
        rrsets = self.names.get(qname)
        if rrsets is None and self.unbuilt and self.loaded and self._wanted(qname):
            rrsets = self.names.get(qname)
        if rrsets is None:
            return self._render_missing(qname, tail)
        return self._render_node(qname, rrsets_at(rrsets), tail)

    def _negative(self, qname: bytes, qtype: int, rcode: int) -> Answer:
        """NXDOMAIN or NODATA: the SOA alone in Authority, its serial where the cache patches it."""
        ans = render(qname, qtype, rcode, [], [self.soa], [])
        ans.serial_at = SERIAL_FROM_END
        return ans

    def _refused(self, qname: bytes, qtype: int, qclass: int) -> Answer | None:
        if qclass not in _CLASSES or qtype in _REFUSED_TYPES:
            return render(qname, qtype, Rcode.REFUSED, [], [], [])
        if not self.loaded:
            return render(qname, qtype, Rcode.SERVFAIL, [], [], [])
        return None

    def _render_missing(self, qname: bytes, tail: bytes) -> Answer:
        qtype, qclass = struct.unpack("!HH", tail)
        if not self.in_zone(qname):
            return render(qname, qtype, Rcode.REFUSED, [], [], [])
        return self._refused(qname, qtype, qclass) or self._negative(qname, qtype, Rcode.NXDOMAIN)

    def _render_node(self, qname: bytes, rrsets: RRsets, tail: bytes) -> Answer:
        qtype, qclass = struct.unpack("!HH", tail)
        refused = self._refused(qname, qtype, qclass)
        if refused is not None:
            return refused
        rtype = qtype
        if qtype == RRType.ANY:  # RFC 8482: one RRset is enough
            rtype = next((t for t in _ANY_ORDER if t in rrsets), 0)
        rrset = rrsets.get(rtype)
        if rrset is None:
            return self._negative(qname, qtype, Rcode.NOERROR)
        ttl = self.ttl
        rrs = [RR(None, rrset.rtype, ttl, rd) for rd in rrset.records()]
        rotations = [rrs]
        if rrset.rotate and len(rrs) > 1:
            rotations = _rotations(rrs, rrset.groups or (len(rrs),))
        extra = self._additional(rrset.extra)
        full = render(qname, qtype, Rcode.NOERROR, rotations, [], extra)
        if extra:
            full.fallback = render(qname, qtype, Rcode.NOERROR, rotations, [], [])
        return full
