"""The records at one name: `RRset` (one type), `One` (a name with a single RRset), the
shared `EMPTY` of an empty non-terminal, and `Names`, a service's names with theirs. An
RRset larger than one message holds is cut at creation (dns.limits) and the cut noted
in the `LeftOut.cuts` of the build under way in this thread (`cuts.into`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..dns.limits import SAFE_COUNT, fitting

cuts = threading.local()  # .into: the `LeftOut.cuts` of this thread's build (on or off the loop)


@dataclass(slots=True, unsafe_hash=True)  # immutable by use; frozen would make creation 4x slower
class RRset:
    """Records of one type at one name; `extra` are (owner, type, rdata) for Additional."""

    rtype: int
    rdatas: tuple[bytes, ...]
    extra: tuple[tuple[bytes, int, bytes], ...] = ()
    rotate: bool = False  # answer order may be rotated between queries
    groups: tuple[int, ...] = ()  # sizes of consecutive runs rotated separately (tiers)

    def __post_init__(self) -> None:
        if len(self.rdatas) > SAFE_COUNT:  # maybe more than one message holds (dns.limits)
            _cap(self)


def _cap(rrset: RRset) -> None:
    """Keep the first records of `rrset` that fit one message (dns.limits), and its tiers'
    sizes up to them; noted in the LeftOut of this thread's `service_records` call."""
    n = fitting(rrset.rdatas)
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


class One(Mapping[int, RRset]):
    """The RRsets of a name that has only one: what most endpoint names have, in a
    quarter of a dict's memory (40,000 endpoints: 5.6 MiB less)."""

    __slots__ = ("rrset",)

    def __init__(self, rrset: RRset) -> None:
        self.rrset = rrset

    def __getitem__(self, rtype: int) -> RRset:
        if rtype != self.rrset.rtype:
            raise KeyError(rtype)
        return self.rrset

    def __iter__(self) -> Iterator[int]:
        yield self.rrset.rtype

    def __len__(self) -> int:
        return 1

    def __contains__(self, rtype: object) -> bool:
        return rtype == self.rrset.rtype

    def get(self, rtype: int, default: Any = None) -> Any:
        return self.rrset if rtype == self.rrset.rtype else default

    def __eq__(self, other: object) -> bool:
        if isinstance(other, One):
            return self.rrset == other.rrset
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # as a dict's


RRsets = Mapping[int, RRset]  # the records at one name, by type
EMPTY: RRsets = MappingProxyType({})  # an empty non-terminal's, shared by all of them
Names = dict[bytes, RRsets]
