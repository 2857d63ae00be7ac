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

from . import __version__
from .handler import Handler
from .locality import OFF, Locality
from .metrics import render
from .records import service_records
from .server.http import HTTPEndpoints, serve_http
from .server.tcp import TCPLimits, TCPServerState, bind_tcp, serve_tcp
from .server.udp import BatchedUDP, RequestTimer, bind_udp, serve_udp
from .sources import Source
from .stats import Put, Snapshot, Stats, define
from .store import ServiceKey, Store
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
        self._listeners: list[asyncio.AbstractServer | asyncio.BaseTransport | BatchedUDP] = []
        self._http: list[asyncio.AbstractServer] = []
        self.stopping = asyncio.Event()
        self.udp_timer = RequestTimer()
        self.stats = Stats()
        for publish in (self.handler.publish, self.udp_timer.publish, self.tcp_state.publish,
                        self.store.publish, self.zone.publish, self.publish):
            self.stats.register(publish)

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
            self._listeners.append(await serve_udp(loop, udp, respond, self.udp_timer))
            self._listeners.append(await serve_tcp(loop, tcp, self.tcp_state))
            log.info("listening on %s:%d (UDP %s, TCP) for zone %s", host, port,
                     "recvmmsg/sendmmsg" if self.udp_timer.batched else "recvfrom/sendto", self.cfg.zone)
        await serve_endpoints(self.cfg, self.ready, lambda: [self.stats.snapshot()], self._http)
        self.sources = self.make_sources()
        for s in self.sources:
            self.stats.register(s.publish)
            await s.start(loop)
        self._freezer = loop.create_task(self._freeze_when_ready())

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
