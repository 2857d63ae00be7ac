"""The records at one name: `RRset` (one type), `One` (an RRset that is also the RRsets of a
name that has only it), `Node` (a few RRsets: a service's name), the shared `EMPTY` of an
empty non-terminal, and `Names`, a service's names with theirs: RRsets, or `Addresses`
alone (`rrsets_at` reads either). An RRset larger than one message holds is cut at creation
(dns.limits) and the cut noted in the `LeftOut.cuts` of the build under way in this thread
(`cuts.into`).

Compact by design (10,000 services hold about 75,000 names): a name stored once, as the
zone's key, is referred to by the RRsets that need it (an SRV RRset's targets after their
shared `head`; Additional as the names whose addresses it adds), and one object serves
where a name has a single RRset."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..dns.limits import SAFE_COUNT, fitting
from ..dns.types import RRType

cuts = threading.local()  # .into: the `LeftOut.cuts` of this thread's build (on or off the loop)


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class RRset:
    """Records of one type at one name: `records()`, each `head` + one of `rdatas` (an SRV
    RRset's priority, weight and port, when all its records share them, then each target:
    the target name object the zone also keys; `head` empty: `rdatas` whole). `extra`: the
    names whose A and AAAA records go in Additional, in order (looked up when rendered)."""

    rtype: int
    rdatas: tuple[bytes, ...]
    extra: tuple[bytes, ...] = ()
    rotate: bool = False  # answer order may be rotated between queries
    groups: tuple[int, ...] = ()  # sizes of consecutive runs rotated separately (tiers)
    head: bytes = b""  # what every record starts with, before its `rdatas` entry

    def __post_init__(self) -> None:
        if len(self.rdatas) > SAFE_COUNT:  # maybe more than one message holds (dns.limits)
            _cap(self)

    def records(self) -> tuple[bytes, ...]:
        """The rdata of each record, whole."""
        return joined(self.head, self.rdatas)


def joined(head: bytes, rdatas: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """Records whole: `head` + each of `rdatas` (`RRset.head`)."""
    return tuple([head + rd for rd in rdatas]) if head else rdatas


def _cap(rrset: RRset) -> None:
    """Keep the first records of `rrset` that fit one message (dns.limits), and its tiers'
    sizes up to them; noted in the LeftOut of this thread's `service_records` call."""
    n = fitting(rrset.records())
    if n == len(rrset.rdatas):
        return
    into = getattr(cuts, "into", None)
    if into is not None:
        into.append((rrset.rtype, n, len(rrset.rdatas)))
    rrset.rdatas = rrset.rdatas[:n]
    if rrset.groups:
        groups, left = [], n
        for g in rrset.groups:
            if left <= 0:
                break
            groups.append(min(g, left))
            left -= g
        rrset.groups = tuple(groups)


class One(RRset, Mapping[int, RRset]):
    """An RRset that is also the RRsets of its name, for a name that has only it (most: an
    endpoint's addresses, a port name's SRV): one object where a map and an RRset were
    (40,000 endpoints: 4.6 MB less)."""

    __slots__ = ()

    def __getitem__(self, rtype: int) -> RRset:
        if rtype != self.rtype:
            raise KeyError(rtype)
        return self

    def __iter__(self) -> Iterator[int]:
        yield self.rtype

    def __len__(self) -> int:
        return 1

    def __contains__(self, rtype: object) -> bool:
        return rtype == self.rtype

    def get(self, rtype: int, default: Any = None) -> Any:
        return self if rtype == self.rtype else default


class Node(Mapping[int, RRset]):
    """The RRsets of a name that has a few, in a tuple (a service's name: its addresses and its
    SRV), in half the memory of a small dict."""

    __slots__ = ("rrsets",)

    def __init__(self, rrsets: Iterable[RRset]) -> None:
        self.rrsets = tuple(rrsets)

    def __getitem__(self, rtype: int) -> RRset:
        for rrset in self.rrsets:
            if rrset.rtype == rtype:
                return rrset
        raise KeyError(rtype)

    def __iter__(self) -> Iterator[int]:
        return iter([rrset.rtype for rrset in self.rrsets])

    def __len__(self) -> int:
        return len(self.rrsets)

    def __contains__(self, rtype: object) -> bool:
        return any(rrset.rtype == rtype for rrset in self.rrsets)

    def get(self, rtype: int, default: Any = None) -> Any:
        for rrset in self.rrsets:
            if rrset.rtype == rtype:
                return rrset
        return default

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Node):
            return self.rrsets == other.rrsets
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # as a dict's


RRsets = Mapping[int, RRset]  # the records at one name, by type
EMPTY: RRsets = MappingProxyType({})  # an empty non-terminal's, shared by all of them
# The value of a name with one address and nothing else (most endpoints' names): the address's
# tuple itself, the store's (40,000 endpoints: 3.2 MB less than as a `One`).
Addresses = tuple[bytes, ...]
Names = dict[bytes, RRsets | Addresses]


def family(addr: bytes) -> int:
    """The record type of a packed address: A (4 octets) or AAAA (16)."""
    return RRType.A if len(addr) == 4 else RRType.AAAA


def rrsets_at(value: RRsets | Addresses) -> RRsets:
    """The RRsets of a name's value in `Names`."""
    if isinstance(value, tuple):
        return One(family(value[0]), value)
    return value
