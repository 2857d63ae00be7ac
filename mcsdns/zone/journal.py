"""Zone versions: a content digest, the SOA serial per version, and a bounded
journal of per-version differences for IXFR (RFC 1995).

`Versions.fold` folds each changed service's input digest into the zone's,
`Versions.record(change)` each built change into the pending difference;
`Versions.assign()` then gives the content its serial (the caller,
`publish.publisher.ZonePublisher`, serves it). The digest is an XOR of one
128-bit hash per service of what its records are made of (`service_digest`:
the parsed objects and RECORDS_FORMAT, not the records, so that no record need
be built to know the serial), updated in O(changed services) and the same in
every process serving the same data.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from ..data.objects import EndpointSlice, ServiceImport
from ..dns.names import decode_name
from ..kube.apiclient.keys import Key
from ..ops.stats import Put, define
from .locality import Locality
from .records import inputs
from .rrsets import EMPTY, Names, rrsets_at
from .serial import SerialClock, serial_lt
from .zone import Change, Zone

log = logging.getLogger("mcsdns.journal")

JOURNAL_MAX_RRS = 200_000  # records kept in the journal, removed + added, all versions
JOURNAL_MAX_VERSIONS = 1000

Record = tuple[bytes, int, bytes]  # owner (wire), type, rdata

# The modules whose code decides what records given objects make (the makers, their RRsets,
# locality, the parsed models, names and rdata encoding).
MAKER_MODULES = ("mcsdns.zone.records", "mcsdns.zone.rrsets", "mcsdns.zone.zone", "mcsdns.zone.locality",
                 "mcsdns.data.objects", "mcsdns.dns.names", "mcsdns.dns.rdata")


def maker_sources(modules: tuple[str, ...] = MAKER_MODULES) -> list[str | None]:
    """The source file of each maker module (None where a module has none)."""
    return [getattr(sys.modules[name], "__file__", None) for name in modules]


def records_format(sources: Sequence[str | None]) -> bytes:
    """What `zone.records` makes of given inputs, as a digest of the makers' source: any change
    to that code (an upgrade) changes every service's digest, so the serial moves with the
    records even where the objects do not, and nobody has to remember to bump a number."""
    h = hashlib.blake2b(digest_size=16)
    for path in sources:
        try:
            with open(path or "", "rb") as f:
                h.update(f.read())
        except OSError:  # no source (a frozen build): the package's version stands for it
            from importlib.metadata import version
            h.update(version("mcsdns").encode())
    return h.digest()


RECORDS_FORMAT = records_format(maker_sources())
_ENCODE = msgspec.msgpack.Encoder().encode  # dataclasses and tuples, in field order: deterministic

ZONE_SERIAL = define("mcsdns_zone_serial", "gauge", "SOA serial served (0 before the first sync).")


def service_digest(key: Key, si: ServiceImport | None, slices: list[EndpointSlice], loc: Locality) -> int:
    """Hash of what one service's records are made of (0 without its ServiceImport):
    BLAKE2b-128 of RECORDS_FORMAT, the key and what its records read (`records.inputs`: the
    ServiceImport and, where they read them, its slices in key order and the locality). Equal inputs give
    equal digests in every process; docs/transfers.md says when a change is spurious."""
    if si is None:
        return 0
    parts = (RECORDS_FORMAT, key, *inputs(si, slices, loc))
    return int.from_bytes(hashlib.blake2b(_ENCODE(parts), digest_size=16).digest(), "big")


def diff(old: Names, new: Names) -> tuple[list[Record], list[Record]]:
    """(removed, added) records between two versions of one service's names."""
    removed: list[Record] = []
    added: list[Record] = []
    for n in old.keys() | new.keys():
        o, w = rrsets_at(old.get(n, EMPTY)), rrsets_at(new.get(n, EMPTY))
        for t in o.keys() | w.keys():
            ords = o[t].records() if t in o else ()
            nrds = w[t].records() if t in w else ()
            if ords == nrds:
                continue
            ns, os_ = set(nrds), set(ords)
            removed += [(n, t, rd) for rd in dict.fromkeys(ords) if rd not in ns]
            added += [(n, t, rd) for rd in dict.fromkeys(nrds) if rd not in os_]
    return removed, added


class Worked(NamedTuple):
    """A built service change's journal difference, worked out ahead (off the loop); None
    when it was not (nothing journaled yet: `record` works it out if needed)."""

    removed: list[Record] | None
    added: list[Record] | None


def work_out(old: Names, new: Names, journaled: bool = True) -> Worked:
    """What `Versions.record` computes for a change from `old` to `new`, when `journaled`
    (before the first serial nothing is journaled)."""
    return Worked(*diff(old, new)) if journaled else Worked(None, None)


