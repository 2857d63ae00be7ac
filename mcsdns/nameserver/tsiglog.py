"""A refused TSIG request as log text (for the handler and transfers alike)."""

from __future__ import annotations

import time

from ..dns.names import decode_name
from ..dns.tsig import BADTIME, ERROR_NAMES, FUDGE, TsigRR
from ..ops.logs import cut


def failure(rr: TsigRR, err: int, now: float | None = None) -> str:
    """The TSIG error, the key as the request names it (escaped, cut), and for BADTIME
    how far the request's time is from ours."""
    out = f"TSIG {ERROR_NAMES.get(err, err)} (key {cut(decode_name(rr.name))})"
    if err == BADTIME:
        skew = rr.time_signed - int(time.time() if now is None else now)
        out += f": signed {skew:+d} s from our clock, fudge {min(rr.fudge, FUDGE)} s"
    return out
