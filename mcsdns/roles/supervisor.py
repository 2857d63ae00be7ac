"""`--workers N`: N worker processes sharing each port with SO_REUSEPORT, and their
supervisor.

With the Kubernetes API, the supervisor runs the one list+watch in its own `Loader`
(which answers no queries), restores --state-dir into it and writes the snapshots.
Once its zone is loaded (first sync, or restored state) it forks the workers: each
starts with the loaded zone in pages it shares with the supervisor (copy-on-write,
after `gc.freeze()`), binds at once and follows every later list and event through
its relay pipe (sources/relay.py). A worker that dies is forked again from the
supervisor's current zone. Before the zone is loaded no DNS socket is bound. The API
server sees one list+watch per pod. The source's and the snapshots' series are the
supervisor's.

With --manifests each worker runs the whole pipeline and reads the files itself;
--state-dir keeps only the shared serial then. A restarted worker binds its sockets
only once its zone is loaded, so it takes no share of the queries before.

All workers share one serial file (STATE_DIR/serial, else a private temporary one), so
the same content has the same SOA serial in every worker.

Each worker reports on its pipe (roles/messages.py): its `Status` (ready, served
serial) when it changes, its `Metrics` every 0.2 s. The supervisor serves /health,
/ready (200 when every worker is ready) and /metrics (the workers' and its own, merged
as `stats.merge` says), and sends NOTIFY once every worker serves a new serial. It
restarts a worker that dies. A worker that exits with an error before it reported
anything (a configuration error it printed) stops the supervisor with that exit code
instead of being restarted. A worker that meets a configuration error (an address it
cannot bind, a kubeconfig that does not load) sends it and exits; the supervisor stops
the others and raises it, once. On SIGTERM the supervisor's /ready turns 503 and each
worker runs its own --lameduck period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile

from ..ops import process
from ..ops.errors import ConfigError
from ..ops.http import HTTPServer
from ..ops.logs import flush_throttles
from ..ops.stats import Snapshot, Stats
from ..serveconfig import Config
from ..sources.relay import Hub
from ..transport.listeners import HANDOFF, bind_listen
from .endpoints import notifier_for, serve_endpoints
from .loader import Loader, loader_for
from .pool import CONTEXT, Pool
from .serving import run_loop
from .worker import work_forked, work_own

log = logging.getLogger("mcsdns.workers")

TICK = 0.5  # seconds between looks at the workers' processes and the relay


class Supervisor:
    """--workers N: starts, watches and restarts the workers, serves /ready and /metrics
    for all of them and sends NOTIFY for the serial they all serve."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.tmpdir = None if cfg.serial_path() else tempfile.mkdtemp(prefix="mcsdns-")
        self.serial_file = cfg.serial_path() or os.path.join(str(self.tmpdir), "serial")
        self.pool = Pool(cfg.workers, self._served, self._failed)
        self.stats = Stats()  # the supervisor's own series (NOTIFY, process_*, source, state)
        self.stats.register(process.publish)
        self.stopping = asyncio.Event()
        self.config_error: str | None = None  # the first worker's configuration error
        self.exit_code = 0  # a worker's that failed at start
        self.http: list[HTTPServer] = []
        # With the Kubernetes API: one list+watch, in `loader`, and the workers forked
        # from it once it is loaded.
        self.hub: Hub | None = None
        self.loader: Loader | None = None
        if not cfg.manifests:
            self.hub = Hub()
            self.loader = loader_for(cfg, serial_file=self.serial_file, hub=self.hub)
            for publish in self.loader.publishers():
                self.stats.register(publish)
        self.notifier = notifier_for(cfg)
        if self.notifier is not None:
            self.stats.register(self.notifier.publish)

    def run(self) -> int:
        """Run the workers until SIGTERM/SIGINT; the exit status (a worker's that failed at start)."""
        run_loop(self.main)
        return self.exit_code

    def ready(self) -> bool:
        """/ready: every worker ready, and not shutting down."""
        return not self.stopping.is_set() and self.pool.ready()

    def snapshots(self) -> list[Snapshot]:
        return [*self.pool.snapshots(), self.stats.snapshot()]

    def signalled(self) -> None:
        """SIGTERM/SIGINT: the first starts the shutdown; the next is passed on to the
        workers, which then stop at once."""
        if self.stopping.is_set():
            self.pool.terminate()
        self.stopping.set()

    def reload(self) -> None:
        """SIGHUP: the supervisor's source relists, or each worker re-reads its files."""
        if self.loader is not None:
            self.loader.reload()
            return
        for p in self.pool.alive():
            if p.pid is not None:
                os.kill(p.pid, signal.SIGHUP)

    def _served(self) -> None:
        """A worker's Status changed: NOTIFY once every worker serves a new serial."""
        serial = self.pool.served_serial()
        if self.notifier is not None and serial is not None:
            self.notifier.update(serial)

    def _failed(self, message: str) -> None:
        self.config_error = self.config_error or message
        self.stopping.set()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.signalled)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        try:
            await self._start(loop)
        except ConfigError:
            if self.tmpdir:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), TICK)
            self._relay()
            self._restart_dead(loop)
        await self._stop(loop)

    async def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Check what can fail at once (kubeconfig, --listen, --health), then start the
        workers, or the loader that forks them once loaded."""
        if self.loader is not None:
            self.loader.configure()  # a kubeconfig that does not load: one error, here
            for *_, sock in bind_listen(self.cfg.listen, True):  # the workers bind only once loaded
                sock.close()
        await serve_endpoints(self.cfg, self.ready, self.snapshots, self.http)
        if self.loader is None:
            for i in range(self.cfg.workers):
                self._start_worker(i, loop)
        else:
            self.loader.prepare(loop)
            await self.loader.start(loop)
            loop.create_task(self._fork_when_loaded(loop))
        if self.notifier is not None:
            self.notifier.start()

    def _start_worker(self, i: int, loop: asyncio.AbstractEventLoop) -> None:
        if self.loader is not None and self.hub is not None:
            # forked from the loaded supervisor; its relay pipe continues from this moment
            relay_in, relay_out = CONTEXT.Pipe(duplex=False)
            self.pool.start(i, loop, work_forked, (self.cfg, self.loader.pipeline,
                                                   self.loader.sources_synced(), self.hub, relay_in))
            relay_in.close()
            self.hub.attach(i, relay_out)
        else:
            restarted = self.pool.slots[i].proc is not None
            self.pool.start(i, loop, work_own, (self.cfg, self.serial_file, restarted))

    async def _fork_when_loaded(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fork the workers once the loader has its zone (synced, or restored state)."""
        assert self.loader is not None
        if not self.loader.loaded.is_set():
            log.info("starting %d workers once the zone is loaded (first sync or restored state); "
                     "until then no DNS socket is bound", self.cfg.workers)
        waits = [loop.create_task(self.loader.loaded.wait()), loop.create_task(self.stopping.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for t in waits:
            t.cancel()
        if self.stopping.is_set():
            return
        for i, slot in enumerate(self.pool.slots):
            if slot.proc is None:
                self._start_worker(i, loop)

    def _relay(self) -> None:
        """Replace a worker too far behind on its relay pipe; pass the source's
        connection state on to the workers."""
        if self.hub is None or self.loader is None:
            return
        for i in self.hub.stuck():
            p = self.pool.slots[i].proc
            if p is not None and p.pid is not None and p.is_alive():
                log.error("worker %d (pid %s) is more than %d changes behind; replacing it",
                          i, p.pid, self.hub.max_backlog)
                p.kill()
        for s in self.loader.sources:
            self.hub.status(s.connected, s.last_sync, s.last_error)

    def _restart_dead(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start again a worker that died; stop when one failed before it reported."""
        for i, p in self.pool.dead():
            if self.stopping.is_set():
                return
            if p.exitcode and p.exitcode > 0 and not self.pool.slots[i].heard:
                # failed before serving (a configuration error it has printed): no restart loop
                log.error("worker %d (pid %s) exited with %s at start; stopping", i, p.pid, p.exitcode)
                self.exit_code = p.exitcode
                self.stopping.set()
                return
            log.error("worker %d (pid %s) exited with %s; restarting", i, p.pid, p.exitcode)
            self.pool.restarts += 1
            self._start_worker(i, loop)

    async def _stop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop the workers (each runs its lameduck period), then the supervisor's parts."""
        lameduck = self.cfg.lameduck
        log.info("stopping %d workers%s", len(self.pool.slots),
                 f": /ready answers 503; they answer for {lameduck:g} s more (--lameduck; "
                 "a second signal stops them at once)" if lameduck > 0 else "")
        self.pool.terminate()
        deadline = loop.time() + lameduck + HANDOFF + self.cfg.tcp_limits.read_timeout + 5
        while self.pool.alive() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for p in self.pool.alive():
            log.error("worker pid %s did not stop; killing it", p.pid)
            p.kill()
            await loop.run_in_executor(None, p.join, 5)
        for h in self.http:
            h.close()
        if self.loader is not None:
            await self.loader.stop()
        if self.hub is not None:
            self.hub.close()
        if self.notifier is not None:
            await self.notifier.stop()
        flush_throttles()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.config_error is not None:
            raise ConfigError(self.config_error)
