"""An internal error while answering (a bug): the query still gets an answer, SERVFAIL,
the error is counted in `mcsdns_panics_total` (as CoreDNS counts coredns_panics_total)
and logged without flooding the log: the first traceback, then at most one line
per LOG_EVERY seconds with the traceback of that error and how many were not logged.

The listeners (UDP plain and batched, TCP) catch what `Handler.respond` raises and
call `Panics` instead, so the fast path pays nothing for it. An answer that fails
to render is a SERVFAIL the response cache keeps like any answer (until the name
changes), so asking again costs a lookup, not another failure.
"""

from __future__ import annotations

import logging
import time

from ..dns.answer import OPT_DO0, OPT_DO1
from ..dns.errors import Drop
from ..dns.header import error_response
from ..dns.message import header_only, parse_query
from ..dns.types import Rcode
from ..ops.stats import Put, define

log = logging.getLogger("mcsdns.query")

LOG_EVERY = 60.0  # seconds between two logged internal errors
PANICS = define("mcsdns_panics_total", "counter",
                "Internal errors while answering (each query answered SERVFAIL where it parsed "
                "as one); see docs/operations.md, McsdnsInternalErrors.")


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

    __slots__ = ("count", "suppressed", "logged_at")

    def __init__(self) -> None:
        self.count = 0
        self.suppressed = 0  # errors since the last one logged, not logged
        self.logged_at = -LOG_EVERY  # monotonic time of the last one logged

    def __call__(self, query: bytes, exc: BaseException) -> bytes | None:
        """Count and maybe log `exc`, raised answering `query`; the response to send."""
        self.note(exc, f"a {len(query)}-octet query")
        return servfail(query)

    def note(self, exc: BaseException, what: str) -> None:
        """Count `exc`, raised answering `what` (answered SERVFAIL), and log it unless
        one was logged less than LOG_EVERY seconds ago."""
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at < LOG_EVERY:
            self.suppressed += 1
            return
        log.error("internal error answering %s, answered SERVFAIL (%d more since the last one logged)",
                  what, self.suppressed, exc_info=exc,
                  extra={"event": "internal_error", "suppressed": self.suppressed})
        self.logged_at, self.suppressed = now, 0

    def publish(self, put: Put) -> None:
        put(PANICS, self.count)
