"""Wiring: sources -> store -> zone (through the publisher) -> response cache -> handler -> listeners."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .data import state
from .data.store import ServiceKey, Store
from .dns import tsig
from .flags import http_addrs, show_addr
from .ops import process
from .ops.errors import ConfigError, os_reason
from .ops.http import HTTPEndpoints, HTTPErrors, HTTPServer, serve_http
from .ops.logs import flush_throttles
from .ops.metrics import render
from .ops.stats import Put, Snapshot, Stats, define
from .server import stop_tcp_intake, stop_udp_intake
from .server.builder import Builder
from .server.cache import CACHE_BYTES, ResponseCache
from .server.handler import Handler
from .server.notify import Notifier
from .server.publisher import ZonePublisher
from .server.statekeeper import StateKeeper
from .server.tcp import TCPLimits, TCPServerState, bind_tcp, serve_tcp
from .server.udp import BatchedUDP, RequestTimer, bind_udp, serve_udp
from .server.xfr import Transfers
from .sources import Source
from .sources.relay import Hub, RelaySource, Tee
from .zone.journal import Versions
from .zone.leftout import LeftOutLog
from .zone.locality import OFF, Locality
from .zone.serial import SerialClock
from .zone.zone import Zone

log = logging.getLogger("mcsdns")

READY = define("mcsdns_ready", "gauge", "1 once the zone answers from data: first full sync done, "
               "or state restored from --state-dir.")


@dataclass
class Config:
    """Everything `mcsdns serve` was told (flags, or a test's choices)."""

    listen: list[tuple[str, int]] = field(default_factory=lambda: [("0.0.0.0", 53)])
    zone: str = "clusterset.local"
    ttl: int = 5
    manifests: str | None = None
    max_manifest_bytes: int | None = None  # manifest files larger are skipped (None: 16 MiB)
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)
    health: tuple[str, int] | None = None
    metrics: tuple[str, int] | None = None
    workers: int = 1
    reuse_port: bool = False
    lameduck: float = 5.0  # after SIGTERM: /ready 503, still answering (0: stop at once)
    log_queries: bool = False
    cache_mib: int = CACHE_BYTES >> 20  # response cache budget (--cache-size)
    tcp_limits: TCPLimits = field(default_factory=TCPLimits)
    locality: Locality = OFF
    serial: int = field(default_factory=lambda: int(time.time()) & 0xFFFFFFFF)  # SOA, same in every worker
    state_dir: str | None = None  # --state-dir: last synced objects, SOA serial (DIR/serial)
    state_interval: float = 10.0  # at most one snapshot write per this many seconds
    state_write: bool = True  # this process writes the snapshot (one of N workers does)
    bind_when_ready: bool = False  # bind the DNS sockets only once the zone is loaded (restarts)
    allow_transfer: list[str] = field(default_factory=list)  # CIDRs allowed AXFR/IXFR
    notify: list[tuple[str, int]] = field(default_factory=list)  # NOTIFY targets
    tsig_keys: list[tsig.Key] = field(default_factory=list)  # verify with any; NOTIFY signed with the first
    serial_file: str | None = None  # shared serial state (default: STATE_DIR/serial)

    def serial_path(self) -> str | None:
        if self.serial_file:
            return self.serial_file
        return os.path.join(self.state_dir, "serial") if self.state_dir else None


HANDOFF = 0.25  # after the lameduck period: seconds between stopping intake and closing
GC_PAUSE_MAX = 60.0  # seconds the cyclic GC may stay off while waiting for the first sync


