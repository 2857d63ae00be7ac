"""Query in, response bytes out.

The fast path accepts the common shape of a query (one question, no
compression, at most one version-0 OPT) with slicing only, then looks up a
pre-rendered Answer and concatenates. Everything else goes to the slow path,
which parses strictly and answers FORMERR, NOTIMP, BADVERS or REFUSED, or
drops the packet.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection

from . import tsig
from .ops.stats import Put, define, put_histogram
from .wire import (
    AXFR,
    BADVERS,
    EDNS_SIZE,
    FORMERR,
    IXFR,
    MAX_TCP,
    NOTAUTH,
    NOTIMP,
    OPT_DO0,
    OPT_DO1,
    RCODE_NAMES,
    Answer,
    Drop,
    FormErr,
    Query,
    error_response,
    is_wire_name,
    opt_record,
    parse_query,
    qtype_label,
)
from .zone import Zone

try:  # the C base lets the batched UDP path answer cache hits without calling respond()
    from .server._batchio import Canned as _CannedBase
except ImportError:  # not built: the same fields in Python
    from ._canned import CannedBase as _CannedBase

log = logging.getLogger("mcsdns.query")

_QD1 = b"\x00\x01\x00\x00\x00\x00"  # QDCOUNT=1 ANCOUNT=0 NSCOUNT=0
_AR0, _AR1 = b"\x00\x00", b"\x00\x01"
_OPT_HEAD = b"\x00\x00\x29"  # root owner, type OPT
_XFR_TYPES = (AXFR, IXFR)
HOT_MAX = 16_384  # question memo entries (each key at most 259 octets)
CANNED_MAX = 50_000  # response cache entries per transport
CACHE_BYTES = 32 << 20  # default response cache budget, both transports together
ENTRY_COST = 320  # octets a response cache entry costs beyond its key and response (measured)


# Upper bounds of the response size histogram (octets), as CoreDNS uses.
SIZE_BOUNDS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16000, 32000, 48000, 64000)

RESPONSES = define("mcsdns_dns_responses_total", "counter",
                   "DNS responses by transport, query type and rcode.", ("proto", "type", "rcode"))
SLOW_PATH = define("mcsdns_dns_slow_path_total", "counter", "Queries off the fast path, by outcome "
                   "(parsed, formerr, notimp, badvers, dropped; tsig_signed, tsig_badkey, tsig_badsig, "
                   "tsig_badtime, tsig_badtrunc).", ("outcome",))
RESPONSE_SIZE = define("mcsdns_dns_response_size_bytes", "histogram",
                       "Size of the responses counted in mcsdns_dns_responses_total.", ("proto",))
CACHE_HITS = define("mcsdns_cache_hits_total", "counter", "Responses served whole from the response cache.")
CACHE_MISSES = define("mcsdns_cache_misses_total", "counter",
                      "Fast-path responses assembled from pre-rendered answers.")
CACHE_BYTES_USED = define("mcsdns_cache_bytes", "gauge",
                          "Octets the response cache holds (keys, responses and overhead, estimated).")
CACHE_FLUSHES = define("mcsdns_cache_flushes_total", "counter",
                       "Times the response cache was emptied because it reached its byte or entry limit.")


def with_serial(out: bytes, at: int, serial: bytearray) -> bytes:
    """A negative response with the zone's current SOA serial `at` octets before its end."""
    return out[:-at] + serial + out[-at + 4:]


def size_bucket(n: int) -> int:
    """Index of the first bound >= n (len(SIZE_BOUNDS) for +Inf)."""
    return bisect_left(SIZE_BOUNDS, n)


class Canned(_CannedBase):
    """A whole response minus its ID, with its hit count and metrics labels.
    For an answer that rotates, `out` is header + question and each use
    appends `bodies[rot]` (rot then advances) and `tail` (its OPT record);
    otherwise `bodies` is None and `out` is all of it."""

    __slots__ = ("key", "size", "bucket")

    def __init__(self, out: bytes, key: tuple[int, int], size: int,
                 rotating: Answer | None = None, tail: bytes = b"", serial_at: int = 0) -> None:
        self.out, self.hits, self.key, self.tail = out, 1, key, tail
        self.serial_at = serial_at  # a negative answer: the current serial goes this far before the end
        self.bodies, self.rot = (rotating.bodies, rotating.rot) if rotating is not None else (None, 0)
        self.size, self.bucket = size, size_bucket(size)  # of the whole response


