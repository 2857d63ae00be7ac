"""The DNS listeners of one process: bind UDP and TCP on every --listen address, serve
them with a handler, and at shutdown stop intake, drain and close.

Shutdown order (`Listeners.stop`): with a hand-off, intake stops first (new datagrams
and connections go to the rest of the port's SO_REUSEPORT group, what is queued stays
readable) for `handoff` seconds; then the sockets close, open TCP queries get `drain`
seconds to finish, and what remains is closed. A set `hurry` event cuts every wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from ..nameserver.handler import Handler
from ..nameserver.xfr import Transfers
from ..ops.errors import ConfigError, os_reason, show_addr
from ..ops.stats import Publisher
from .sockets import stop_tcp_intake, stop_udp_intake
from .tcp import TCPServerState, bind_tcp, serve_tcp
from .tcpconns import TCPLimits
from .udp import BatchedUDP, RequestTimer, bind_udp, serve_udp

log = logging.getLogger("mcsdns")

HANDOFF = 0.25  # after the lameduck period: seconds between stopping intake and closing


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


async def pause(seconds: float, hurry: asyncio.Event) -> None:
    """Sleep `seconds`, or less once `hurry` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hurry.wait(), seconds)


class Listeners:
    """UDP and TCP listeners on every --listen address, answering with `handler`
    (and `transfers` for AXFR/IXFR over TCP).

    Invariant: once bound, the sockets stay bound until `stop`."""

    def __init__(self, handler: Handler, transfers: Transfers, listen: list[tuple[str, int]], *,
                 zone: str = "", reuse_port: bool = False, log_queries: bool = False,
                 tcp_limits: TCPLimits | None = None) -> None:
        self.handler = handler
        self.listen, self.zone = listen, zone
        self.reuse_port, self.log_queries = reuse_port, log_queries
        self.tcp_state = TCPServerState(handler.respond, tcp_limits or TCPLimits(), handler.panics)
        self.tcp_state.log_queries = log_queries
        self.tcp_state.stream = transfers.stream
        self.udp_timer = RequestTimer()
        self._served: list[asyncio.AbstractServer | asyncio.BaseTransport | BatchedUDP] = []
        self._fds: list[tuple[int, bool]] = []  # (fd, is UDP) of each socket

    def publishers(self) -> list[Publisher]:
        return [self.udp_timer.publish, self.tcp_state.publish]

    @property
    def bound(self) -> bool:
        return bool(self._fds)

    async def bind(self) -> None:
        """Bind UDP and TCP on every address, then serve them; ConfigError when one
        cannot be bound (then none is served)."""
        loop = asyncio.get_running_loop()
        handler, cache = self.handler, self.handler.cache
        for (host, port, udp), (_, _, tcp) in zip(*[iter(bind_listen(self.listen, self.reuse_port))] * 2,
                                                  strict=True):
            self._fds += [(udp.fileno(), True), (tcp.fileno(), False)]
            self._served.append(await serve_udp(loop, udp, handler.respond, handler.panics, self.udp_timer,
                                                cache.tables[False], cache.serial, self.log_queries))
            self._served.append(await serve_tcp(loop, tcp, self.tcp_state))
            udp_io = "recvmmsg/sendmmsg" if self.udp_timer.batched else "recvfrom/sendto"
            log.info("listening on %s:%d (UDP %s, TCP) for zone %s", host, port, udp_io, self.zone,
                     extra={"event": "listening", "address": host, "port": port, "udp_io": udp_io,
                            "zone": self.zone})

    async def stop(self, hurry: asyncio.Event, drain: float = 1.0, handoff: float = 0.0) -> None:
        """Stop taking queries and finish the open TCP queries within `drain` seconds; with
        `handoff`, first stop intake and read what is queued for that long."""
        loop = asyncio.get_running_loop()
        if handoff > 0 and not hurry.is_set():
            for fd, udp in self._fds:
                (stop_udp_intake if udp else stop_tcp_intake)(fd)
            await pause(handoff, hurry)
        for c in self._served:
            c.close()
        state = self.tcp_state
        state.drain()
        deadline = loop.time() + drain
        while state.conns and loop.time() < deadline and not hurry.is_set():
            await asyncio.sleep(0.02)
        for conn in list(state.conns):
            conn.close()
        if state.sweeper is not None:
            state.sweeper.cancel()