@dataclass(frozen=True, slots=True)
class Delta:
    """The change from serial `old` to serial `new`."""

    old: int
    new: int
    removed: tuple[Record, ...]
    added: tuple[Record, ...]


class Versions:
    """The content digest, the serial assigned to it, and the journal of differences.

    Invariants: `digest` is that of every change recorded; once `established`, the
    journal's newest entry ends at the zone's serial.
    """

    def __init__(self, zone: Zone, clock: SerialClock) -> None:
        self.zone = zone
        self.clock = clock
        self.digest = 0
        self.svc_digest: dict[Key, int] = {}
        self.established = False  # a serial has been assigned to loaded content
        self.journal: deque[Delta] = deque()
        self.journal_rrs = 0
        self.pending_removed: list[Record] = []
        self.pending_added: list[Record] = []
        self.pending_overflow = False

    def publish(self, put: Put) -> None:
        put(ZONE_SERIAL, self.zone.serial if self.established else 0)

    def fold(self, key: Key, d: int) -> None:
        """A service's inputs now have the digest `d` (`service_digest`)."""
        self.digest ^= self.svc_digest.pop(key, 0) ^ d
        if d:
            self.svc_digest[key] = d

    def deferrable(self) -> bool:
        """Whether the first serial may be given before every service's digest is folded:
        none given yet, and the clock's first is new whatever the digest."""
        return not self.established and self.clock.fresh()

    def settled(self) -> None:
        """Every service's digest is folded, after a serial was given (`deferrable`): the
        clock learns what the serial served stands for."""
        if self.established:
            self.clock.adopt(self.digest.to_bytes(16, "big"), self.zone.serial)

    def unjournaled(self) -> None:
        """Content changed in a service whose records were never built: the pending
        difference is unknown, so IXFR from before it sends the whole zone."""
        if self.established:
            self.pending_overflow = True
            self.pending_removed, self.pending_added = [], []

    def record(self, change: Change, worked: Worked | None = None) -> None:
        """Fold one built service change into the pending difference, once established;
        `worked`: the difference, computed ahead."""
        old, new = change.old, change.new
        if self.established and not self.pending_overflow:
            if worked is None or worked.removed is None or worked.added is None:
                r, a = diff(old, new)  # not worked out ahead
            else:
                r, a = worked.removed, worked.added
            self.pending_removed += r
            self.pending_added += a
            if len(self.pending_removed) + len(self.pending_added) > JOURNAL_MAX_RRS:
                self.pending_overflow = True
                self.pending_removed, self.pending_added = [], []

    def assign(self) -> tuple[int, bool] | None:
        """The serial for the recorded content, when it differs from the one served:
        (serial, allocated by this call), the journal entry recorded. OSError when the
        shared serial state cannot be used (nothing changed then)."""
        prev = self.zone.serial if self.established else None
        serial, allocated = self.clock.assign(self.digest.to_bytes(16, "big"), prev)
        if self.established and serial == prev:
            return None
        self._record(prev, serial)
        self.established = True
        log.info("zone %s serial %d%s", decode_name(self.zone.origin), serial, " (new)" if allocated else "",
                 extra={"event": "serial", "zone": decode_name(self.zone.origin), "serial": serial,
                        "new": allocated})
        return serial, allocated

    def _record(self, prev: int | None, serial: int) -> None:
        removed, added, overflow = self.pending_removed, self.pending_added, self.pending_overflow
        self.pending_removed, self.pending_added, self.pending_overflow = [], [], False
        if prev is None:
            return
        if overflow:  # too large to journal: older versions can no longer be diffed
            self.journal.clear()
            self.journal_rrs = 0
            return
        self.journal.append(Delta(prev, serial, tuple(removed), tuple(added)))
        self.journal_rrs += len(removed) + len(added)
        while self.journal and (self.journal_rrs > JOURNAL_MAX_RRS
                                or len(self.journal) > JOURNAL_MAX_VERSIONS):
            d = self.journal.popleft()
            self.journal_rrs -= len(d.removed) + len(d.added)

    def deltas_since(self, serial: int) -> list[Delta] | None:
        """The journal from `serial` to the current one ([] if `serial` is current or
        newer), or None when `serial` is not in the journal (send the whole zone)."""
        cur = self.zone.serial
        if serial == cur or serial_lt(cur, serial):
            return []
        out: list[Delta] = []
        for d in self.journal:
            if out:
                out.append(d)
            elif d.old == serial:
                out.append(d)
        if not out or out[-1].new != cur:
            return None
        return out
