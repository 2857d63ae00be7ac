"""Log output of every mcsdns command: text or JSON lines on stderr, RFC 3339 UTC
timestamps with milliseconds (2026-11-23T21:30:00.123Z).

Text: `TIME [LEVEL] logger: message`. JSON: time, level, logger, msg, the
event's fields (the `extra={...}` of the log call) and exc for a traceback.

No log line can be forged or made huge from outside: a value from the network or
from an object goes through `show` (escaped, cut to SHOW_MAX characters), the
text format escapes any control character left in a message (JSON escapes them
itself), and a message that anyone can repeat goes through a `Throttle`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported before asyncio (ops/load.py, stage 1)
    import asyncio

# attributes every LogRecord has; the rest of its __dict__ came from extra={...}
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


SHOW_MAX = 64  # characters of a value from outside quoted in a log line
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # what could break or fake a line


def cut(s: str) -> str:
    """`s` for a log line: non-printable characters backslash-escaped (as repr() does),
    cut to SHOW_MAX characters ("..." then marks the cut); not quoted."""
    return repr(s[:SHOW_MAX])[1:-1] + ("..." if len(s) > SHOW_MAX else "")


def show(v: Any) -> str:
    """repr() of a value from outside for a log line, bounded: strings and bytes cut to
    SHOW_MAX, huge integers and collections summarised (their repr can be huge, or raise)."""
    if isinstance(v, int) and v.bit_length() > 64:
        return f"<{v.bit_length()}-bit integer>"
    if isinstance(v, list | dict | tuple | set | frozenset):
        return f"<{type(v).__name__} of {len(v)}>"
    if isinstance(v, str | bytes) and len(v) > SHOW_MAX:
        return repr(v[:SHOW_MAX]) + "..."
    return repr(v)


def _escape(m: re.Match[str]) -> str:
    return repr(m.group())[1:-1]


def rfc3339(created: float) -> str:
    """`created` (Unix time) as 2026-11-23T21:30:00.123Z."""
    ms = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{ms:03d}Z"


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The event's data: what the log call passed in `extra`."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """Human-readable lines: RFC 3339 UTC time, [level], logger: message."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if _CONTROL.search(msg):
            msg = _CONTROL.sub(_escape, msg)
        line = f"{rfc3339(record.created)} [{record.levelname}] {record.name}: {msg}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per line, with the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": rfc3339(record.created), "level": record.levelname,
                               "logger": record.name, "msg": record.getMessage()}
        for k, v in fields(record).items():
            out.setdefault(k, v)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str, fmt: str) -> None:
    """Log `level` and above to stderr as `fmt` (text or json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def reopen_after_fork() -> None:
    """In a process forked while other threads ran: new stdout/stderr objects over the same
    descriptors, and the log handlers pointed at them. A thread of the parent may have held
    a stream's buffer lock (in a write) at the fork; that lock stays taken in the child."""
    old_err = sys.stderr
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - replaces sys.stdout
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - replaces sys.stderr
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.StreamHandler) and h.stream is old_err:
            h.setStream(sys.stderr)


_THROTTLES: weakref.WeakSet[Throttle] = weakref.WeakSet()


class Throttle:
    """A rate limit for one kind of log line that anyone can repeat (refused transfers,
    skipped objects): at most `burst` lines per `window` seconds from each source and
    `total` from all. The first line held back says so; the rest are counted, and the
    count is logged as one "N more suppressed" line when the window ends (on the next
    line of this kind, by a timer on the running event loop, or at `flush_throttles`).
    Memory is bounded: at most `sources` sources are told apart per window; lines from
    others count against `total` only once the table is full, then are held back.
    At most total + 2 lines per window, whatever the number of sources."""

    def __init__(self, logger: logging.Logger, what: str, burst: int = 5, total: int = 50,
                 window: float = 60.0, sources: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.what = logger, what
        self.burst, self.total, self.window, self.sources, self.clock = burst, total, window, sources, clock
        self._end = 0.0  # end of the current window (0: none open)
        self._lines: dict[str, list[int]] = {}  # source -> [lines logged, lines held back]
        self._logged = 0  # lines logged in this window, all sources
        self._held = 0  # lines held back in this window, all sources
        self._level = logging.WARNING  # of the first line held back
        self._timer: asyncio.TimerHandle | None = None
        _THROTTLES.add(self)

    def log(self, source: str, level: int, msg: str, *args: Any, extra: dict[str, Any] | None = None,
            exc_info: BaseException | None = None) -> bool:
        """Log `msg % args` (with `exc_info`'s traceback) unless `source` or everyone is over
        the limit; True if logged."""
        now = self.clock()
        if now >= self._end:
            self.flush(now)
            self._end = now + self.window
        c = self._lines.get(source)
        if c is None and len(self._lines) < self.sources:
            c = self._lines[source] = [0, 0]
        if c is not None and c[0] < self.burst and self._logged < self.total:
            c[0] += 1
            self._logged += 1
            self.logger.log(level, msg, *args, extra=extra, exc_info=exc_info)
            return True
        if c is not None:
            c[1] += 1
        self._held += 1
        if self._held == 1:
            self._level = level
            self.logger.log(level, "%s: rate limit reached (%d lines per source, %d in all, per %g s); "
                            "more are counted and summarised", self.what, self.burst, self.total, self.window)
            self._arm(now)
        return False

    def flush(self, now: float | None = None) -> None:
        """Close the current window if it has ended (any window with `now` None), logging
        how many lines it held back."""
        if now is not None and now < self._end:
            return
        if self._held:
            top, n = max(self._lines.items(), key=lambda kv: kv[1][1], default=("", [0, 0]))
            most = f"; most from {top}: {n[1]}" if n[1] else ""
            self.logger.log(self._level, "%s: %d more suppressed in the last %g s%s",
                            self.what, self._held, self.window, most)
        self._lines.clear()
        self._logged = self._held = 0
        self._end = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, now: float) -> None:
        """Flush at the window's end on the running event loop, if this thread has one."""
        from asyncio import get_running_loop

        try:
            loop = get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(max(0.0, self._end - now), self.flush, self._end)


def flush_throttles() -> None:
    """Log what every Throttle holds back now (at shutdown)."""
    for t in list(_THROTTLES):
        t.flush()
