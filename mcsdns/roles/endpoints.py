"""What a role shows the outside: /health, /ready and /metrics on --health and --metrics,
and NOTIFY to the --notify secondaries."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..dns.names import encode_name
from ..flags import http_addrs
from ..nameserver.notify import Notifier
from ..ops.errors import ConfigError, os_reason, show_addr
from ..ops.http import HTTPEndpoints, HTTPErrors, HTTPServer, serve_http
from ..ops.stats import Snapshot, Stats
from ..serveconfig import Config

log = logging.getLogger("mcsdns")


def render(snaps: list[Snapshot]) -> bytes:
    """The /metrics text; prometheus_client (~0.1 s to import) is loaded at the first scrape,
    not at every start."""
    from ..ops.metrics import render as text

    return text(snaps)


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


def notifier_for(cfg: Config) -> Notifier | None:
    """The NOTIFY sender for --notify (signed with the first TSIG key), or None. A role
    feeds it the serial it serves (`Notifier.update`), from one event: the one process
    its publisher's new serial, the supervisor the serial all its workers report."""
    if not cfg.notify:
        return None
    return Notifier(encode_name(cfg.zone), cfg.ttl, cfg.notify, next(iter(cfg.tsig_keys), None))
