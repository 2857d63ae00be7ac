"""`--workers N`: N server processes sharing each port with SO_REUSEPORT.

With the Kubernetes API, the supervisor runs the one list+watch in its own App (the
loader, which answers no queries), restores --state-dir into it and writes the
snapshots. Once its zone is loaded (first sync, or restored state) it forks the workers:
each starts with the loaded zone in pages it shares with the supervisor (copy-on-write,
after `gc.freeze()`), binds at once and follows every later list and event through its
pipe (sources/relay.py). A worker that dies is forked again from the supervisor's
current zone. Before the zone is loaded no DNS socket is bound. The API server sees one
list+watch per pod. The source's and the snapshots' series are the supervisor's.

With --manifests each worker runs the whole pipeline and reads the files itself. Worker
0 alone writes the --state-dir snapshot. A restarted worker binds its sockets only once
its zone is loaded, so it takes no share of the queries before.

Each worker sends a metrics snapshot to the supervisor every 0.2 s. The supervisor serves
/health, /ready (200 when every worker is ready) and /metrics (the workers' and its own,
merged as `stats.merge` says). It restarts a worker that dies. A worker that exits with
an error before its first snapshot (a configuration error) stops the supervisor with
that exit code instead of being restarted. A worker that meets a configuration error (an
address it cannot bind, a kubeconfig that does not load) sends its message and exits;
the supervisor stops the others and raises it, once. On SIGTERM the supervisor's /ready
turns 503 and each worker runs its own --lameduck period.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
from multiprocessing.process import BaseProcess

from .app import HANDOFF, App, Config, bind_listen, run, run_forked, run_loop, serve_endpoints
from .dns.names import encode_name
from .ops import logs, process
from .ops.errors import EXIT_CONFIG, ConfigError
from .ops.http import HTTPServer
from .ops.stats import Snapshot, Stats
from .server.notify import Notifier
from .sources.relay import Hub
from .zone.serial import serial_lt

log = logging.getLogger("mcsdns.workers")


def _worker(cfg: Config | None, conn: multiprocessing.connection.Connection,
            forked: tuple[App, Hub, multiprocessing.connection.Connection] | None = None) -> None:
    """A worker process: its own pipeline from `cfg`, or (`forked`) the supervisor's loaded
    App, continued from the relay pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor handles ^C

    def report(snap: Snapshot) -> None:
        try:
            conn.send(snap)
        except (BrokenPipeError, OSError):
            pass

    try:
        if forked is not None:
            app, hub, relay = forked
            logs.reopen_after_fork()  # forked while the supervisor's watch threads ran
            hub.forget()
            run_loop(lambda: run_forked(app, relay, report))
        else:
            assert cfg is not None
            run_loop(lambda: run(cfg, report))
    except ConfigError as e:
        try:
            conn.send(str(e))
        except (BrokenPipeError, OSError):
            pass
        os._exit(EXIT_CONFIG)


