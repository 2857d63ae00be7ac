"""The fields of a kept response (`response.Canned`), where the C type
(`_cannedtype.Canned`, _cannedtype.c) is not built."""

from __future__ import annotations


class CannedBase:
    """out [+ bodies[rot] + tail] is a response after its ID; hits counts its uses;
    serial_at > 0: the zone's SOA serial goes that far before the response's end."""

    __slots__ = ("out", "bodies", "tail", "hits", "rot", "serial_at")

    out: bytes
    bodies: tuple[bytes, ...] | None
    tail: bytes
    hits: int
    rot: int
    serial_at: int