class App:
    """One server process: wires sources → store → zone → handler → listeners, and
    runs start-up, readiness, reload and shutdown.

    Invariants: the zone answers from data (`ready`) only after a first full sync or a
    restored --state-dir snapshot; the DNS sockets, once bound, stay bound until `stop`;
    /ready is 503 from the first SIGTERM on.
    """

    def __init__(self, cfg: Config, hub: Hub | None = None) -> None:
        self.cfg = cfg
        self.hub = hub  # --workers: the Kubernetes source also feeds the workers through it
        self.store = Store()
        self.zone = Zone(cfg.zone, cfg.ttl, cfg.serial)
        self.cache = ResponseCache(self.zone, cfg.cache_mib << 20)
        self.handler = Handler(self.cache)
        self.sources: list[Source] = []
        self._built_with = cfg.locality
        self.store.subscribe(self.rebuild)
        self.left_out = LeftOutLog(self.store)  # names too long to serve
        self.tcp_state = TCPServerState(self.handler.respond, cfg.tcp_limits, self.handler.panics)
        self.tcp_state.log_queries = cfg.log_queries
        # Transfers: serial per content, journal, TSIG, NOTIFY (zone.journal, server.xfr/notify)
        self.versions = Versions(self.zone, SerialClock(cfg.serial_path()))
        self.publisher = ZonePublisher(self.zone, self.versions, self.cache, cfg.serial_path())
        self.builder = Builder(self.store, self.zone, self.publisher, self.rebuild, self.left_out.report)
        self.handler.tsig_keys.update((k.name, k) for k in cfg.tsig_keys)
        self.transfers = Transfers(self.zone, self.versions, cfg.allow_transfer, cfg.tsig_keys)
        self.tcp_state.stream = self.transfers.stream
        self.notifier: Notifier | None = None
        if cfg.notify:
            self.notifier = Notifier(self.zone.origin, cfg.ttl, cfg.notify, next(iter(cfg.tsig_keys), None))
            notifier = self.notifier
            self.publisher.on_serial.append(lambda serial, _new: notifier.update(serial))
        self._listeners: list[asyncio.AbstractServer | asyncio.BaseTransport | BatchedUDP] = []
        self._http: list[HTTPServer] = []
        self.stopping = asyncio.Event()  # first SIGTERM/SIGINT
        self.hurry = asyncio.Event()  # a second one: stop at once
        self._fds: list[tuple[int, bool]] = []  # (fd, is UDP) of each DNS listener
        self._tasks: list[asyncio.Task[None]] = []
        self._loaded = asyncio.Event()
        # --state-dir (Kubernetes source only: manifests are their own state)
        self.keeper: StateKeeper | None = None
        if cfg.state_dir and not cfg.manifests:
            self.keeper = StateKeeper(self.store, state.objects_path(cfg.state_dir), cfg.namespaces,
                                      cfg.state_interval, lambda: self.zone.loaded and self.synced(),
                                      lambda: self.sources)
        if cfg.state_dir and cfg.manifests:
            log.warning("--state-dir keeps only the SOA serial with --manifests "
                        "(the files are the state of the objects)")
        self.udp_timer = RequestTimer()
        self.stats = self._stats(serving=True)

    def _stats(self, serving: bool) -> Stats:
        """This process's series; `serving`: also the state keeper's and the NOTIFY sender's
        (a forked worker leaves those to its supervisor)."""
        stats = Stats()
        for publish in (self.cache.publish, self.handler.publish, self.udp_timer.publish,
                        self.tcp_state.publish, self.store.publish, self.left_out.publish,
                        self.zone.publish, self.publish,
                        self.versions.publish, self.transfers.publish, process.publish):
            stats.register(publish)
        if serving and self.keeper is not None:
            stats.register(self.keeper.publish)
        if serving and self.notifier is not None:
            stats.register(self.notifier.publish)
        return stats

    def publish(self, put: Put) -> None:
        put(READY, 1 if self.ready() else 0)

    @property
    def locality(self) -> Locality:
        """This instance's locality: --cluster-id, else the watched ClusterProperty."""
        loc = self.cfg.locality
        if not loc.cluster_id and self.store.cluster_id:
            loc = dataclasses.replace(loc, cluster_id=self.store.cluster_id)
        return loc

    def rebuild(self, keys: set[ServiceKey]) -> None:
        loc = self.locality
        if loc != self._built_with:  # the cluster ID arrived or changed: rebuild everything
            self._built_with = loc
            keys = set(keys) | set(self.store.imports) | set(self.zone.svc_names)
        self.builder.rebuild(keys, loc)

    def off_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on, parse large objects and build large services off `loop`, in one
        thread of this process's own (one: the loop competes for the GIL with it alone);
        in a forked worker, redo what the parent was doing off its loop."""
        self.store.loop = self.builder.loop = loop
        self.store.executor = self.builder.executor = ThreadPoolExecutor(1, "mcsdns-apply")
        self.store.resume()
        self.builder.resume()

    def synced(self) -> bool:
        """Every source has applied its first full view, and it is all in the zone."""
        return self.sources_synced() and self.store.idle and self.builder.idle

    def sources_synced(self) -> bool:
        """Every source has applied its first full view (to the store)."""
        return bool(self.sources) and all(s.synced for s in self.sources)

    def ready(self) -> bool:
        """The zone answers from data: synced, or restored from --state-dir."""
        return self.zone.loaded

    def serving(self) -> bool:
        """/ready: ready, and not shutting down."""
        return self.ready() and not self.stopping.is_set()

    def signalled(self) -> None:
        """SIGTERM/SIGINT: the first starts the shutdown, the next hurries it."""
        if self.stopping.is_set():
            self.hurry.set()
        self.stopping.set()

    def make_sources(self, serving: bool = True) -> list[Source]:
        """The configured source; `serving`: the zone is answered from it (not `records`)."""
        if self.cfg.manifests:
            from .sources.files import MAX_BYTES, FileSource

            return [FileSource(self.store, self.cfg.manifests,
                               max_bytes=self.cfg.max_manifest_bytes or MAX_BYTES)]
        from .sources.kube import KubeSource

        if self.hub is not None:
            hub = self.hub
            return [KubeSource(Tee(self.store, hub), self.cfg.kubeconfig, self.cfg.context,
                               self.cfg.namespaces, has_data=self.ready, on_synced=hub.mark_synced)]
        return [KubeSource(self.store, self.cfg.kubeconfig, self.cfg.context, self.cfg.namespaces,
                           has_data=self.ready if serving else None)]

    async def start(self, answer: bool = True) -> None:
        """Restore state, run the sources and (`answer`) the DNS listeners. Without `answer`:
        the --workers supervisor's loader, from which the workers are forked once it is
        loaded (`loaded`). Sources already prepared (`prepare_sources`) are kept."""
        loop = asyncio.get_running_loop()
        self._pause_gc(loop)
        if self.keeper is not None and self.keeper.restore():
            self._set_loaded()
        self.off_loop(loop)
        if not self.sources:
            self.prepare_sources()
        await serve_endpoints(self.cfg, self.serving, lambda: [self.stats.snapshot()], self._http)
        if answer and not self.cfg.bind_when_ready:
            await self._bind()
        await self.start_sources(loop)
        self._tasks.append(loop.create_task(self._until_synced()))
        if answer and self.cfg.bind_when_ready:
            self._tasks.append(loop.create_task(self._bind_when_loaded()))
        if self.keeper is not None and self.cfg.state_write:
            self._tasks.append(loop.create_task(self.keeper.writer()))
        if self.notifier is not None:
            self.notifier.start()
        self.publisher.watch(loop)

    @property
    def loaded(self) -> bool:
        return self._loaded.is_set()

    async def serve_forked(self, conn: Any) -> None:
        """--workers, in a worker forked from the loaded supervisor: what follows arrives
        on `conn`; answer from the inherited zone at once. The supervisor's tasks, threads
        and file watches did not come along: start this process's own."""
        loop = asyncio.get_running_loop()
        synced = self.sources_synced()
        self.cfg = dataclasses.replace(self.cfg, state_write=False)
        self.keeper = None  # the supervisor keeps --state-dir
        loaded, self._loaded = self._loaded.is_set(), asyncio.Event()
        if loaded:
            self._loaded.set()
        self.stopping, self.hurry, self._tasks = asyncio.Event(), asyncio.Event(), []
        self.sources = [RelaySource(self.store, conn, synced=synced)]
        self.stats = self._stats(serving=False)
        self.publisher.forget_watch()
        self.off_loop(loop)
        await self._bind()
        await self.start_sources(loop)
        if not synced:
            self._tasks.append(loop.create_task(self._until_synced()))
        self.publisher.watch(loop)

    def prepare_sources(self, serving: bool = True) -> None:
        """Make the sources (`serving`: as make_sources) and load their client configuration,
        before anything is bound: ConfigError for a kubeconfig that does not load."""
        self.sources = self.make_sources(serving)
        for s in self.sources:
            configure = getattr(s, "configure", None)
            if configure is not None:
                configure()

    async def start_sources(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the prepared sources; ConfigError when the manifests directory cannot be read."""
        for s in self.sources:
            self.stats.register(s.publish)
            try:
                await s.start(loop)
            except OSError as e:
                raise ConfigError(f"--manifests {self.cfg.manifests}: cannot read the directory: "
                                  f"{os_reason(e)}") from None

    async def load_once(self, timeout: float, serving: bool = True,
                        waiting: Callable[[], None] | None = None) -> list[str]:
        """Start the sources (`serving`: as make_sources), wait up to `timeout` s for their
        first full view (calling `waiting` if it is not there at once), stop them. Returns
        what each source that did not sync lacks; empty: the zone holds all of it and, with
        `serving`, answers from it as after a first sync."""
        self.prepare_sources(serving)
        await self.start_sources(asyncio.get_running_loop())
        if not self.synced() and waiting is not None:
            waiting()
        deadline = time.monotonic() + timeout
        while not self.synced() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        missing = [tell(s, "pending") for s in self.sources if not s.synced]
        for s in self.sources:
            await s.stop()
        if serving and not missing:
            self._set_loaded()
        return missing

    async def _bind(self) -> None:
        """Bind UDP and TCP on every --listen address, then serve them; ConfigError when one
        cannot be bound (then none is served)."""
        loop = asyncio.get_running_loop()
        respond = self.handler.respond
        bound = bind_listen(self.cfg.listen, self.cfg.reuse_port)
        for (host, port, udp), (_, _, tcp) in zip(bound[::2], bound[1::2], strict=True):
            self._fds += [(udp.fileno(), True), (tcp.fileno(), False)]
            table = self.cache.tables[False]
            self._listeners.append(await serve_udp(loop, udp, respond, self.handler.panics, self.udp_timer,
                                                   table, self.cache.serial, self.cfg.log_queries))
            self._listeners.append(await serve_tcp(loop, tcp, self.tcp_state))
            udp_io = "recvmmsg/sendmmsg" if self.udp_timer.batched else "recvfrom/sendto"
            log.info("listening on %s:%d (UDP %s, TCP) for zone %s", host, port, udp_io, self.cfg.zone,
                     extra={"event": "listening", "address": host, "port": port, "udp_io": udp_io,
                            "zone": self.cfg.zone})

    async def _bind_when_loaded(self) -> None:
        """A restarted worker takes no share of the queries before its zone is loaded."""
        await self._loaded.wait()
        await self._bind()

    def _set_loaded(self) -> None:
        self.publisher.load()  # the loaded content gets its serial now
        self._loaded.set()

    async def _until_synced(self) -> None:
        """At the first full sync: replace restored state, start answering from the data,
        then move what is loaded out of the cyclic GC's sight (a full collection over a
        large zone would otherwise pause answers) and turn the GC back on."""
        while not self.synced():
            await asyncio.sleep(0.005)
        if self.keeper is not None:
            self.keeper.synced()
        self._set_loaded()
        gc.freeze()
        gc.enable()
        process.release_free_memory()

    def _pause_gc(self, loop: asyncio.AbstractEventLoop) -> None:
        """No cyclic GC while the first sync loads: its collections, over a heap that only
        grows, would take half of the load's time (0.9 s -> 0.4 s at 10k services). The
        load makes no cyclic garbage (a collection after it frees nothing), so nothing is
        lost; if the sync takes longer than GC_PAUSE_MAX, the GC comes back anyway."""
        if gc.isenabled():
            gc.disable()
            loop.call_later(GC_PAUSE_MAX, gc.enable)

    def reload(self) -> None:
        """SIGHUP: sources re-read everything (files re-parsed, watches relisted)."""
        log.info("SIGHUP: reloading sources")
        for s in self.sources:
            fn = getattr(s, "reload", None)
            if fn is not None:
                fn()

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less when hurried."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.hurry.wait(), seconds)

    async def shutdown(self) -> None:
        """After SIGTERM (/ready is 503 already): answer for --lameduck seconds, then stop."""
        lameduck = self.cfg.lameduck
        if lameduck <= 0:
            log.info("shutting down")
            await self.stop()
            return
        log.info("shutting down: %squeries are answered for %g s more (--lameduck; a second "
                 "signal stops at once)", "/ready answers 503; " if self._http else "", lameduck)
        await self._pause(lameduck)
        await self.stop(self.cfg.tcp_limits.read_timeout, HANDOFF)
        log.info("stopped")

    async def stop(self, drain: float = 1.0, handoff: float = 0.0) -> None:
        """Stop taking queries, finish the open TCP queries within `drain` seconds, stop
        sources. With `handoff`, first stop intake (new datagrams and connections go to
        the rest of the port's SO_REUSEPORT group) and read what is queued for that long."""
        loop = asyncio.get_running_loop()
        if handoff > 0 and not self.hurry.is_set():
            for fd, udp in self._fds:
                (stop_udp_intake if udp else stop_tcp_intake)(fd)
            await self._pause(handoff)
        for c in self._listeners:
            c.close()
        self.tcp_state.drain()
        deadline = loop.time() + drain
        while self.tcp_state.conns and loop.time() < deadline and not self.hurry.is_set():
            await asyncio.sleep(0.02)
        for conn in list(self.tcp_state.conns):
            conn.close()
        if self.tcp_state.sweeper is not None:
            self.tcp_state.sweeper.cancel()
        for t in self._tasks:
            t.cancel()
        if self.keeper is not None and self.cfg.state_write and self.keeper.live():
            await self.keeper.save()  # refreshes as_of for the next start
        for s in self.sources:
            await s.stop()
        if self.notifier is not None:
            await self.notifier.stop()
        for h in self._http:
            h.close()
        self.publisher.close(loop)
        flush_throttles()  # what rate-limited log lines held back
        if self.store.executor is not None:
            self.store.executor.shutdown(wait=False, cancel_futures=True)


def bind_listen(listen: list[tuple[str, int]], reuse_port: bool) -> list[tuple[str, int, socket.socket]]:
    """UDP then TCP sockets bound on every --listen address, in that order; ConfigError
    naming the first that cannot be bound (then none is left open)."""
    bound: list[tuple[str, int, socket.socket]] = []
    try:
        for host, port in listen:
            for proto, bind in (("UDP", bind_udp), ("TCP", bind_tcp)):
                try:
                    bound.append((host, port, bind(host, port, reuse_port)))
                except OSError as e:
                    raise ConfigError(f"--listen {show_addr(host, port)}: {proto}: "
                                      f"{os_reason(e)}") from None
    except ConfigError:
        for *_, sock in bound:
            sock.close()
        raise
    return bound


def tell(source: object, what: str) -> str:
    """A source's own `target()` (what it waits for) or `pending()` (what it lacks) text."""
    fn = getattr(source, what, None)
    return str(fn()) if callable(fn) else f"the {getattr(source, 'name', '?')} source"


async def serve_endpoints(cfg: Config, ready: Callable[[], bool],
                          snaps: Callable[[], list[Snapshot]],
                          out: list[HTTPServer]) -> None:
    """Serve /health, /ready and /metrics on --health and --metrics (with the endpoints'
    own error counts); ConfigError when an address cannot be bound."""
    errors, own = HTTPErrors(), Stats()
    own.register(errors.publish)
    for addr, flag in http_addrs(cfg.health, cfg.metrics).items():
        ep = HTTPEndpoints(ready, lambda: render([*snaps(), own.snapshot()]), errors=errors)
        try:
            out.append(await serve_http(addr[0], addr[1], ep))
        except OSError as e:
            raise ConfigError(f"{flag} {show_addr(*addr)}: {os_reason(e)}") from None
        log.info("HTTP /health /ready /metrics on %s:%d", *addr,
                 extra={"event": "listening_http", "address": addr[0], "port": addr[1]})


async def run(cfg: Config, report: Callable[[Snapshot], None] | None = None) -> None:
    """Run one server process until SIGTERM/SIGINT; `report` receives a metrics
    snapshot every 0.2 s (worker processes report to their supervisor)."""
    app = App(cfg)
    await _serve(app, app.start, report)


async def run_forked(app: App, conn: Any, report: Callable[[Snapshot], None]) -> None:
    """A worker forked from its supervisor's loaded `app`: serve it, fed from `conn`."""
    await _serve(app, lambda: app.serve_forked(conn), report)


async def _serve(app: App, start: Callable[[], Awaitable[None]],
                 report: Callable[[Snapshot], None] | None) -> None:
    # Source threads (file parsing, watch streams) must not hold the GIL for the
    # default 5 ms while queries wait: hand it back every 0.5 ms.
    sys.setswitchinterval(0.0005)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.signalled)
    loop.add_signal_handler(signal.SIGHUP, app.reload)
    await start()
    if report is not None:
        parent = os.getppid()

        async def reporter() -> None:
            while True:
                report(app.stats.snapshot())
                if os.getppid() != parent:  # supervisor gone: stop
                    app.stopping.set()
                await asyncio.sleep(0.2)

        task = loop.create_task(reporter())
    await app.stopping.wait()
    await app.shutdown()
    if report is not None:
        task.cancel()


def run_loop(coro_fn: Callable[[], object]) -> None:
    """Run a coroutine on uvloop when available."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(coro_fn())  # type: ignore[arg-type]
    else:
        uvloop.run(coro_fn())  # type: ignore[arg-type]
