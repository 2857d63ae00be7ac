"""Socket helpers for the listeners: a bound non-blocking socket, and handing a port over to
the other sockets of its SO_REUSEPORT group (`stop_udp_intake`, `stop_tcp_intake`)."""

from __future__ import annotations

import ctypes
import os
import socket
import struct


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


# Handing a port over to the other sockets of its SO_REUSEPORT group before closing
# ours: closing drops the datagrams queued on a UDP socket and resets the connections
# queued on a TCP listener, so first no new ones may reach them.

# Classic BPF socket filter: drop a TCP segment with SYN set and ACK clear, pass the
# rest (at a socket filter, offset 0 is the TCP header; octet 13 holds the flags).
_DROP_SYN = ((0x30, 0, 0, 13),           # ldb [13]
             (0x54, 0, 0, 0x12),         # and #(SYN|ACK)
             (0x15, 0, 1, 0x02),         # jeq #SYN, drop, pass
             (0x06, 0, 0, 0),            # drop: ret #0
             (0x06, 0, 0, 0xFFFFFFFF))   # pass: ret #-1
SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)


def stop_udp_intake(fd: int) -> None:
    """Make the kernel stop delivering other senders' datagrams to UDP socket `fd`
    (connected to its own port on loopback, it leaves hash selection of its
    SO_REUSEPORT group) while the datagrams already queued stay readable."""
    s = socket.socket(fileno=os.dup(fd))
    try:
        port = s.getsockname()[1]
        s.connect(("::1" if s.family == socket.AF_INET6 else "127.0.0.1", port))
    except OSError:
        pass
    finally:
        s.close()


def stop_tcp_intake(fd: int) -> None:
    """Make listening socket `fd` drop new connection attempts (SYN) while handshakes
    under way complete into its accept queue; a dropped SYN is retransmitted by
    the client and reaches another listener of the group once this one is closed."""
    prog = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in _DROP_SYN))
    s = socket.socket(fileno=os.dup(fd))
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                     struct.pack("HL", len(_DROP_SYN), ctypes.addressof(prog)))
    except OSError:
        pass
    finally:
        s.close()
