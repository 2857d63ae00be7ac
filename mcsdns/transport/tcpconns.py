"""The TCP listener's connection table: admission, eviction, the per-network cap of
connections holding part of a message, and the idle and read timeouts.

Limits: at most `max_conns` open connections and `max_per_client` from one
client (an IPv4 address, an IPv6 /64); at most `max_per_client` connections
of one network (an IPv4 /24, an IPv6 /64) holding part of a message at once
(one more is closed). A new connection beyond either limit first closes
another to make room and is refused only when none qualifies: at the client
limit, the client's own oldest idle one; at the total limit, the oldest idle
one of the client holding the most, else the one holding part of a message
longest (over STALE seconds) among networks holding at least two more such
connections than the new one's (so networks cannot evict each other in
turn), else the oldest idle one of all that was answered or opened over
STALE seconds ago (a new client's query may not be read yet), else the one
holding part of a message longest among those networks, however briefly.
Idle: no message partly read, no transfer or answer being sent. An idle
connection is closed after `idle_timeout`, and one holding part of a message
once `read_timeout` passes without a whole message taken up (the deadline
restarts with each, so a client may pipeline without end).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar

from ..ops.stats import Put, define

STALE = 1.0  # seconds holding part of a message after which a connection may be closed for a new one

REJECTED = define("mcsdns_tcp_connections_rejected_total", "counter",
                  "New TCP connections refused at --tcp-max-conns, none to close.")
CLIENT_REFUSED = define("mcsdns_tcp_connections_client_refused_total", "counter",
                        "New TCP connections refused at --tcp-max-conns-per-client, "
                        "none of the client's idle to close.")
EVICTED = define("mcsdns_tcp_connections_evicted_total", "counter",
                 "TCP connections closed to make room for a new one, by the limit reached "
                 "(net: one network's connections holding part of a message).",
                 ("limit",))
TIMED_OUT = define("mcsdns_tcp_connections_timed_out_total", "counter",
                   "TCP connections closed idle or slow.")
OPEN = define("mcsdns_tcp_connections", "gauge", "Open TCP connections.")


class TCPLimits:
    """Bounds of the TCP server: connections in all and per client, idle and read timeouts."""

    def __init__(self, max_conns: int = 1000, idle_timeout: float = 10.0,
                 read_timeout: float = 5.0, max_per_client: int = 100) -> None:
        self.max_conns = max_conns
        self.idle_timeout = idle_timeout
        self.read_timeout = read_timeout
        self.max_per_client = max_per_client


def client_of(peer: Any) -> tuple[str, str]:
    """What the per-client limit counts (IPv4 address, IPv6 /64) and the per-network
    cap of connections holding part of a message (IPv4 /24, IPv6 /64)."""
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return str(host), str(host)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            net = str(ipaddress.IPv6Address(int(ip) >> 64 << 64)) + "/64"
            return net, net
        ip = ip.ipv4_mapped
    return str(ip), str(ipaddress.IPv4Address(int(ip) >> 8 << 8)) + "/24"


class Conn(Hashable, Protocol):
    """What the table reads of a connection (mcsdns.transport.tcp.TCPConnection)."""

    @property
    def client(self) -> str: ...
    @property
    def net(self) -> str: ...
    @property
    def answered(self) -> bool: ...  # at least one answer written
    @property
    def last_active(self) -> float: ...  # time.monotonic() of its last read or transfer write
    @property
    def out(self) -> object: ...  # a transfer being sent, or None
    @property
    def paused(self) -> bool: ...  # the client is not reading
    def idle(self) -> bool: ...
    def close(self) -> None: ...


C = TypeVar("C", bound=Conn)


class ConnectionTable(Generic[C]):
    """The open connections, oldest first, by client and in all; those holding part of a
    message and how many each network holds; what was refused, evicted and timed out."""

    def __init__(self, limits: TCPLimits) -> None:
        self.limits = limits
        self.conns: dict[C, None] = {}  # oldest first
        self.clients: dict[str, dict[C, None]] = {}  # by client_of(), oldest first
        # connections holding part of a message (or queued input): since when, oldest first
        self.partial: dict[C, float] = {}
        self.nets: dict[str, int] = {}  # how many of them each network holds
        self.rejected = 0
        self.client_refused = 0
        self.evicted = {"total": 0, "client": 0, "net": 0}
        self.timed_out = 0

    def publish_table(self, put: Put) -> None:
        put(REJECTED, self.rejected)
        put(CLIENT_REFUSED, self.client_refused)
        for limit, n in self.evicted.items():
            put(EVICTED, n, limit=limit)
        put(TIMED_OUT, self.timed_out)
        put(OPEN, len(self.conns))

    def admit(self, conn: C) -> bool:
        """Add a new connection, closing another to make room; False: refused."""
        lim = self.limits
        mine = self.clients.get(conn.client)
        if mine is not None and len(mine) >= lim.max_per_client:
            if not self._evict(mine, "client"):
                self.client_refused += 1
                return False
        if len(self.conns) >= lim.max_conns and not self._make_room(conn):
            self.rejected += 1
            return False
        self.conns[conn] = None
        self.clients.setdefault(conn.client, {})[conn] = None
        return True

    def _make_room(self, conn: C) -> bool:
        """The table is full: close a connection for `conn`, in the order the module
        docstring gives; False when none qualifies."""
        if self._evict(max(self.clients.values(), key=len), "total"):
            return True
        now = time.monotonic()
        room = self.nets.get(conn.net, 0) + 2  # the victim's network keeps more than conn's
        fair = max(self.nets.values(), default=0) >= room
        return ((fair and self._evict_partial(room, now - STALE))
                or self._evict(self.conns, "total", now - STALE)
                or (fair and self._evict_partial(room, now)))

    def _evict_partial(self, room: int, cutoff: float) -> bool:
        """Close the connection holding part of a message longest, since before `cutoff`,
        of a network holding at least `room` such; False when there is none."""
        for c, since in self.partial.items():
            if since > cutoff:
                return False
            if c.out is None and not c.paused and self.nets[c.net] >= room:
                self.evicted["total"] += 1
                c.close()
                return True
        return False

    def hold(self, conn: C) -> None:
        """`conn` holds part of a message: (re)start its read deadline; close it when its
        network already holds `max_per_client` such connections."""
        if conn in self.partial:
            del self.partial[conn]  # re-inserted last: the dict stays oldest first
        else:
            n = self.nets.get(conn.net, 0)
            if n >= self.limits.max_per_client:
                self.evicted["net"] += 1
                conn.close()
                return
            self.nets[conn.net] = n + 1
        self.partial[conn] = time.monotonic()

    def release(self, conn: C) -> None:
        """`conn` no longer holds part of a message."""
        if self.partial.pop(conn, None) is not None:
            n = self.nets[conn.net] - 1
            if n:
                self.nets[conn.net] = n
            else:
                del self.nets[conn.net]

    def _evict(self, among: dict[C, None], limit: str, born: float = float("inf")) -> bool:
        """Close the oldest idle connection of `among`, skipping those never answered that
        were last read after `born` (a new client's query may not be read yet); False
        when there is none."""
        victim = next((c for c in among if c.idle() and (c.answered or c.last_active <= born)), None)
        if victim is None:
            return False
        self.evicted[limit] += 1
        victim.close()
        return True

    def forget(self, conn: C) -> None:
        self.release(conn)
        if conn in self.conns:
            del self.conns[conn]
            mine = self.clients[conn.client]
            del mine[conn]
            if not mine:
                del self.clients[conn.client]

    def sweep(self) -> None:
        now = time.monotonic()
        lim = self.limits
        late = []
        for c, since in self.partial.items():
            if now - since <= lim.read_timeout:
                break
            late.append(c)
        for c in late:
            self.timed_out += 1
            c.close()
        for c in list(self.conns):
            if c not in self.partial and now - c.last_active > lim.idle_timeout:
                # (a transfer counts as active while the client keeps reading it)
                self.timed_out += 1
                c.close()

