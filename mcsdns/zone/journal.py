"""Zone versions: a content digest, the SOA serial per version, and a bounded
journal of per-version differences for IXFR (RFC 1995).

`Versions.record(change)` folds each applied service change into the digest
and the pending difference; `Versions.assign()` then gives the content its
serial (the caller, `server.publisher.ZonePublisher`, serves it). The digest
is an XOR of one 128-bit hash per service, so it is updated in O(changed
services) and is the same in every process serving the same data.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..dns.limits import RDATA_MAX
from ..dns.names import decode_name
from ..kube.keys import Key
from ..ops.stats import Put, define
from .rrsets import Names, One, RRset
from .serial import SerialClock, serial_lt
from .zone import Change, Zone

_C_TEXT: Callable[[bytes, Names], bytes] | None = None  # `_digest.text`, where it is built
try:
    from . import _digest
except ImportError:  # not built (no compiler): `_text`
    pass
else:
    _digest.setup(One, RRset)
    _C_TEXT = _digest.text

log = logging.getLogger("mcsdns.journal")

JOURNAL_MAX_RRS = 200_000  # records kept in the journal, removed + added, all versions
JOURNAL_MAX_VERSIONS = 1000

Record = tuple[bytes, int, bytes]  # owner (wire), type, rdata

ZONE_SERIAL = define("mcsdns_zone_serial", "gauge", "SOA serial served (0 before the first sync).")


# the 2-octet big-endian forms of rdata lengths and types the digest writes, by value: those
# the zone makes at first (rdata <= dns.limits.RDATA_MAX, types < 256), every value once one
# larger is met
_TWO = [i.to_bytes(2, "big") for i in range(RDATA_MAX + 1)]
_TYPE = [i.to_bytes(2, "big") for i in range(256)]


def service_digest(key: Key, names: Names) -> int:
    """Hash of one service's records (0 for none); independent of RRset order and rotation:
    BLAKE2b-128 of `digest_text`."""
    if not names:
        return 0
    return int.from_bytes(hashlib.blake2b(digest_text(key, names), digest_size=16).digest(), "big")


def digest_text(key: Key, names: Names) -> bytes:
    """What a service's digest hashes: `<ns>/<name>`, then for each name in order and each
    of its types in order: 0, the name, the type, then each rdata in order after its length
    (type and length in 2 octets); a name without records adds nothing. Made by the C
    extension `_digest` where it is built (a quarter of the time), else by `_text`."""
    head = f"{key[0]}/{key[1]}".encode()
    if _C_TEXT is not None:
        return _C_TEXT(head, names)
    try:
        return _text(head, names)
    except IndexError:  # a length or type past the tables: widen them (once) and try again
        for table in (_TWO, _TYPE):
            table.extend(i.to_bytes(2, "big") for i in range(len(table), 1 << 16))
        return _text(head, names)


def _text(head: bytes, names: Names) -> bytes:
    """`digest_text` in Python: the one mirror of `_digest.c` (tests/test_digest_diff.py)."""
    parts = [head]
    add = parts.extend  # pieces joined once: no bytes made per record
    two, typ = _TWO, _TYPE
    for n in sorted(names):
        rrsets = names[n]
        if type(rrsets) is One:  # most names: one RRset, most often of one record
            rr = rrsets.rrset
            rds = rr.rdatas
            if len(rds) == 1:
                rd = rds[0]
                add((b"\x00", n, typ[rr.rtype], two[len(rd)], rd))
                continue
            add((b"\x00", n, typ[rr.rtype]))
            for rd in sorted(rds):
                add((two[len(rd)], rd))
        elif rrsets:
            for t in sorted(rrsets):
                add((b"\x00", n, typ[t]))
                for rd in sorted(rrsets[t].rdatas):
                    add((two[len(rd)], rd))
    return b"".join(parts)


def diff(old: Names, new: Names) -> tuple[list[Record], list[Record]]:
    """(removed, added) records between two versions of one service's names."""
    removed: list[Record] = []
    added: list[Record] = []
    for n in old.keys() | new.keys():
        o, w = old.get(n, {}), new.get(n, {})
        for t in o.keys() | w.keys():
            ords = o[t].rdatas if t in o else ()
            nrds = w[t].rdatas if t in w else ()
            if ords == nrds:
                continue
            ns, os_ = set(nrds), set(ords)
            removed += [(n, t, rd) for rd in dict.fromkeys(ords) if rd not in ns]
            added += [(n, t, rd) for rd in dict.fromkeys(nrds) if rd not in os_]
    return removed, added


class Worked(NamedTuple):
    """A service change's digest and difference, worked out ahead (off the loop); the
    difference is None when it was not (no journal yet: `record` works it out if needed)."""

    digest: int
    removed: list[Record] | None
    added: list[Record] | None


def work_out(key: Key, old: Names, new: Names, journaled: bool = True) -> Worked:
    """What `Versions.record` computes for a change from `old` to `new`; the difference
    only when `journaled` (before the first serial nothing is journaled: the first build
    of a large zone skips it)."""
    if not journaled:
        return Worked(service_digest(key, new), None, None)
    return Worked(service_digest(key, new), *diff(old, new))


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

    def record(self, change: Change, worked: Worked | None = None) -> None:
        """Fold one service change into the digest (and, once established, the pending diff);
        `worked`: its digest and difference, computed ahead."""
        key, old, new = change.key, change.old, change.new
        d = worked.digest if worked is not None else service_digest(key, new)
        self.digest ^= self.svc_digest.pop(key, 0) ^ d
        if d:
            self.svc_digest[key] = d
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
