"""UDP listener: one datagram in, at most one datagram out."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import cast

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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


async def serve_udp(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                    respond: Respond) -> asyncio.DatagramTransport:
    transport, _ = await loop.create_datagram_endpoint(lambda: UDPProtocol(respond), sock=sock)
    return transport
