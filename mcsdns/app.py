"""Wiring: sources -> store -> zone -> handler -> listeners."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

from .handler import Handler
from .records import service_records
from .server.http import HTTPEndpoints, serve_http
from .server.tcp import TCPLimits, TCPServerState, bind_tcp, serve_tcp
from .server.udp import bind_udp, serve_udp
from .sources import Source
from .store import ServiceKey, Store
from .zone import Zone

log = logging.getLogger("mcsdns")


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
    reuse_port: bool = False
    log_queries: bool = False
    tcp_limits: TCPLimits = field(default_factory=TCPLimits)


class App:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.store = Store()
        self.zone = Zone(cfg.zone, cfg.ttl)
        self.handler = Handler(self.zone, cfg.log_queries)
        self.sources: list[Source] = []
        self.store.subscribe(self.rebuild)
        self._closers: list[asyncio.AbstractServer | asyncio.BaseTransport] = []
        self.stopping = asyncio.Event()

    def rebuild(self, keys: set[ServiceKey]) -> None:
        for key in keys:
            si, slices = self.store.service(key)
            names = service_records(si, slices, self.zone.origin, self.cfg.ttl) if si else {}
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
        tcp_state = TCPServerState(respond, self.cfg.tcp_limits)
        self.tcp_state = tcp_state
        for host, port in self.cfg.listen:
            self._closers.append(await serve_udp(loop, bind_udp(host, port, self.cfg.reuse_port), respond))
            self._closers.append(await serve_tcp(loop, bind_tcp(host, port, self.cfg.reuse_port), tcp_state))
            log.info("listening on %s:%d (UDP, TCP) for zone %s", host, port, self.cfg.zone)
        from .metrics import render_metrics

        for addr in {a for a in (self.cfg.health, self.cfg.metrics) if a}:
            ep = HTTPEndpoints(self.ready, lambda: render_metrics(self))
            self._closers.append(await serve_http(addr[0], addr[1], ep))
            log.info("HTTP /health /ready /metrics on %s:%d", *addr)
        self.sources = self.make_sources()
        for s in self.sources:
            await s.start(loop)

    async def stop(self) -> None:
        for s in self.sources:
            await s.stop()
        for c in self._closers:
            c.close()


async def run(cfg: Config) -> None:
    app = App(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stopping.set)
    await app.start()
    await app.stopping.wait()
    log.info("shutting down")
    await app.stop()
