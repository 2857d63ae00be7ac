"""What every role that answers queries shares: a loader's zone on listeners, run until
SIGTERM/SIGINT, then the lameduck period and the drain.

Shutdown: the first signal turns /ready 503 (`serving()` false) at once; queries are
answered for --lameduck seconds more; then intake stops (the rest of the port's
SO_REUSEPORT group takes over) for HANDOFF seconds, the listeners close and open TCP
queries get --tcp-read-timeout seconds to finish. A second signal cuts every wait.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable

from ..ops import process
from ..ops.http import HTTPServer
from ..ops.logs import flush_throttles
from ..ops.stats import Put, Stats, define
from ..serveconfig import Config
from ..transport.listeners import HANDOFF, Listeners, pause
from .loader import Loader

log = logging.getLogger("mcsdns")

READY = define("mcsdns_ready", "gauge", "1 once the zone answers from data: first full sync done, "
               "or state restored from --state-dir.")


def listeners_for(cfg: Config, loader: Loader, reuse_port: bool) -> Listeners:
    """Listeners on every --listen address answering from `loader`'s zone."""
    p = loader.pipeline
    return Listeners(p.handler, p.transfers, cfg.listen, zone=cfg.zone, reuse_port=reuse_port,
                     log_queries=cfg.log_queries, tcp_limits=cfg.tcp_limits)


class Serving:
    """A process answering queries from `loader`'s zone on `listeners`.

    Invariants: the zone answers from data only once loaded; the listeners, once bound,
    stay bound until `stop`; /ready is 503 from the first SIGTERM on.
    """

    def __init__(self, cfg: Config, loader: Loader, listeners: Listeners) -> None:
        self.cfg = cfg
        self.loader = loader
        self.pipeline = loader.pipeline
        self.listeners = listeners
        self.stopping = asyncio.Event()  # first SIGTERM/SIGINT
        self.hurry = asyncio.Event()  # a second one: stop at once
        self.http: list[HTTPServer] = []
        self.stats = Stats()
        for publish in [*self.pipeline.publishers(), *listeners.publishers(), self.publish,
                        process.publish, *loader.publishers()]:
            self.stats.register(publish)
        self._tasks: list[asyncio.Task[None]] = []

    def publish(self, put: Put) -> None:
        put(READY, 1 if self.pipeline.ready else 0)

    def serving(self) -> bool:
        """/ready: the zone answers from data, and the process is not shutting down."""
        return self.pipeline.ready and not self.stopping.is_set()

    def signalled(self) -> None:
        """SIGTERM/SIGINT: the first starts the shutdown, the next hurries it."""
        if self.stopping.is_set():
            self.hurry.set()
        self.stopping.set()

    async def main(self) -> None:
        """Start, answer until SIGTERM/SIGINT, shut down."""
        # Source threads (file parsing, watch streams) must not hold the GIL for the
        # default 5 ms while queries wait: hand it back every 0.5 ms.
        sys.setswitchinterval(0.0005)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.signalled)
        loop.add_signal_handler(signal.SIGHUP, self.loader.reload)
        await self.start(loop)
        await self.stopping.wait()
        await self.shutdown()

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The role's start-up: load, bind (`bind`), start the sources."""
        raise NotImplementedError

    async def bind(self, loop: asyncio.AbstractEventLoop, now: bool) -> None:
        """Bind the listeners now, or (not `now`) once the zone is loaded: a process sharing
        the port takes no share of the queries before it can answer them."""
        if now:
            await self.listeners.bind()
        else:
            self._tasks.append(loop.create_task(self._bind_when_loaded()))

    async def _bind_when_loaded(self) -> None:
        await self.loader.loaded.wait()
        await self.listeners.bind()

    async def shutdown(self) -> None:
        """After SIGTERM (/ready is 503 already): answer for --lameduck seconds, then stop."""
        lameduck = self.cfg.lameduck
        if lameduck <= 0:
            log.info("shutting down")
            await self.stop()
            return
        log.info("shutting down: %squeries are answered for %g s more (--lameduck; a second "
                 "signal stops at once)", "/ready answers 503; " if self.http else "", lameduck)
        await pause(lameduck, self.hurry)
        await self.stop(self.cfg.tcp_limits.read_timeout, HANDOFF)
        log.info("stopped")

    async def stop(self, drain: float = 1.0, handoff: float = 0.0) -> None:
        """Stop taking queries (`Listeners.stop`), then the tasks, the loader and the rest."""
        await self.listeners.stop(self.hurry, drain, handoff)
        for t in self._tasks:
            t.cancel()
        await self.loader.stop()
        await self.close()
        for h in self.http:
            h.close()
        flush_throttles()  # what rate-limited log lines held back

    async def close(self) -> None:
        """The role's own parts, after the loader has stopped."""


def run_loop(coro_fn: Callable[[], object]) -> None:
    """Run a coroutine on uvloop when available."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(coro_fn())  # type: ignore[arg-type]
    else:
        uvloop.run(coro_fn())  # type: ignore[arg-type]
