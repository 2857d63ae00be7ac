"""Wiring: sources -> store -> zone -> handler -> listeners."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import __version__, tsig
from .handler import Handler
from .journal import Versions
from .locality import OFF, Locality
from .metrics import render
from .notify import Notifier
from .records import service_records
from .serial import SerialClock
from .server.http import HTTPEndpoints, serve_http
from .server.tcp import TCPLimits, TCPServerState, bind_tcp, serve_tcp
from .server.udp import bind_udp, serve_udp
from .sources import Source
from .stats import Put, Snapshot, Stats, define
from .store import ServiceKey, Store
from .xfr import Transfers
from .zone import Zone

log = logging.getLogger("mcsdns")

READY = define("mcsdns_ready", "gauge", "1 once every source has completed its first full sync.")
BUILD_INFO = define("mcsdns_build_info", "gauge", "Build information.", ("version",))


@dataclass
class Config:
    listen: list[tuple[str, int]] = field(default_factory=lambda: [("0.0.0.0", 53)])
    zone: str = "clusterset.local"
    ttl: int = 5
    manifests: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)
    health: tuple[str, int] | None = None
    metrics: tuple[str, int] | None = None
    workers: int = 1
    reuse_port: bool = False
    log_queries: bool = False
    tcp_limits: TCPLimits = field(default_factory=TCPLimits)
    locality: Locality = OFF
    serial: int = field(default_factory=lambda: int(time.time()) & 0xFFFFFFFF)  # SOA, same in every worker
    state_dir: str | None = None
    allow_transfer: list[str] = field(default_factory=list)  # CIDRs allowed AXFR/IXFR
    notify: list[tuple[str, int]] = field(default_factory=list)  # NOTIFY targets
    tsig_key: str | None = None  # NAME:ALGORITHM:BASE64SECRET
    serial_file: str | None = None  # shared serial state (default: STATE_DIR/serial)

    def serial_path(self) -> str | None:
        if self.serial_file:
            return self.serial_file
        return os.path.join(self.state_dir, "serial") if self.state_dir else None


class App:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.store = Store()
        self.zone = Zone(cfg.zone, cfg.ttl, cfg.serial)
        self.handler = Handler(self.zone, cfg.log_queries)
        self.sources: list[Source] = []
        self._built_with = cfg.locality
        self.store.subscribe(self.rebuild)
        self.tcp_state = TCPServerState(self.handler.respond, cfg.tcp_limits)
        # Transfers: serial per content, journal, TSIG, NOTIFY (mcsdns.journal/xfr/notify)
        self.versions = Versions(self.zone, SerialClock(cfg.serial_path()), self.ready)
        key = tsig.parse_key(cfg.tsig_key) if cfg.tsig_key else None
        if key is not None:
            self.handler.tsig_keys[key.name] = key
        self.transfers = Transfers(self.zone, self.versions, cfg.allow_transfer, key)
        self.tcp_state.stream = self.transfers.stream
        self.notifier: Notifier | None = None
        if cfg.notify:
            self.notifier = Notifier(self.zone.origin, cfg.ttl, cfg.notify, key)
            notifier = self.notifier
            self.versions.on_serial.append(lambda serial, _new: notifier.update(serial))
        self._listeners: list[asyncio.AbstractServer | asyncio.BaseTransport] = []
        self._http: list[asyncio.AbstractServer] = []
        self.stopping = asyncio.Event()
        self.stats = Stats()
        for publish in (self.handler.publish, self.tcp_state.publish, self.store.publish,
                        self.zone.publish, self.publish, self.versions.publish, self.transfers.publish):
            self.stats.register(publish)
        if self.notifier is not None:
            self.stats.register(self.notifier.publish)

    def publish(self, put: Put) -> None:
        put(READY, 1 if self.ready() else 0)
        put(BUILD_INFO, 1, version=__version__)

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
        for key in keys:
            si, slices = self.store.service(key)
            names = service_records(si, slices, self.zone.origin, loc) if si else {}
            self.zone.set_service(key, names)
        self.versions.commit()

    def ready(self) -> bool:
        return bool(self.sources) and all(s.synced for s in self.sources)

    def make_sources(self) -> list[Source]:
        if self.cfg.manifests:
            from .sources.files import FileSource

            return [FileSource(self.store, self.cfg.manifests)]
        from .sources.kube import KubeSource

        return [KubeSource(self.store, self.cfg.kubeconfig, self.cfg.context, self.cfg.namespaces)]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        respond = self.handler.respond
        for host, port in self.cfg.listen:
            udp = bind_udp(host, port, self.cfg.reuse_port)
            tcp = bind_tcp(host, port, self.cfg.reuse_port)
            self._listeners.append(await serve_udp(loop, udp, respond))
            self._listeners.append(await serve_tcp(loop, tcp, self.tcp_state))
            log.info("listening on %s:%d (UDP, TCP) for zone %s", host, port, self.cfg.zone)
        await serve_endpoints(self.cfg, self.ready, lambda: [self.stats.snapshot()], self._http)
        self.sources = self.make_sources()
        for s in self.sources:
            self.stats.register(s.publish)
            await s.start(loop)
        self._freezer = loop.create_task(self._freeze_when_ready())
        if self.notifier is not None:
            self.notifier.start()
        self._versioner = loop.create_task(self._keep_serial())

    async def _keep_serial(self) -> None:
        """Give the zone its serial once synced, and adopt a serial that another worker
        allocated for the same content (see mcsdns.serial)."""
        while True:
            await asyncio.sleep(0.05 if not self.versions.established else 0.5)
            try:
                self.versions.commit()
            except Exception:
                log.exception("serial update failed")

    async def _freeze_when_ready(self) -> None:
        """After the first full sync, move what is loaded out of the cyclic GC's sight:
        a full collection over a large zone would otherwise pause answers."""
        while not self.ready():
            await asyncio.sleep(0.05)
        gc.collect()
        gc.freeze()

    def reload(self) -> None:
        """SIGHUP: sources re-read everything (files re-parsed, watches relisted)."""
        log.info("SIGHUP: reloading sources")
        for s in self.sources:
            fn = getattr(s, "reload", None)
            if fn is not None:
                fn()

    async def stop(self, drain: float = 1.0) -> None:
        """Stop listening, give open TCP connections `drain` seconds, stop sources."""
        for c in self._listeners:
            c.close()
        deadline = asyncio.get_running_loop().time() + drain
        while self.tcp_state.conns and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.tcp_state.conns):
            conn.close()
        if self.tcp_state.sweeper is not None:
            self.tcp_state.sweeper.cancel()
        for s in self.sources:
            await s.stop()
        self._versioner.cancel()
        if self.notifier is not None:
            await self.notifier.stop()
        for h in self._http:
            h.close()


async def serve_endpoints(cfg: Config, ready: Callable[[], bool],
                          snaps: Callable[[], list[Snapshot]],
                          out: list[asyncio.AbstractServer]) -> None:
    """Serve /health, /ready and /metrics on --health and --metrics."""
    for addr in dict.fromkeys(a for a in (cfg.health, cfg.metrics) if a):
        ep = HTTPEndpoints(ready, lambda: render(snaps()))
        out.append(await serve_http(addr[0], addr[1], ep))
        log.info("HTTP /health /ready /metrics on %s:%d", *addr)


async def run(cfg: Config, report: Callable[[Snapshot], None] | None = None) -> None:
    """Run one server process until SIGTERM/SIGINT; `report` receives a metrics
    snapshot every 0.2 s (worker processes report to their supervisor)."""
    # Source threads (file parsing, watch streams) must not hold the GIL for the
    # default 5 ms while queries wait: hand it back every 0.5 ms.
    sys.setswitchinterval(0.0005)
    app = App(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stopping.set)
    loop.add_signal_handler(signal.SIGHUP, app.reload)
    await app.start()
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
    log.info("shutting down")
    if report is not None:
        task.cancel()
    await app.stop()


def run_loop(coro_fn: Callable[[], object]) -> None:
    """Run a coroutine on uvloop when available."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(coro_fn())  # type: ignore[arg-type]
    else:
        uvloop.run(coro_fn())  # type: ignore[arg-type]
