"""The supervisor's worker processes: each slot's process, the pipe it reports on, and
the last `Status` and `Metrics` it sent."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from ..ops.errors import EXIT_CONFIG
from ..ops.stats import Snapshot
from .messages import Failed, Metrics, Status, oldest_serial

log = logging.getLogger("mcsdns.workers")

Conn = multiprocessing.connection.Connection
CONTEXT = multiprocessing.get_context("fork")


@dataclass
class Slot:
    """Worker `i`: its current process and what it last said."""

    proc: BaseProcess | None = None
    conn: Conn | None = None
    status: Status | None = None
    snapshot: Snapshot = field(default_factory=dict)
    heard: bool = False  # it sent something: it got past its start

    @property
    def dead(self) -> bool:
        return self.proc is not None and not self.proc.is_alive()


class Pool:
    """`n` worker slots. `on_status` runs (on the loop) after a worker's Status changed;
    `on_failed` with the message of a worker's configuration error."""

    def __init__(self, n: int, on_status: Callable[[], None], on_failed: Callable[[str], None]) -> None:
        self.slots = [Slot() for _ in range(n)]
        self.on_status, self.on_failed = on_status, on_failed
        self.restarts = 0

    def start(self, i: int, loop: asyncio.AbstractEventLoop, target: Callable[..., None],
              args: tuple[Any, ...]) -> BaseProcess:
        """Fork worker `i` (again) running `target(conn, *args)`; it reports on `conn`."""
        slot = self.slots[i]
        if slot.conn is not None:
            loop.remove_reader(slot.conn.fileno())
            slot.conn.close()
        parent, child = CONTEXT.Pipe(duplex=False)
        p = CONTEXT.Process(target=target, args=(child, *args), name=f"mcsdns-worker-{i}", daemon=True)
        p.start()
        child.close()
        self.slots[i] = Slot(p, parent)
        loop.add_reader(parent.fileno(), self.receive, i)
        log.info("worker %d started (pid %s)", i, p.pid)
        return p

    def receive(self, i: int) -> None:
        """Read what worker `i` sent."""
        slot = self.slots[i]
        conn = slot.conn
        if conn is None:
            return
        try:
            while conn.poll():
                msg = conn.recv()
                if isinstance(msg, Status):
                    slot.status, slot.heard = msg, True
                    self.on_status()
                elif isinstance(msg, Metrics):
                    slot.snapshot, slot.heard = msg.snapshot, True
                elif isinstance(msg, Failed):
                    self.on_failed(msg.message)
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            slot.conn = None

    def ready(self) -> bool:
        """Every worker answers from data."""
        return all(s.status is not None and s.status.ready for s in self.slots)

    def served_serial(self) -> int | None:
        """The serial all workers serve (see `messages.oldest_serial`)."""
        return oldest_serial(s.status for s in self.slots)

    def snapshots(self) -> list[Snapshot]:
        return [s.snapshot for s in self.slots]

    def dead(self) -> list[tuple[int, BaseProcess]]:
        """The workers that exited (their messages read)."""
        out = []
        for i, s in enumerate(self.slots):
            if s.proc is not None and s.dead:
                if s.proc.exitcode == EXIT_CONFIG:
                    self.receive(i)  # its message, if not read yet
                out.append((i, s.proc))
        return out

    def alive(self) -> list[BaseProcess]:
        return [s.proc for s in self.slots if s.proc is not None and s.proc.is_alive()]

    def terminate(self) -> None:
        """SIGTERM every worker: each runs its own lameduck period and drain."""
        for p in self.alive():
            p.terminate()
