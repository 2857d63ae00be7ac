"""The --workers worker role: answers on the port it shares with the other workers
(SO_REUSEPORT) and tells its supervisor how it is (`messages`).

A worker is either forked from the supervisor's loaded zone (Kubernetes source: it
continues from the relay pipe, `sources.relay`) or runs its own pipeline from the
configuration (--manifests: it reads the files itself; a restarted one binds only once
its zone is loaded). Either way it sends a `Status` at start and at each change of its
readiness or served serial, its `Metrics` every 0.2 s, and stops when the supervisor
is gone.
"""

from __future__ import annotations

import asyncio
import multiprocessing.connection
import os
import signal
from collections.abc import Callable

from ..ops import logs
from ..ops.errors import EXIT_CONFIG, ConfigError
from ..publish.pipeline import Pipeline
from ..serveconfig import Config
from ..sources.relay import Hub, RelaySource
from .loader import Loader, loader_for
from .messages import Failed, Metrics, Outbox, Status
from .serving import Serving, listeners_for, run_loop

Conn = multiprocessing.connection.Connection
REPORT_EVERY = 0.2  # seconds between metrics snapshots sent to the supervisor


class Worker(Serving):
    """One worker: `loader`'s zone on the shared port, reporting on `outbox`. `forked`:
    the zone was loaded by the supervisor this process was forked from; `bind_now`:
    bind at start, not once the zone is loaded."""

    def __init__(self, cfg: Config, loader: Loader, outbox: Outbox, *, forked: bool, bind_now: bool) -> None:
        super().__init__(cfg, loader, listeners_for(cfg, loader, reuse_port=True))
        self.outbox = outbox
        self.forked, self.bind_now = forked, bind_now
        self.pipeline.publisher.on_serial.append(lambda _serial, _new: self.report_status())
        loader.on_loaded.append(self.report_status)

    @classmethod
    def from_supervisor(cls, cfg: Config, pipeline: Pipeline, synced: bool, relay: Conn,
                        outbox: Outbox) -> Worker:
        """Forked from the supervisor's loaded `pipeline` (`synced`: its source had synced):
        what follows arrives on `relay`; answer from the inherited zone at once. The
        supervisor's --state-dir, tasks, threads and file watches stay with it."""
        loader = Loader(cfg, pipeline, [RelaySource(pipeline.store, relay, synced=synced)], keep_state=False)
        return cls(cfg, loader, outbox, forked=True, bind_now=True)

    @classmethod
    def from_config(cls, cfg: Config, serial_file: str, outbox: Outbox, restarted: bool) -> Worker:
        """Its own pipeline and source, sharing `serial_file` with the other workers."""
        loader = loader_for(cfg, serial_file=serial_file)
        return cls(cfg, loader, outbox, forked=False, bind_now=not restarted)

    def report_status(self) -> None:
        self.outbox.status(Status(self.pipeline.ready, self.pipeline.served_serial))

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loader.prepare(loop, self.forked)
        await self.bind(loop, self.bind_now)
        await self.loader.start(loop)
        self.report_status()
        self._tasks.append(loop.create_task(self._report()))

    async def _report(self) -> None:
        """Metrics every REPORT_EVERY s; stop when the supervisor is gone."""
        parent = os.getppid()
        while True:
            self.outbox.send(Metrics(self.stats.snapshot()))
            if os.getppid() != parent:
                self.stopping.set()
            await asyncio.sleep(REPORT_EVERY)


def work_forked(conn: Conn, cfg: Config, pipeline: Pipeline, synced: bool, hub: Hub, relay: Conn) -> None:
    """Process target: a worker forked from the supervisor's loaded `pipeline`."""
    logs.reopen_after_fork()  # forked while the supervisor's watch threads ran
    hub.forget()
    _serve(conn, lambda outbox: Worker.from_supervisor(cfg, pipeline, synced, relay, outbox))


def work_own(conn: Conn, cfg: Config, serial_file: str, restarted: bool) -> None:
    """Process target: a worker with its own pipeline (--manifests)."""
    _serve(conn, lambda outbox: Worker.from_config(cfg, serial_file, outbox, restarted))


def _serve(conn: Conn, make: Callable[[Outbox], Worker]) -> None:
    """Run the worker `make` builds until SIGTERM; a configuration error is sent to the
    supervisor, and the process exits with EXIT_CONFIG."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor handles ^C
    outbox = Outbox(conn)
    try:
        worker = make(outbox)
        run_loop(worker.main)
    except ConfigError as e:
        outbox.send(Failed(str(e)))
        os._exit(EXIT_CONFIG)
