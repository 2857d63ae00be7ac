"""Record data, one class per type we serve: to wire (`wire()`), from wire
(`from_wire`) and to master-file text (`text()`). Names inside rdata are
uncompressed (RFC 3597 for SOA/NS read back from our own records; RFC 2782 for SRV)."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import ClassVar

from .errors import FormErr
from .names import decode_name, read_name, skip_name
from .types import RRType

SERIAL_FROM_END = 20  # octets from the end of SOA rdata to its serial (then refresh..minimum)
SERIAL_SIZE = 4
_SOA_TAIL = struct.Struct("!IIIII")
_SRV_HEAD = struct.Struct("!HHH")


@dataclass(frozen=True, slots=True)
class Address:
    """A or AAAA: 4 or 16 octets."""

    packed: bytes

    @property
    def rtype(self) -> RRType:
        return RRType.A if len(self.packed) == 4 else RRType.AAAA

    def wire(self) -> bytes:
        return self.packed

    @classmethod
    def from_wire(cls, rd: bytes) -> Address:
        if len(rd) not in (4, 16):
            raise FormErr("address of bad length")
        return cls(rd)

    def text(self) -> str:
        return str(ipaddress.ip_address(self.packed))


@dataclass(frozen=True, slots=True)
class NS:
    """A name server's name."""

    target: bytes
    rtype: ClassVar[RRType] = RRType.NS

    def wire(self) -> bytes:
        return self.target

    @classmethod
    def from_wire(cls, rd: bytes) -> NS:
        return cls(read_name(rd, 0, "NS target")[0])

    def text(self) -> str:
        return decode_name(self.target)


@dataclass(frozen=True, slots=True)
class SOA:
    """Start of authority; `SERIAL_FROM_END` is where its serial sits in the wire form."""

    mname: bytes
    rname: bytes
    serial: int
    refresh: int = 7200
    retry: int = 1800
    expire: int = 86400
    minimum: int = 5
    rtype: ClassVar[RRType] = RRType.SOA

    @classmethod
    def for_zone(cls, origin: bytes, ttl: int, serial: int) -> SOA:
        """Our SOA: ns.dns.<zone>, hostmaster.<zone>, negative TTL = the record TTL."""
        return cls(b"\x02ns\x03dns" + origin, b"\x0ahostmaster" + origin, serial, minimum=ttl)

    def wire(self) -> bytes:
        return self.mname + self.rname + _SOA_TAIL.pack(self.serial, self.refresh, self.retry,
                                                        self.expire, self.minimum)

    @classmethod
    def from_wire(cls, rd: bytes) -> SOA:
        mname, i = read_name(rd, 0, "SOA MNAME")
        rname, i = read_name(rd, i, "SOA RNAME")
        if len(rd) - i != _SOA_TAIL.size:
            raise FormErr("bad SOA rdata length")
        return cls(mname, rname, *_SOA_TAIL.unpack_from(rd, i))

    def text(self) -> str:
        return (f"{decode_name(self.mname)} {decode_name(self.rname)} {self.serial} {self.refresh} "
                f"{self.retry} {self.expire} {self.minimum}")


def with_serial(soa_wire: bytes, serial: int | bytes) -> bytes:
    """SOA rdata (or anything ending in one) with another serial."""
    s = serial if isinstance(serial, bytes) else struct.pack("!I", serial)
    return soa_wire[:-SERIAL_FROM_END] + s + soa_wire[-SERIAL_FROM_END + SERIAL_SIZE:]


def serial_in_message(msg: bytes, rd_start: int) -> int:
    """The serial of SOA rdata at `rd_start` in a message (its names may be compressed)."""
    i = skip_name(msg, skip_name(msg, rd_start))
    if i + SERIAL_SIZE > len(msg):
        raise FormErr("truncated SOA")
    return int(struct.unpack_from("!I", msg, i)[0])


def srv_wire(priority: int, weight: int, port: int, target: bytes) -> bytes:
    """SRV rdata without building an SRV (what the zone renders per endpoint and port)."""
    return _SRV_HEAD.pack(priority, weight, port) + target


@dataclass(frozen=True, slots=True)
class SRV:
    """Service location (RFC 2782); the target is never compressed."""

    priority: int
    weight: int
    port: int
    target: bytes
    rtype: ClassVar[RRType] = RRType.SRV
    TARGET_AT: ClassVar[int] = _SRV_HEAD.size  # offset of the target in the rdata

    def wire(self) -> bytes:
        return srv_wire(self.priority, self.weight, self.port, self.target)

    @classmethod
    def from_wire(cls, rd: bytes) -> SRV:
        if len(rd) < _SRV_HEAD.size + 1:
            raise FormErr("truncated SRV")
        target, end = read_name(rd, _SRV_HEAD.size, "SRV target")
        if end != len(rd):
            raise FormErr("bad SRV rdata length")
        priority, weight, port = _SRV_HEAD.unpack_from(rd)
        return cls(priority, weight, port, target)

    def text(self) -> str:
        return f"{self.priority} {self.weight} {self.port} {decode_name(self.target)}"


@dataclass(frozen=True, slots=True)
class TXT:
    """Character strings."""

    strings: tuple[bytes, ...]
    rtype: ClassVar[RRType] = RRType.TXT

    @classmethod
    def of(cls, *strings: str) -> TXT:
        return cls(tuple(s.encode() for s in strings))

    def wire(self) -> bytes:
        return b"".join(bytes((len(s),)) + s for s in self.strings)

    @classmethod
    def from_wire(cls, rd: bytes) -> TXT:
        out, i = [], 0
        while i < len(rd):
            n = rd[i]
            if i + 1 + n > len(rd):
                raise FormErr("truncated TXT")
            out.append(rd[i + 1:i + 1 + n])
            i += n + 1
        return cls(tuple(out))

    def text(self) -> str:
        return " ".join('"' + s.decode("utf-8", "replace") + '"' for s in self.strings)


Rdata = Address | NS | SOA | SRV | TXT
_CLASSES: dict[int, type[NS] | type[SOA] | type[SRV] | type[TXT] | type[Address]] = {
    RRType.A: Address, RRType.AAAA: Address, RRType.NS: NS, RRType.SOA: SOA, RRType.SRV: SRV,
    RRType.TXT: TXT}


def from_wire(rtype: int, rd: bytes) -> Rdata | None:
    """The rdata object for a type we serve; None for any other type."""
    cls = _CLASSES.get(rtype)
    return cls.from_wire(rd) if cls is not None else None


def text(rtype: int, rd: bytes) -> str:
    """Master-file text of rdata; RFC 3597 generic form for types we do not serve."""
    obj = from_wire(rtype, rd)
    return obj.text() if obj is not None else f"\\# {len(rd)} {rd.hex()}"
