"""An internal error while answering (a bug): the query still gets an answer, SERVFAIL,
the error is counted in `mcsdns_panics_total` (as CoreDNS counts coredns_panics_total)
and logged without flooding the log: one traceback per LOG_EVERY seconds, then one
line saying more are held back and, when the window ends, how many (`ops.logs.Throttle`).

The listeners (UDP plain and batched, TCP) catch what `Handler.respond` raises and
call `Panics` instead, so the fast path pays nothing for it. An answer that fails
to render is a SERVFAIL the response cache keeps like any answer (until the name
changes), so asking again costs a lookup, not another failure.
"""

from __future__ import annotations

import logging

from ..dns.answer import OPT_DO0, OPT_DO1
from ..dns.errors import Drop
from ..dns.header import error_response
from ..dns.message import header_only, parse_query
from ..dns.types import Rcode
from ..ops.logs import Throttle
from ..ops.stats import Put, define

log = logging.getLogger("mcsdns.query")

LOG_EVERY = 60.0  # seconds between two logged internal errors
PANICS = define("mcsdns_panics_total", "counter",
                "Internal errors while answering (each query answered SERVFAIL where it parsed "
                "as one); see docs/operations.md, MCSDNSInternalErrors.")


def servfail(query: bytes) -> bytes | None:
    """SERVFAIL to `query`: its ID, opcode, RD, CD, question and EDNS echoed when it parses,
    else the header alone; None for no answer (a response, or no whole header)."""
    try:
        q = parse_query(query)
    except Drop:
        return None
    except Exception:  # FormErr, or the parser is what failed
        return error_response(query, Rcode.SERVFAIL) if len(query) >= 12 and not query[2] & 0x80 else None
    return header_only(q, Rcode.SERVFAIL, (OPT_DO1 if q.do else OPT_DO0) if q.edns else b"")


class Panics:
    """The internal errors of one process's listeners, counted and logged sparingly."""

    __slots__ = ("count", "_log")

    def __init__(self) -> None:
        self.count = 0
        self._log = Throttle(log, "internal errors", burst=1, total=1, window=LOG_EVERY)

    def __call__(self, query: bytes, exc: BaseException) -> bytes | None:
        """Count and maybe log `exc`, raised answering `query`; the response to send."""
        self.note(exc, f"a {len(query)}-octet query")
        return servfail(query)

    def note(self, exc: BaseException, what: str) -> None:
        """Count `exc`, raised answering `what` (answered SERVFAIL), and log it with its
        traceback unless one was logged less than LOG_EVERY seconds ago."""
        self.count += 1
        self._log.log("", logging.ERROR, "internal error answering %s, answered SERVFAIL", what,
                      extra={"event": "internal_error"}, exc_info=exc)

    def publish(self, put: Put) -> None:
        put(PANICS, self.count)
