"""The one-process role (`mcsdns serve` without --workers): the zone, its source, the
listeners, /health /ready /metrics, --state-dir and NOTIFY, all in this process."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..serveconfig import Config
from .endpoints import notifier_for, serve_endpoints
from .loader import loader_for
from .serving import Serving, listeners_for, run_loop

if TYPE_CHECKING:
    from ..sources.kube import Begun


class SingleProcess(Serving):
    """Answers on --listen from its own source (`begun`: the Kubernetes source, already
    reading). With --reuse-port it binds only once the zone is loaded (a server starting
    next to another takes no queries before). NOTIFY follows the serials this process serves."""

    def __init__(self, cfg: Config, begun: Begun | None = None) -> None:
        loader = loader_for(cfg, begun=begun)
        super().__init__(cfg, loader, listeners_for(cfg, loader, cfg.reuse_port))
        self.notifier = notifier = notifier_for(cfg)
        if notifier is not None:
            self.pipeline.publisher.on_serial.append(lambda serial, _new: notifier.update(serial))
            self.stats.register(notifier.publish)

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; the exit status."""
        run_loop(self.main)
        return 0

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loader.prepare(loop)  # a kubeconfig that does not load: ConfigError before binding
        await serve_endpoints(self.cfg, self.serving, lambda: [self.stats.snapshot()], self.http)
        await self.bind(loop, now=not self.cfg.reuse_port)
        await self.loader.start(loop)
        if self.notifier is not None:
            self.notifier.start()

    async def close(self) -> None:
        if self.notifier is not None:
            await self.notifier.stop()
