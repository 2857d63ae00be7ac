"""Query in, response bytes out: parse → look up → fit.

The fast path accepts the common shape of a query (one question, no
compression, at most one version-0 OPT, whose options are checked only when
it has any) with slicing only, then takes a kept
response or a pre-rendered Answer from the response cache and concatenates.
Everything else goes to the slow path, which parses strictly and answers
FORMERR, NOTIMP, BADVERS or REFUSED, signs with TSIG, or drops the packet.
"""

from __future__ import annotations

import logging
from collections import Counter

from ..dns import tsig
from ..dns.answer import EDNS_SIZE, MAX_TCP, OPT_DO0, OPT_DO1, UDP_MIN, header_index, opt_record
from ..dns.errors import Drop, FormErr
from ..dns.header import error_response
from ..dns.message import Query, header_only, options_fit, parse_query, question_end
from ..dns.types import Rcode
from ..ops.logs import Throttle
from ..ops.stats import Put, define
from . import tsiglog
from .cache import ResponseCache
from .response import render

log = logging.getLogger("mcsdns.query")

_QD1 = b"\x00\x01\x00\x00\x00\x00"  # QDCOUNT=1 ANCOUNT=0 NSCOUNT=0
_AR0, _AR1 = b"\x00\x00", b"\x00\x01"
_OPT_HEAD = b"\x00\x00\x29"  # root owner, type OPT

SLOW_PATH = define("mcsdns_dns_slow_path_total", "counter", "Queries off the fast path, by outcome "
                   "(parsed, formerr, notimp, badvers, dropped; tsig_signed, tsig_badkey, tsig_badsig, "
                   "tsig_badtime, tsig_badtrunc).", ("outcome",))


class Handler:
    """Answers queries from the zone through `cache` (see mcsdns.nameserver.cache).

    Invariants: `respond` returns one message per query (None: drop it), never
    larger than the client's limit (512, its EDNS size up to 1232, or 65535 over TCP).
    """

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self.hit = cache.hit
        self.slow_count: Counter[str] = Counter()  # slow-path outcomes
        self.tsig_keys: dict[bytes, tsig.Key] = {}  # by lowercase wire name
        self._tsig_log = Throttle(log, "refused signed queries")  # per key name (no peer here)
        self.panics = cache.panics  # the listeners' answer when respond raises

    def publish(self, put: Put) -> None:
        """Samples of the slow-path and internal error counters (`stats.Publisher`)."""
        for k, v in list(self.slow_count.items()):
            put(SLOW_PATH, v, outcome=k)
        self.panics.publish(put)

    def respond(self, data: bytes, tcp: bool) -> bytes | None:  # noqa: C901 - the hot path, inlined on purpose
        """The response to one DNS message, or None to send nothing."""
        out = self.hit(data, tcp)
        if out is not None:
            return out
        try:
            if data[2] & 0xF8 or data[4:10] != _QD1:
                return self._slow(data, tcp)
            qend = question_end(data)  # confirmed by cache.lookup
            rest = len(data) - qend
            if rest == 0 and data[10:12] == _AR0 and qend > 4:
                idx = (data[2] & 1) | ((data[3] >> 3) & 2)
                limit = MAX_TCP if tcp else UDP_MIN
                opt = b""
            elif (rest >= 11 and data[10:12] == _AR1 and qend > 4
                  and data[qend:qend + 3] == _OPT_HEAD and data[qend + 6] == 0
                  and rest == 11 + ((data[qend + 9] << 8) | data[qend + 10])
                  and (rest == 11 or options_fit(data, qend + 11, len(data)))):
                idx = 4 | (data[2] & 1) | ((data[3] >> 3) & 2)
                if tcp:
                    limit = MAX_TCP
                else:
                    limit = (data[qend + 3] << 8) | data[qend + 4]
                    limit = EDNS_SIZE if limit > EDNS_SIZE else UDP_MIN if limit < UDP_MIN else limit
                opt = OPT_DO1 if data[qend + 7] & 0x80 else OPT_DO0
            else:
                return self._slow(data, tcp)
        except IndexError:
            return self._slow(data, tcp)
        cache = self.cache
        cache.misses += 1
        q = data[12:qend]
        ans = cache.lookup(q)
        if ans is None:
            return self._slow(data, tcp)
        out = render(data[:2], ans, idx, q, opt, limit, cache.serial)
        if rest > 11:  # EDNS options: not kept
            cache.count(ans, tcp, out)
        else:
            cache.keep(tcp, data, q, out, ans, idx, opt, limit)
        return out

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
                return error_response(data, Rcode.NOTIMP)
            self.slow_count["formerr"] += 1
            log.debug("FORMERR: %s", e)
            return error_response(data, Rcode.FORMERR)
        if q.tsig >= 0:
            return self._signed(data, q, tcp)
        return self._answer(q, tcp)

    def _answer(self, q: Query, tcp: bool, reserve: int = 0) -> bytes:
        """The response to a parsed query, `reserve` octets under the size limit."""
        idx = header_index(q.flags, q.edns)
        opt = (OPT_DO1 if q.do else OPT_DO0) if q.edns else b""
        if q.opcode != 0:
            self.slow_count["notimp"] += 1
            return header_only(q, Rcode.NOTIMP, opt)
        if q.edns and q.edns_version != 0:
            self.slow_count["badvers"] += 1
            return header_only(q, Rcode.BADVERS, opt_record(q.do, 1))
        self.slow_count["parsed"] += 1
        cache = self.cache
        ans = cache.answer(q.qname.lower(), q.question[-4:])
        limit = MAX_TCP if tcp else (min(max(q.edns_size, UDP_MIN), EDNS_SIZE) if q.edns else UDP_MIN)
        out = render(q.id, ans, idx, q.question, opt, limit - reserve, cache.serial)
        cache.count(ans, tcp, out)
        return out

    def _signed(self, data: bytes, q: Query, tcp: bool) -> bytes:
        """A TSIG-signed query: refused as `tsig.verify` decides, else the answer, signed."""
        v = tsig.verify(self.tsig_keys, data, q, (OPT_DO1 if q.do else OPT_DO0) if q.edns else b"")
        if v.rr is None:
            self.slow_count["formerr"] += 1
            log.debug("FORMERR: %s", v.why)
        elif v.error:  # every failure, BADKEY included
            self._tsig_log.log(v.rr.name[:64].decode("ascii", "replace"), logging.WARNING,
                               "signed query refused: %s", tsiglog.failure(v.rr, v.error))
            self.slow_count["tsig_" + tsig.ERROR_NAMES[v.error].lower()] += 1
        if v.signer is None:
            return v.refusal
        self.slow_count["tsig_signed"] += 1
        return v.signer.sign(self._answer(q, tcp, v.signer.size))
