"""Network front ends: UDP and TCP DNS listeners, and the HTTP endpoints."""

from __future__ import annotations

import socket


def bound_socket(host: str, port: int, kind: socket.SocketKind, reuse_port: bool) -> socket.socket:
    """A non-blocking socket bound to host:port (IPv6 when host has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if kind == socket.SOCK_DGRAM:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock
