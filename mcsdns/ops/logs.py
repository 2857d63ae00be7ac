"""Log output of every mcsdns command: text or JSON lines on stderr, RFC 3339 UTC
timestamps with milliseconds (2026-11-23T21:30:00.123Z).

Text: `TIME [LEVEL] logger: message`. JSON: time, level, logger, msg, the
event's fields (the `extra={...}` of the log call) and exc for a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# attributes every LogRecord has; the rest of its __dict__ came from extra={...}
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


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
        line = f"{rfc3339(record.created)} [{record.levelname}] {record.name}: {record.getMessage()}"
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
