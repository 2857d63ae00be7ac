"""The served zone: name -> Node, updated one service at a time.

Each Node holds its RRsets and caches the Answers rendered from them, keyed by
the question's type+class bytes. A service change replaces only its nodes
(unchanged nodes keep their cache); negative Answers (NXDOMAIN, NODATA) come
from a bounded cache by name, from which a change drops only the names it
touched. Their SOA serial is written into each response by the handler
(`Answer.serial_at`), so a new serial invalidates none of them. Listeners
(`on_change`) hear which names changed (None: all of them) and the new
serial. Updates run on
the event-loop thread in one synchronous step, so a query sees the zone
either before or after a service change, never half of one.

Until `set_loaded()` (first full sync, or state restored) every name in the
zone answers SERVFAIL, as CoreDNS does before its first sync: never an
authoritative NXDOMAIN from a zone not yet known. The flag is read only when
an Answer is rendered; loading empties every cache, so no query pays for it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Collection

from .ops.stats import Put, define
from .records import Names, RRset
from .store import ServiceKey
from .wire import (
    AAAA,
    ANY,
    AXFR,
    CLASS_ANY,
    CLASS_IN,
    IXFR,
    NOERROR,
    NS,
    NXDOMAIN,
    REFUSED,
    RR,
    SERVFAIL,
    SOA,
    SRV,
    TXT,
    A,
    Answer,
    encode_name,
    render,
    soa_rdata,
    txt_rdata,
)

DNS_SCHEMA_VERSION = "1.0.0"
NEGATIVE_CACHE_MAX = 20_000  # negative answers kept (each name at most 255 octets)
ROTATIONS_MAX = 8
_ANY_ORDER = (A, AAAA, SRV, TXT, SOA, NS)


class Node(dict[bytes, Answer]):
    """RRsets at one name; the dict itself caches rendered Answers by type+class."""

    __slots__ = ("rrsets",)

    def __init__(self, rrsets: dict[int, RRset]) -> None:
        super().__init__()
        self.rrsets = rrsets


def _label(s: str) -> bytes:
    b = s.encode("ascii")
    return bytes((len(b),)) + b


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


NAMES = define("mcsdns_zone_names", "gauge", "Names in the zone.")
CHANGES = define("mcsdns_zone_changes_total", "counter", "Service changes applied to the zone.")


class Zone:
    """The served zone: every name's RRsets and the Answers rendered from them.

    Invariants: only the event-loop thread changes it, one whole service per
    `set_service`; a Node's cached Answers always match its RRsets (a change replaces
    the Node); every cached negative Answer is for a name not in `names`; before
    `loaded` every name in the zone answers SERVFAIL.
    """

    def __init__(self, zone: str = "clusterset.local", ttl: int = 5,
                 serial: int | None = None) -> None:
        self.origin = encode_name(zone)
        self.ttl = ttl
        self.serial = int(time.time()) & 0xFFFFFFFF if serial is None else serial
        self.svc = _label("svc") + self.origin
        self.names: dict[bytes, Node] = {}
        self.negative: dict[bytes, dict[bytes, Answer]] = {}  # name -> type+class -> Answer
        self.negative_count = 0
        self.svc_names: dict[ServiceKey, set[bytes]] = {}
        self.ns_refs: dict[str, int] = {}
        self.soa = RR(self.origin, SOA, ttl, soa_rdata(self.origin, ttl, self.serial))
        ns_target = _label("ns") + _label("dns") + self.origin
        self.names[self.origin] = Node({
            SOA: RRset(SOA, (self.soa.rdata,)),
            NS: RRset(NS, (ns_target,)),
        })
        self.names[_label("dns-version") + self.origin] = Node(
            {TXT: RRset(TXT, (txt_rdata(DNS_SCHEMA_VERSION),))})
        self.names[self.svc] = Node({})
        self.names[_label("dns") + self.origin] = Node({})
        self.names[ns_target] = Node({})
        self.version = 0  # bumped on every applied change
        # fn(names, serial): the names whose answers changed (None: every name), and the
        # new SOA serial (4 octets) that negative answers now carry, or None
        self.on_change: list[Callable[[Collection[bytes] | None, bytes | None], None]] = []
        # (service, its old names' RRsets, its new names) per set_service, for the
        # serial and journal (mcsdns.journal); None while nobody collects them
        self.changes: list[tuple[ServiceKey, Names, Names]] | None = None
        self.loaded = False  # False: SERVFAIL for every name in the zone

    def set_loaded(self) -> None:
        """Start answering from the data (first sync or restored state): forget the
        SERVFAIL answers rendered so far."""
        if self.loaded:
            return
        self.loaded = True
        for node in self.names.values():
            node.clear()
        self.negative.clear()
        self.negative_count = 0
        self._changed(None)

    def _changed(self, names: Collection[bytes] | None) -> None:
        if names is not None:
            for n in names:
                gone = self.negative.pop(n, None)
                if gone is not None:
                    self.negative_count -= len(gone)
        self.version += 1
        for fn in self.on_change:
            fn(names, None)

    def publish(self, put: Put) -> None:
        put(NAMES, len(self.names))
        put(CHANGES, self.version)

    # ---- updates ----

    def set_service(self, key: ServiceKey, new: Names) -> None:
        """Replace the names of one service (empty `new` removes it)."""
        old = self.svc_names.pop(key, set())
        names = self.names
        if self.changes is not None:
            self.changes.append((key, {n: names[n].rrsets for n in old}, new))
        changed = old.difference(new)
        for n in changed:
            del names[n]
        for n, rrsets in new.items():
            cur = names.get(n)
            if cur is None or cur.rrsets != rrsets:
                names[n] = Node(rrsets)
                changed.add(n)
        ns_name = _label(key[0]) + self.svc
        if old and not new:
            self.ns_refs[key[0]] -= 1
            if not self.ns_refs[key[0]]:
                del self.ns_refs[key[0]]
                del names[ns_name]
                changed.add(ns_name)
        elif new and not old:
            self.ns_refs[key[0]] = self.ns_refs.get(key[0], 0) + 1
            if ns_name not in names:
                names[ns_name] = Node({})
                changed.add(ns_name)
        if new:
            self.svc_names[key] = set(new)
        self._changed(changed)

    def set_serial(self, serial: int) -> None:
        """Serve a new SOA serial (at the apex and, through the handler, in every negative answer)."""
        self.serial = serial
        self.soa = RR(self.origin, SOA, self.ttl, soa_rdata(self.origin, self.ttl, serial))
        apex = self.names[self.origin].rrsets
        self.names[self.origin] = Node({**apex, SOA: RRset(SOA, (self.soa.rdata,))})
        for fn in self.on_change:
            fn((self.origin,), struct.pack("!I", serial))

    # ---- answers (slow path: rendering on a cache miss) ----

    def in_zone(self, qname: bytes) -> bool:
        """qname (lowercase wire) is the origin or below it, on a label boundary."""
        if not qname.endswith(self.origin):
            return False
        cut, i = len(qname) - len(self.origin), 0
        while i < cut:
            i += qname[i] + 1
        return i == cut

    def answer(self, qname: bytes, tail: bytes) -> Answer:
        """The Answer for a valid lowercase wire qname and the question's type+class
        bytes; rendered and cached on first use."""
        node = self.names.get(qname)
        if node is not None:
            return node.get(tail) or self.node_answer(qname, node, tail)
        return self.missing(qname, tail)

    def node_answer(self, qname: bytes, node: Node, tail: bytes) -> Answer:
        by_type = self.negative.get(qname)
        ans = by_type.get(tail) if by_type is not None else None
        if ans is not None:
            return ans
        ans = self._render_node(qname, node, tail)
        if ans.serial_at:  # NODATA carries the SOA: kept with the negative answers
            self._keep_negative(qname, tail, ans)
        else:
            node[tail] = ans
        return ans

    def missing(self, qname: bytes, tail: bytes) -> Answer:
        """The Answer for a name that has no node: NXDOMAIN or REFUSED."""
        by_type = self.negative.get(qname)
        ans = by_type.get(tail) if by_type is not None else None
        if ans is None:
            ans = self._render_missing(qname, tail)
            self._keep_negative(qname, tail, ans)
        return ans

    def _keep_negative(self, qname: bytes, tail: bytes, ans: Answer) -> None:
        if self.negative_count >= NEGATIVE_CACHE_MAX:
            self.negative.clear()
            self.negative_count = 0
        self.negative.setdefault(qname, {})[tail] = ans
        self.negative_count += 1

    def _negative(self, qname: bytes, qtype: int, rcode: int) -> Answer:
        """NXDOMAIN or NODATA: the SOA alone in Authority, its serial 20 octets from the end."""
        ans = render(qname, qtype, rcode, [], [self.soa], [])
        ans.serial_at = 20
        return ans

    def _render_missing(self, qname: bytes, tail: bytes) -> Answer:
        qtype, qclass = struct.unpack("!HH", tail)
        if not self.in_zone(qname) or qclass not in (CLASS_IN, CLASS_ANY) or qtype in (AXFR, IXFR):
            return render(qname, qtype, REFUSED, [], [], [])
        if not self.loaded:
            return render(qname, qtype, SERVFAIL, [], [], [])
        return self._negative(qname, qtype, NXDOMAIN)

    def _render_node(self, qname: bytes, node: Node, tail: bytes) -> Answer:
        qtype, qclass = struct.unpack("!HH", tail)
        if qclass not in (CLASS_IN, CLASS_ANY) or qtype in (AXFR, IXFR):
            return render(qname, qtype, REFUSED, [], [], [])
        if not self.loaded:
            return render(qname, qtype, SERVFAIL, [], [], [])
        rtype = qtype
        if qtype == ANY:  # RFC 8482: one RRset is enough
            rtype = next((t for t in _ANY_ORDER if t in node.rrsets), 0)
        rrset = node.rrsets.get(rtype)
        if rrset is None:
            return self._negative(qname, qtype, NOERROR)
        ttl = self.ttl
        rrs = [RR(None, rrset.rtype, ttl, rd) for rd in rrset.rdatas]
        rotations = [rrs]
        if rrset.rotate and len(rrs) > 1:
            rotations = _rotations(rrs, rrset.groups or (len(rrs),))
        extra = [RR(o, t, ttl, rd) for o, t, rd in rrset.extra]
        full = render(qname, qtype, NOERROR, rotations, [], extra)
        if extra:
            full.fallback = render(qname, qtype, NOERROR, rotations, [], [])
        return full
