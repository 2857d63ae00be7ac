"""The fields of a cached response, where the C extension (`server._batchio.Canned`) is not built."""

from __future__ import annotations


class CannedBase:
    """out [+ bodies[rot] + tail] is a response after its ID; hits counts its uses."""

    __slots__ = ("out", "bodies", "tail", "hits", "rot")

    out: bytes
    bodies: tuple[bytes, ...] | None
    tail: bytes
    hits: int
    rot: int
