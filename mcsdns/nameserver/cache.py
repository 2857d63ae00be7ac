"""The response cache: every answer kept between queries, and its counters.

It owns the question memo (`hot`), the rendered answers (`positive`, bounded by
the zone's names and types; `negative`: NXDOMAIN, NODATA, REFUSED, SERVFAIL, with
a bound of its own), the whole-response
tables per transport (`tables`, also read by the C extension), rotation of
answers that rotate, writing the current SOA serial into negative responses,
invalidation when the zone changes, and the counts of responses and sizes. An
answer whose rendering raises (a bug) is a SERVFAIL, counted in `panics` and kept.

Invariants: a kept response is only ever the one the zone would render now (a
zone change drops the entries of the names it touched; the serial is patched
in); every table has a bound in entries and the tables together one in octets.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Collection
from operator import attrgetter, mul

from ..dns.answer import Answer, render
from ..dns.names import is_wire_name
from ..dns.types import Rcode, RRType, qtype_label
from ..ops.stats import Put, define, put_histogram
from ..zone.zone import Zone
from . import CACHE_BYTES
from .panics import Panics
from .response import Canned, keep, replayer

HOT_MAX = 16_384  # question memo entries (each key at most 259 octets)
NEGATIVE_MAX = 20_000  # negative answers kept (each name at most 255 octets)
CANNED_MAX = 50_000  # response cache entries per transport
ENTRY_COST = 320  # octets a response cache entry costs beyond its key and response (measured)
INVALIDATE_ALL_ABOVE = 1024  # names of one change above which the whole cache may go
MAX_GROUPS = 1024  # groups of response cache entries of one size per transport (then: of one size bucket)
_XFR = (RRType.AXFR, RRType.IXFR)

# Upper bounds of the response size histogram (octets), as CoreDNS uses.
SIZE_BOUNDS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16000, 32000, 48000, 64000)

RESPONSES = define("mcsdns_dns_responses_total", "counter",
                   "DNS responses by transport, query type and rcode.", ("proto", "type", "rcode"))
RESPONSE_SIZE = define("mcsdns_dns_response_size_bytes", "histogram",
                       "Size of the responses counted in mcsdns_dns_responses_total.", ("proto",))
CACHE_HITS = define("mcsdns_cache_hits_total", "counter", "Responses served whole from the response cache.")
CACHE_MISSES = define("mcsdns_cache_misses_total", "counter",
                      "Fast-path responses assembled from pre-rendered answers.")
CACHE_BYTES_USED = define("mcsdns_cache_bytes", "gauge",
                          "Octets the response cache holds (keys, responses and overhead, estimated).")
CACHE_FLUSHES = define("mcsdns_cache_flushes_total", "counter",
                       "Times the response cache was emptied because it reached its byte or entry limit.")


def size_bucket(n: int) -> int:
    """Index of the first bound >= n (len(SIZE_BOUNDS) for +Inf)."""
    return bisect_left(SIZE_BOUNDS, n)


Table = dict[bytes, Canned]  # whole query after the ID -> its response after the ID
Labels = tuple[str, str]  # `Answer.key`: type and rcode, as in mcsdns_dns_responses_total
# a table's entries by labels and size (>= 0), or by labels and size bucket (-1 - bucket)
Groups = dict[tuple[Labels, int], dict[Canned, None]]
_HITS, _SIZE = attrgetter("hits"), attrgetter("size")


def group_sums(size: int, entries: Collection[Canned]) -> tuple[int, int, int]:
    """The responses sent from the `entries` of a group (`size` as in `Groups`), their
    octets and their size bucket, summed without a Python loop."""
    n = sum(map(_HITS, entries))
    if size >= 0:
        return n, n * size, size_bucket(size)
    return n, sum(map(mul, map(_SIZE, entries), map(_HITS, entries))), -1 - size


class SizeHistogram:
    """Response sizes of one transport: counts per SIZE_BOUNDS bucket, and their sum."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(SIZE_BOUNDS) + 1)
        self.total = 0

    def add(self, size: int, n: int = 1) -> None:
        self.buckets[bisect_left(SIZE_BOUNDS, size)] += n  # size_bucket, inlined: once per response not kept
        self.total += size * n


