"""What a --workers worker tells its supervisor, on the pipe they share (worker → supervisor).

Control data travels as these types, never as metric names: `Status` carries what the
supervisor's /ready and NOTIFY decide from; `Metrics` only feeds /metrics; `Failed` is a
configuration error the worker met at start (it exits with EXIT_CONFIG after sending it).
"""

from __future__ import annotations

import multiprocessing.connection
from collections.abc import Iterable
from dataclasses import dataclass

from ..ops.stats import Snapshot
from ..zone.serial import serial_lt


@dataclass(frozen=True)
class Status:
    """The worker's zone: answering from data (`ready`), under `serial` (None before it
    has one). Sent at start and whenever either changes."""

    ready: bool
    serial: int | None


@dataclass(frozen=True)
class Metrics:
    """The worker's series, for the supervisor's /metrics (every 0.2 s)."""

    snapshot: Snapshot


@dataclass(frozen=True)
class Failed:
    """A configuration error at start (an address that cannot be bound...): the message."""

    message: str


Message = Status | Metrics | Failed


class Outbox:
    """The worker's end of the pipe; a message to a supervisor that is gone is dropped."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        self.last: Status | None = None

    def send(self, msg: Message) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError):
            pass

    def status(self, status: Status) -> None:
        """Send `status` if it differs from the last one sent."""
        if status != self.last:
            self.last = status
            self.send(status)


def oldest_serial(statuses: Iterable[Status | None]) -> int | None:
    """The serial every worker serves (the oldest, in serial arithmetic, while they
    differ), or None while one has none: NOTIFY only once all of them answer it."""
    oldest: int | None = None
    for st in statuses:
        if st is None or st.serial is None:
            return None
        if oldest is None or serial_lt(st.serial, oldest):
            oldest = st.serial
    return oldest