class Supervisor:
    """--workers N: starts, watches and restarts the worker processes and merges their metrics."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        # One serial sequence: workers share a serial file (STATE_DIR/serial, else a
        # private temporary one); NOTIFY is sent by the supervisor alone.
        self.tmpdir = None if cfg.serial_path() else tempfile.mkdtemp(prefix="mcsdns-")
        serial_file = cfg.serial_path() or os.path.join(str(self.tmpdir), "serial")
        self.wcfg = dataclasses.replace(cfg, reuse_port=True, health=None, metrics=None, workers=1,
                                        notify=[], serial_file=serial_file)
        self.notifier: Notifier | None = None
        self.stats = Stats()  # the supervisor's own series (NOTIFY, process_*)
        self.stats.register(process.publish)
        self.ctx = multiprocessing.get_context("fork")
        self.procs: list[BaseProcess | None] = [None] * cfg.workers
        self.conns: list[multiprocessing.connection.Connection | None] = [None] * cfg.workers
        self.snaps: list[Snapshot] = [{} for _ in range(cfg.workers)]
        self.restarts = 0
        self.config_error: str | None = None  # the first worker's configuration error
        self.stopping = asyncio.Event()
        self.exit_code = 0  # a worker's that failed at start
        # With the Kubernetes API: one list+watch, in `loader` (an App that does not
        # answer), and the workers forked from it once it is loaded.
        self.hub: Hub | None = None
        self.loader: App | None = None
        if not cfg.manifests:
            self.hub = Hub()
            self.loader = App(dataclasses.replace(self.wcfg, state_write=True), hub=self.hub)
            if self.loader.keeper is not None:
                self.stats.register(self.loader.keeper.publish)

    def check_listen(self) -> None:
        """Each --listen address can be bound (the workers bind only once loaded): a
        configuration error now, not after the first sync."""
        for *_, sock in bind_listen(self.cfg.listen, True):
            sock.close()

    def ready(self) -> bool:
        """/ready: every worker ready, and not shutting down."""
        return not self.stopping.is_set() and all(s.get(("mcsdns_ready", ())) == 1 for s in self.snaps)

    def signalled(self) -> None:
        """SIGTERM/SIGINT: the first starts the shutdown; the next is passed on to the
        workers, which then stop at once."""
        if self.stopping.is_set():
            self.terminate()
        self.stopping.set()

    def terminate(self) -> None:
        for p in self.procs:
            if p is not None and p.is_alive():
                p.terminate()

    def served_serial(self) -> int | None:
        """The serial every worker serves (the oldest one while they differ), or None
        while one has none: NOTIFY only once all of them answer it."""
        serials = [int(s.get(("mcsdns_zone_serial", ()), 0)) for s in self.snaps]
        if not serials or 0 in serials:
            return None
        oldest = serials[0]
        for s in serials[1:]:
            if serial_lt(s, oldest):
                oldest = s
        return oldest

    def snapshots(self) -> list[Snapshot]:
        return [*self.snaps, self.stats.snapshot()]

    def start_worker(self, i: int, loop: asyncio.AbstractEventLoop) -> None:
        old = self.conns[i]
        if old is not None:
            loop.remove_reader(old.fileno())
            old.close()
        parent, child = self.ctx.Pipe(duplex=False)
        if self.loader is not None and self.hub is not None:
            # forked from the loaded supervisor; its pipe continues from this moment
            relay_in, relay_out = self.ctx.Pipe(duplex=False)
            p = self.ctx.Process(target=_worker, args=(None, child, (self.loader, self.hub, relay_in)),
                                 name=f"mcsdns-worker-{i}", daemon=True)
            p.start()
            relay_in.close()
            self.hub.attach(i, relay_out)
        else:
            cfg = dataclasses.replace(self.wcfg, state_write=i == 0,
                                      bind_when_ready=self.procs[i] is not None)  # a restart
            p = self.ctx.Process(target=_worker, args=(cfg, child), name=f"mcsdns-worker-{i}",
                                 daemon=True)
            p.start()
        child.close()
        self.procs[i], self.conns[i], self.snaps[i] = p, parent, {}
        loop.add_reader(parent.fileno(), self._receive, i)
        log.info("worker %d started (pid %s)", i, p.pid)

    async def _fork_when_loaded(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fork the workers once the loader has its zone (synced, or restored state)."""
        assert self.loader is not None
        if not self.loader.loaded:
            log.info("starting %d workers once the zone is loaded (first sync or restored state); "
                     "until then no DNS socket is bound", self.cfg.workers)
        while not self.loader.loaded:
            if self.stopping.is_set():
                return
            await asyncio.sleep(0.005)
        for i in range(self.cfg.workers):
            if self.procs[i] is None:
                self.start_worker(i, loop)

    def reload(self) -> None:
        if self.loader is not None:
            self.loader.reload()
            return
        for p in self.procs:
            if p is not None and p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGHUP)

    def _receive(self, i: int) -> None:
        conn = self.conns[i]
        if conn is None:
            return
        try:
            while conn.poll():
                msg = conn.recv()
                if isinstance(msg, str):
                    self.config_error = self.config_error or msg
                    self.stopping.set()
                else:
                    self.snaps[i] = msg
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            self.conns[i] = None

    async def run(self) -> None:  # noqa: C901 - to split
        loop = asyncio.get_running_loop()
        stopping = self.stopping
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.signalled)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        http: list[HTTPServer] = []
        try:
            if self.loader is not None:
                self.loader.prepare_sources()  # a kubeconfig that does not load: one error, here
                self.check_listen()
                for s in self.loader.sources:
                    self.stats.register(s.publish)
            await serve_endpoints(self.cfg, self.ready, self.snapshots, http)
        except ConfigError:
            if self.tmpdir:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        if self.loader is None:
            for i in range(self.cfg.workers):
                self.start_worker(i, loop)
        else:
            await self.loader.start(answer=False)
            loop.create_task(self._fork_when_loaded(loop))
        if self.cfg.notify:
            self.notifier = Notifier(encode_name(self.cfg.zone), self.cfg.ttl, self.cfg.notify,
                                     next(iter(self.cfg.tsig_keys), None))
            self.notifier.start()
            self.stats.register(self.notifier.publish)
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), 0.1 if self.notifier else 0.5)
            except TimeoutError:
                pass
            if self.hub is not None and self.loader is not None:
                for i in self.hub.stuck():
                    p = self.procs[i]
                    if p is not None and p.pid is not None and p.is_alive():
                        log.error("worker %d (pid %s) is more than %d changes behind; replacing it",
                                  i, p.pid, self.hub.max_backlog)
                        p.kill()
                for s in self.loader.sources:
                    self.hub.status(bool(getattr(s, "connected", False)), float(getattr(s, "last_sync", 0.0)),
                                    str(getattr(s, "last_error", "")))
            if self.notifier is not None:
                serial = self.served_serial()
                if serial is not None:
                    self.notifier.update(serial)
            for i, p in enumerate(self.procs):
                if p is not None and not p.is_alive() and p.exitcode == EXIT_CONFIG:
                    self._receive(i)  # its message, if not read yet
                if p is not None and not p.is_alive() and not stopping.is_set():
                    if p.exitcode and p.exitcode > 0 and not self.snaps[i]:
                        # failed before serving (a configuration error it has printed): no restart loop
                        log.error("worker %d (pid %s) exited with %s at start; stopping", i, p.pid,
                                  p.exitcode)
                        self.exit_code = p.exitcode
                        stopping.set()
                        break
                    log.error("worker %d (pid %s) exited with %s; restarting", i, p.pid, p.exitcode)
                    self.restarts += 1
                    self.start_worker(i, loop)
        lameduck = self.cfg.lameduck
        log.info("stopping %d workers%s", len(self.procs),
                 f": /ready answers 503; they answer for {lameduck:g} s more (--lameduck; "
                 "a second signal stops them at once)" if lameduck > 0 else "")
        self.terminate()  # each worker runs its own lameduck period and drain
        deadline = loop.time() + lameduck + HANDOFF + self.cfg.tcp_limits.read_timeout + 5
        while any(p is not None and p.is_alive() for p in self.procs) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for p in self.procs:
            if p is not None and p.is_alive():
                log.error("worker pid %s did not stop; killing it", p.pid)
                p.kill()
                await loop.run_in_executor(None, p.join, 5)
        for h in http:
            h.close()
        if self.loader is not None:
            await self.loader.stop(drain=0)
        if self.hub is not None:
            self.hub.close()
        if self.notifier is not None:
            await self.notifier.stop()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        if self.config_error is not None:
            raise ConfigError(self.config_error)


def supervise(cfg: Config) -> int:
    """Run the workers until SIGTERM/SIGINT; the exit code (a worker's that failed at start)."""
    sup = Supervisor(cfg)
    run_loop(sup.run)
    return sup.exit_code