class SizeHistogram:
    """Response sizes of one transport: counts per SIZE_BOUNDS bucket, and their sum."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(SIZE_BOUNDS) + 1)
        self.total = 0

    def add(self, size: int, n: int = 1) -> None:
        self.buckets[size_bucket(size)] += n
        self.total += size * n


class Handler:
    """Answers queries from `zone`. Response cache: a query of the common shape
    (one question, no EDNS option, so at most 282 octets) is kept with its
    response while the cache holds under `cache_bytes`; reaching it empties
    the cache. Larger queries and those with EDNS options are answered, never kept.

    Invariants: `respond` returns one message per query (None: drop it); a cached
    response is only ever the one the zone would render now (a zone change drops the
    entries of the names it touched, and the SOA serial is patched in)."""

    def __init__(self, zone: Zone, cache_bytes: int = CACHE_BYTES) -> None:
        self.zone = zone
        self.cache_bytes = cache_bytes
        self.cache_used = 0  # estimated octets in `canned`, both transports
        self.cache_flushes = 0
        self.slow_count: Counter[str] = Counter()  # slow-path outcomes
        # (qtype, rcode) -> responses per transport; read by `publish`
        self.udp_counts: dict[tuple[int, int], int] = {}
        self.tcp_counts: dict[tuple[int, int], int] = {}
        # question exactly as received -> Answer; a memo emptied on every zone change
        self.hot: dict[bytes, Answer] = {}
        # whole query after the ID -> its response after the ID, per transport; a zone
        # change drops the entries of the names it changed (found by `keys`)
        self.canned: tuple[dict[bytes, Canned], dict[bytes, Canned]] = ({}, {})
        self.keys: tuple[dict[bytes, list[bytes]], dict[bytes, list[bytes]]] = ({}, {})  # by lowercase name
        self.sizes = (SizeHistogram(), SizeHistogram())  # by tcp; canned entries not yet folded
        self.cache_misses = 0  # responses not served whole from `canned`
        self._folded_hits = 0  # canned hits of entries already forgotten
        self.tsig_keys: dict[bytes, tsig.Key] = {}  # by lowercase wire name
        # the zone's SOA serial, written into every negative answer sent (also by _batchio)
        self.serial = bytearray(struct.pack("!I", zone.serial))
        zone.on_change.append(self.invalidate)

    def invalidate(self, names: Collection[bytes] | None = None, serial: bytes | None = None) -> None:
        """The zone changed: forget what was memoised for `names` (None: everything),
        keeping the counts; negative answers carry the new SOA `serial` from now on."""
        self.hot.clear()
        if serial is not None:
            self.serial[:] = serial
        if names is None:
            self.cache_used = 0
        for canned, keys, counts, sizes in zip(self.canned, self.keys, (self.udp_counts, self.tcp_counts),
                                               self.sizes, strict=True):
            if names is None:
                gone = list(canned.values())
                canned.clear()
                keys.clear()
            else:
                gone = []
                for n in names:
                    for k in keys.pop(n, ()):
                        c = canned.pop(k, None)
                        if c is not None:
                            gone.append(c)
                            self.cache_used -= len(k) + c.size + ENTRY_COST
            for c in gone:
                counts[c.key] = counts.get(c.key, 0) + c.hits
                sizes.add(c.size, c.hits)
                self._folded_hits += c.hits - 1

    def cache_hits(self) -> int:
        """Responses served whole from `canned` (each entry's first use is a miss)."""
        return self._folded_hits + sum(c.hits - 1 for t in self.canned for c in list(t.values()))

    def counts(self, tcp: bool) -> dict[tuple[int, int], int]:
        """Responses by (qtype, rcode) for one transport."""
        out = dict(self.tcp_counts if tcp else self.udp_counts)
        for c in list(self.canned[tcp].values()):
            out[c.key] = out.get(c.key, 0) + c.hits
        return out

    def size_histogram(self, tcp: bool) -> tuple[list[int], int]:
        """Response size bucket counts (non-cumulative) and the sum of sizes."""
        h = self.sizes[tcp]
        buckets, total = list(h.buckets), h.total
        for c in list(self.canned[tcp].values()):
            buckets[c.bucket] += c.hits
            total += c.size * c.hits
        return buckets, total

    def publish(self, put: Put) -> None:
        """Samples of the counters above (`stats.Publisher`)."""
        for proto, tcp in (("udp", False), ("tcp", True)):
            by_label: dict[tuple[str, str], int] = {}
            for (qtype, rcode), n in self.counts(tcp).items():
                lk = (qtype_label(qtype), RCODE_NAMES.get(rcode, "other"))
                by_label[lk] = by_label.get(lk, 0) + n
            for (type_, rcode_), n in by_label.items():
                put(RESPONSES, n, proto=proto, type=type_, rcode=rcode_)
        for proto, tcp in (("udp", False), ("tcp", True)):
            buckets, total = self.size_histogram(tcp)
            put_histogram(put, RESPONSE_SIZE, SIZE_BOUNDS, buckets, total, proto=proto)
        put(CACHE_HITS, self.cache_hits())
        put(CACHE_MISSES, self.cache_misses)
        put(CACHE_BYTES_USED, self.cache_used)
        put(CACHE_FLUSHES, self.cache_flushes)
        for k, v in list(self.slow_count.items()):
            put(SLOW_PATH, v, outcome=k)

    def respond(self, data: bytes, tcp: bool) -> bytes | None:  # noqa: C901 - the hot path, inlined on purpose
        """The response to one DNS message, or None to send nothing."""
        canned = self.canned[tcp].get(data[2:])
        if canned is not None:
            canned.hits += 1
            bodies = canned.bodies
            if bodies is None:
                if canned.serial_at:
                    return with_serial(data[:2] + canned.out, canned.serial_at, self.serial)
                return data[:2] + canned.out
            r = canned.rot
            canned.rot = r + 1 if r + 1 < len(bodies) else 0
            return data[:2] + canned.out + bodies[r] + canned.tail
        try:
            if data[2] & 0xF8 or data[4:10] != _QD1:
                return self._slow(data, tcp)
            qend = data.find(0, 12) + 5  # end of the question, if its name is uncompressed
            rest = len(data) - qend
            if rest == 0 and data[10:12] == _AR0 and qend > 4:
                idx = (data[2] & 1) | ((data[3] >> 3) & 2)
                limit = MAX_TCP if tcp else 512
                opt = b""
            elif (rest >= 11 and data[10:12] == _AR1 and qend > 4
                  and data[qend:qend + 3] == _OPT_HEAD and data[qend + 6] == 0
                  and rest == 11 + ((data[qend + 9] << 8) | data[qend + 10])):
                idx = 4 | (data[2] & 1) | ((data[3] >> 3) & 2)
                if tcp:
                    limit = MAX_TCP
                else:
                    limit = (data[qend + 3] << 8) | data[qend + 4]
                    limit = EDNS_SIZE if limit > EDNS_SIZE else 512 if limit < 512 else limit
                opt = OPT_DO1 if data[qend + 7] & 0x80 else OPT_DO0
            else:
                return self._slow(data, tcp)
        except IndexError:
            return self._slow(data, tcp)
        self.cache_misses += 1
        q = data[12:qend]
        ans = self.hot.get(q)
        if ans is None:
            ans = self._lookup(q)
            if ans is None:
                return self._slow(data, tcp)
        fits = ans.size + len(q) + len(opt) + 12 <= limit
        if fits:
            out = data[:2] + ans.hdrs[idx] + q + (ans.bodies[0] if ans.n == 1 else ans.body()) + opt
            if ans.serial_at:
                out = with_serial(out, ans.serial_at + len(opt), self.serial)
        else:
            out = self._fit(data[:2], ans, idx, q, opt, limit)
        if rest > 11 or (ans.n > 1 and not fits):  # rest > 11: EDNS options
            self._count(ans, tcp, out)
            return out
        table = self.canned[tcp]
        key = data[2:]
        cost = len(key) + len(out) + ENTRY_COST
        if cost > self.cache_bytes:
            self._count(ans, tcp, out)
            return out
        if len(table) >= CANNED_MAX or self.cache_used + cost > self.cache_bytes:
            self.cache_flushes += 1
            self.invalidate()
        self.cache_used += cost
        if ans.n == 1:
            at = ans.serial_at + len(opt) if ans.serial_at and fits else 0
            table[key] = Canned(out[2:], ans.key, len(out), serial_at=at)
        else:  # every rotation has the same size
            table[key] = Canned(ans.hdrs[idx] + q, ans.key, len(out), ans, opt)
        self.keys[tcp].setdefault(q[:-4].lower(), []).append(key)
        return out

    def _count(self, ans: Answer, tcp: bool, out: bytes) -> None:
        """Count a response that is not kept in `canned` (those are counted at scrape)."""
        counts = self.tcp_counts if tcp else self.udp_counts
        counts[ans.key] = counts.get(ans.key, 0) + 1
        self.sizes[tcp].add(len(out))

    def _lookup(self, q: bytes) -> Answer | None:
        """Answer for a question (name + type + class as received); None if the
        name is not a valid uncompressed wire name, or for AXFR/IXFR (slow path)."""
        lname = q[:-4].lower()
        tail = q[-4:]
        if tail[0] == 0 and tail[1] in _XFR_TYPES:
            return None
        node = self.zone.names.get(lname)
        if node is not None:
            ans = node.get(tail) or self.zone.node_answer(lname, node, tail)
        elif is_wire_name(lname):
            ans = self.zone.missing(lname, tail)
        else:
            return None
        if len(self.hot) >= HOT_MAX:
            self.hot.clear()
        self.hot[q] = ans
        return ans

    @staticmethod
    def _fit(qid: bytes, ans: Answer, idx: int, q: bytes, opt: bytes, limit: int) -> bytes:
        fb = ans.fallback
        if fb is not None and fb.size + len(q) + len(opt) + 12 <= limit:
            return qid + fb.hdrs[idx] + q + fb.body() + opt
        return qid + ans.tc_hdrs[idx] + q + opt

    def _slow(self, data: bytes, tcp: bool) -> bytes | None:
        try:
            q = parse_query(data)
        except Drop as e:
            self.slow_count["dropped"] += 1
            log.debug("dropped message: %s", e)
            return None
        except FormErr as e:
            if data[2] & 0x78:  # an unknown opcode is NOTIMP whatever follows (RFC 1035 4.1.1)
                self.slow_count["notimp"] += 1
                return error_response(data, NOTIMP)
            self.slow_count["formerr"] += 1
            log.debug("FORMERR: %s", e)
            return error_response(data, FORMERR)
        if q.tsig >= 0:
            return self._signed(data, q, tcp)
        return self._answer(q, tcp)

    def _answer(self, q: Query, tcp: bool, reserve: int = 0) -> bytes:
        """The response to a parsed query, `reserve` octets under the size limit."""
        idx = (1 if q.flags & 0x0100 else 0) | (2 if q.flags & 0x0010 else 0)
        opt = b""
        if q.edns:
            idx |= 4
            opt = OPT_DO1 if q.do else OPT_DO0
        if q.opcode != 0:
            self.slow_count["notimp"] += 1
            return self._header_only(q.id, q.flags, NOTIMP, q.question, opt)
        if q.edns and q.edns_version != 0:
            self.slow_count["badvers"] += 1
            return self._header_only(q.id, q.flags, BADVERS, q.question, opt_record(q.do, 1))
        self.slow_count["parsed"] += 1
        ans = self.zone.answer(q.qname.lower(), q.question[-4:])
        limit = MAX_TCP if tcp else (min(max(q.edns_size, 512), EDNS_SIZE) if q.edns else 512)
        limit -= reserve
        if ans.size + len(q.question) + len(opt) + 12 <= limit:
            out = q.id + ans.hdrs[idx] + q.question + ans.body() + opt
            if ans.serial_at:
                out = with_serial(out, ans.serial_at + len(opt), self.serial)
        else:
            out = self._fit(q.id, ans, idx, q.question, opt, limit)
        self._count(ans, tcp, out)
        return out

    def _signed(self, data: bytes, q: Query, tcp: bool) -> bytes:
        """A TSIG-signed query: NOTAUTH with an unsigned TSIG error for an unknown key
        or a bad MAC (RFC 8945 5.2, 5.3.2); else the answer, signed."""
        try:
            rr = tsig.parse(data, q.tsig)
            key, err = tsig.check(self.tsig_keys, data, rr)
        except FormErr as e:
            self.slow_count["formerr"] += 1
            log.debug("FORMERR: %s", e)
            return error_response(data, FORMERR)
        opt = (OPT_DO1 if q.do else OPT_DO0) if q.edns else b""
        if key is None or err in (tsig.BADSIG, tsig.BADTRUNC):
            self.slow_count["tsig_" + tsig.ERROR_NAMES[err].lower()] += 1
            return tsig.unsigned_error(self._header_only(q.id, q.flags, NOTAUTH, q.question, opt), rr, err)
        signer = tsig.Signer(key, rr)
        if err:
            self.slow_count["tsig_" + tsig.ERROR_NAMES[err].lower()] += 1
            return signer.sign(self._header_only(q.id, q.flags, NOTAUTH, q.question, opt), err)
        self.slow_count["tsig_signed"] += 1
        reserve = len(key.name) + len(key.algorithm) + key.mac_size + 26
        return signer.sign(self._answer(q, tcp, reserve))

    @staticmethod
    def _header_only(qid: bytes, flags: int, rcode: int, question: bytes, opt: bytes) -> bytes:
        out_flags = 0x8000 | (flags & 0x7910) | (rcode & 0xF)  # QR, opcode RD CD; not AA
        counts = (b"\x00\x01" if question else b"\x00\x00") + b"\x00\x00\x00\x00"
        return (qid + out_flags.to_bytes(2, "big") + counts + (b"\x00\x01" if opt else b"\x00\x00")
                + question + opt)