class ResponseCache:
    """Answers and whole responses kept for the zone, with their counters (see the module)."""

    def __init__(self, zone: Zone, cache_bytes: int = CACHE_BYTES) -> None:
        self.zone = zone
        self.cache_bytes = cache_bytes
        self.used = 0  # estimated octets in `tables`, both transports
        self.flushes = 0
        self.hot: dict[bytes, Answer] = {}  # question exactly as received -> Answer
        self.positive: dict[bytes, dict[bytes, Answer]] = {}  # name -> type+class -> Answer
        self.negative: dict[bytes, dict[bytes, Answer]] = {}  # name -> type+class -> Answer
        self.negative_count = 0
        self.tables: tuple[Table, Table] = ({}, {})  # by tcp
        self.keys: tuple[dict[bytes, list[bytes]], dict[bytes, list[bytes]]] = ({}, {})  # by lowercase name
        # responses not kept, by the (type, rcode) labels of `Answer.key`: a fixed set
        self.counts: tuple[dict[Labels, int], dict[Labels, int]] = ({}, {})
        # the entries of `tables` again, grouped to be counted at scrape in a few sums
        # (at most MAX_GROUPS of one size, then one per size bucket and labels)
        self.groups: tuple[Groups, Groups] = ({}, {})
        self.sizes = (SizeHistogram(), SizeHistogram())  # by tcp; table entries not yet folded
        self.misses = 0  # responses not served whole from `tables`
        self._folded_hits = 0  # hits of entries already forgotten
        # the zone's SOA serial, written into every negative response sent (also by _batchio)
        self.serial = bytearray(struct.pack("!I", zone.serial))
        self.panics = Panics()  # internal errors: rendering here, answering in the listeners
        self.hit = replayer(self.tables, self.serial)  # (query, tcp) -> the kept response, or None

    # ---- answers ----

    def answer(self, lname: bytes, tail: bytes) -> Answer:
        """The zone's Answer for a valid lowercase wire name and type+class bytes,
        rendered once and kept."""
        by_type = self.positive.get(lname)
        ans = by_type.get(tail) if by_type is not None else None
        if ans is not None:
            return ans
        by_type = self.negative.get(lname)
        ans = by_type.get(tail) if by_type is not None else None
        if ans is not None:
            return ans
        try:
            ans = self.zone.answer(lname, tail)
        except Exception as e:  # a bug: SERVFAIL, kept like any answer until the name changes
            qtype = int.from_bytes(tail[:2], "big")
            self.panics.note(e, f"a {qtype_label(qtype)} query (rendering)")
            ans = render(lname, qtype, Rcode.SERVFAIL, [], [], [])
        if ans.serial_at or ans.rcode:
            if self.negative_count >= NEGATIVE_MAX:
                self.negative.clear()
                self.negative_count = 0
            self.negative.setdefault(lname, {})[tail] = ans
            self.negative_count += 1
        else:  # an RRset of the name: at most (types + ANY) x (IN, ANY) per name
            self.positive.setdefault(lname, {})[tail] = ans
        return ans

    def lookup(self, q: bytes) -> Answer | None:
        """The Answer for a question (name + type + class as received), memoised; None
        if the name is not a valid uncompressed wire name, or for AXFR/IXFR."""
        ans = self.hot.get(q)
        if ans is not None:
            return ans
        lname = q[:-4].lower()
        tail = q[-4:]
        if tail[0] == 0 and tail[1] in _XFR:
            return None
        by_type = self.positive.get(lname)
        ans = by_type.get(tail) if by_type is not None else None
        if ans is None:
            if lname not in self.zone.names and not is_wire_name(lname):
                return None
            ans = self.answer(lname, tail)
        if len(self.hot) >= HOT_MAX:
            self.hot.clear()
        self.hot[q] = ans
        return ans

    # ---- whole responses ----

    def keep(self, tcp: bool, data: bytes, q: bytes, out: bytes, ans: Answer, idx: int, opt: bytes,
             limit: int) -> None:
        """Keep `out`, the response to `data` rendered by `response.render` (question `q`,
        from `ans` with header `idx`, `opt` and `limit`), unless it is too large or cannot
        be replayed; counted here either way."""
        key = data[2:]
        cost = len(key) + len(out) + ENTRY_COST
        c = keep(out, ans, idx, q, opt, limit) if cost <= self.cache_bytes else None
        if c is None:
            self.count(ans, tcp, out)
            return
        table = self.tables[tcp]
        if len(table) >= CANNED_MAX or self.used + cost > self.cache_bytes:
            self.flushes += 1
            self._drop_responses(None)
        self.used += cost
        table[key] = c
        self.keys[tcp].setdefault(q[:-4].lower(), []).append(key)
        group = self.groups[tcp].get((ans.key, c.size))
        if group is None:
            group = self._new_group(tcp, c)
        group[c] = None

    def count(self, ans: Answer, tcp: bool, out: bytes) -> None:
        """Count a response that is not kept (kept ones are counted at scrape)."""
        counts = self.counts[tcp]
        counts[ans.key] = counts.get(ans.key, 0) + 1
        self.sizes[tcp].add(len(out))

    # ---- changes ----

    def set_serial(self, serial: int) -> None:
        """Negative responses carry `serial` from now on."""
        self.serial[:] = struct.pack("!I", serial)

    def invalidate(self, names: Collection[bytes] | None) -> None:
        """The zone changed: forget what was kept for `names` (None: everything),
        keeping the counts. More than INVALIDATE_ALL_ABOVE names, and more than the
        cache holds, forget everything: the cost is bounded by the cache then."""
        if names is not None and self._forgets_all(len(names)):
            names = None
        if names is None:
            self.positive.clear()
            self.negative.clear()
            self.negative_count = 0
        else:
            for n in names:
                self.positive.pop(n, None)
                gone = self.negative.pop(n, None)
                if gone is not None:
                    self.negative_count -= len(gone)
        self._drop_responses(names)

    def invalidate_all_of(self, groups: list[set[bytes]]) -> None:
        """`invalidate` of the names of every group: their union is built only when not
        everything goes (at a first load of 10k services, 74k names: 15 ms)."""
        if len(groups) == 1:
            self.invalidate(groups[0])
        elif self._forgets_all(sum(len(g) for g in groups)):  # the sum: at most the union's size
            self.invalidate(None)
        else:
            self.invalidate(set().union(*groups))

    def _forgets_all(self, n: int) -> bool:
        """Whether invalidating `n` names forgets everything (more than the cache holds)."""
        return n > INVALIDATE_ALL_ABOVE and n > (
            len(self.positive) + len(self.negative) + sum(len(k) for k in self.keys))

    def _drop_responses(self, names: Collection[bytes] | None) -> None:
        """Forget the memo and the whole responses kept for `names` (None: all of them;
        the tables' byte or entry limit was reached), folding their counts."""
        self.hot.clear()
        if names is None:
            self.used = 0
        for tcp, (table, keys, groups) in enumerate(zip(self.tables, self.keys, self.groups, strict=True)):
            if names is None:
                for (labels, size), group in groups.items():
                    self._fold(tcp, labels, size, group)
                table.clear()
                keys.clear()
                groups.clear()
                continue
            for n in names:
                for k in keys.pop(n, ()):
                    c = table.pop(k, None)
                    if c is not None:
                        self.used -= len(k) + c.size + ENTRY_COST
                        self._fold(tcp, *self._ungroup(tcp, c), (c,))

    def _new_group(self, tcp: bool, c: Canned) -> dict[Canned, None]:
        """The group for a new entry `c` of `tables` whose labels and size have none."""
        groups = self.groups[tcp]
        if len(groups) < MAX_GROUPS:
            group: dict[Canned, None] = {}
            groups[c.key, c.size] = group
            return group
        return groups.setdefault((c.key, -1 - size_bucket(c.size)), {})

    def _ungroup(self, tcp: int, c: Canned) -> tuple[Labels, int]:
        """Take an entry being forgotten out of its group; the group's key."""
        groups = self.groups[tcp]
        k = (c.key, c.size)
        group = groups.get(k)
        if group is None or c not in group:
            k = (c.key, -1 - size_bucket(c.size))
            group = groups[k]
        del group[c]
        if not group:
            del groups[k]
        return k

    def _fold(self, tcp: int, labels: Labels, size: int, entries: Collection[Canned]) -> None:
        """Count the responses sent from `entries` (of one transport and group, see
        `Groups`), which are being forgotten."""
        n, octets, bucket = group_sums(size, entries)
        counts, h = self.counts[tcp], self.sizes[tcp]
        counts[labels] = counts.get(labels, 0) + n
        h.buckets[bucket] += n
        h.total += octets
        self._folded_hits += n - len(entries)  # each entry's first use was a miss

    # ---- counters ----

    def totals(self, tcp: bool) -> tuple[dict[Labels, int], list[int], int, int]:
        """One transport's responses by (type, rcode) labels, response size bucket counts
        (non-cumulative) and sum of sizes, and hits of `tables` entries not yet folded:
        the folded counts plus one sum per group of entries (a scrape costs little
        Python per entry whatever the queries were)."""
        counts = dict(self.counts[tcp])
        h = self.sizes[tcp]
        buckets, total, hits = list(h.buckets), h.total, 0
        for (labels, size), group in self.groups[tcp].items():
            n, octets, bucket = group_sums(size, group)
            counts[labels] = counts.get(labels, 0) + n
            buckets[bucket] += n
            total += octets
            hits += n - len(group)  # each entry's first use was a miss
        return counts, buckets, total, hits

    def hits(self) -> int:
        """Responses served whole from `tables`."""
        return self._folded_hits + self.totals(False)[3] + self.totals(True)[3]

    def responses(self, tcp: bool) -> dict[Labels, int]:
        """Responses by (type, rcode) labels for one transport."""
        return self.totals(tcp)[0]

    def publish(self, put: Put) -> None:
        """Samples of the counters above (`stats.Publisher`)."""
        hits = self._folded_hits
        for proto, tcp in (("udp", False), ("tcp", True)):
            counts, buckets, total, kept_hits = self.totals(tcp)
            for (type_, rcode_), n in counts.items():
                put(RESPONSES, n, proto=proto, type=type_, rcode=rcode_)
            put_histogram(put, RESPONSE_SIZE, SIZE_BOUNDS, buckets, total, proto=proto)
            hits += kept_hits
        put(CACHE_HITS, hits)
        put(CACHE_MISSES, self.misses)
        put(CACHE_BYTES_USED, self.used)
        put(CACHE_FLUSHES, self.flushes)
