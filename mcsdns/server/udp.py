"""UDP listener: one datagram in, at most one datagram out."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import cast

from . import bound_socket

log = logging.getLogger("mcsdns.udp")

Respond = Callable[[bytes, bool], "bytes | None"]


class UDPProtocol(asyncio.DatagramProtocol):
    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.transport: asyncio.DatagramTransport | None = None
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            out = self.respond(data, False)
        except Exception:  # never let one packet stop the listener
            log.exception("error answering %d-byte query", len(data))
            return
        if out is not None and self.transport is not None:
            self.transport.sendto(out, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP errors etc.
        pass


def bind_udp(host: str, port: int, reuse_port: bool) -> socket.socket:
    return bound_socket(host, port, socket.SOCK_DGRAM, reuse_port)


async def serve_udp(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                    respond: Respond) -> asyncio.DatagramTransport:
    transport, _ = await loop.create_datagram_endpoint(lambda: UDPProtocol(respond), sock=sock)
    return transport
