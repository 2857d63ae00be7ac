"""The HTTP endpoints of a role: /health, /ready and /metrics on --health and --metrics."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..app import Config
from ..flags import http_addrs
from ..ops.errors import ConfigError, os_reason, show_addr
from ..ops.http import HTTPEndpoints, HTTPErrors, HTTPServer, serve_http
from ..ops.metrics import render
from ..ops.stats import Snapshot, Stats

log = logging.getLogger("mcsdns")


async def serve_endpoints(cfg: Config, ready: Callable[[], bool], snaps: Callable[[], list[Snapshot]],
                          out: list[HTTPServer]) -> None:
    """Serve /health, /ready (`ready`) and /metrics (`snaps`, with the endpoints' own error
    counts) on --health and --metrics, appended to `out`; ConfigError when an address
    cannot be bound."""
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
