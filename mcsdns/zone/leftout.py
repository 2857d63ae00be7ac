"""What a service's objects imply but the zone cannot serve. Names: a label over 63 octets
or a name over 255 (RFC 1035 2.3.4), e.g. a 63-octet hostname, service and namespace under
a long cluster ID. Records: those of an RRset past what one message holds (dns.limits).
`records.service_records` leaves them out (`dns.names.prefix` refuses to build the names,
`rrsets._cap` cuts the RRsets) and notes them in a `LeftOut`; `LeftOutLog` reports them
on the event loop: for names, one log line per object when what it leaves out changes,
counted in mcsdns_skipped_objects_total, and a gauge of the names left out now; for cut
RRsets, every build counted in mcsdns_zone_rrsets_capped_total and logged, rate-limited
per namespace."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator

from ..data.store import Store
from ..dns.limits import RECORDS_OCTETS
from ..dns.names import decode_name
from ..dns.types import RRType
from ..kube.apiclient.keys import Key
from ..ops.logs import Throttle, show
from ..ops.stats import Put, define

log = logging.getLogger("mcsdns.zone")

LEFT_OUT = define("mcsdns_zone_names_left_out", "gauge",
                  "Endpoints, ports and services of the objects whose names the zone leaves out "
                  "(a label over 63 octets or a name over 255), counted per object.")
CAPPED = define("mcsdns_zone_rrsets_capped_total", "counter",
                "RRsets cut to the records one DNS message holds (64,000 octets; see docs/dns.md).")

Line = tuple[str, str, str]  # kind, namespace/name, message


class LeftOut:
    """The names one `service_records` call left out, by the object that implies them, and
    how many of its RRsets it cut."""

    __slots__ = ("counts", "first", "cuts")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], Counter[str]] = {}  # (kind, ns/name) -> what -> names
        self.first: dict[tuple[str, str], bytes] = {}  # (kind, ns/name) -> the first such name
        self.cuts: list[tuple[int, int, int]] = []  # RRsets cut to one message: (type, kept, had)

    def add(self, kind: str, obj: str, what: str, name: bytes) -> None:
        key = (kind, obj)
        c = self.counts.get(key)
        if c is None:
            c = self.counts[key] = Counter()
            self.first[key] = name
        c[what] += 1

    def total(self) -> int:
        return sum(c.total() for c in self.counts.values())

    def cut_text(self) -> str:
        """The RRsets cut, for a log line or a diagnose finding."""
        each = ", ".join(f"{RRType(t).name} {kept} of {had}" for t, kept, had in self.cuts)
        return (f"{len(self.cuts)} RRset{'s' if len(self.cuts) > 1 else ''} cut to the records one DNS "
                f"message holds ({RECORDS_OCTETS} octets): {each}")

    def lines(self) -> Iterator[Line]:
        """One (kind, namespace/name, message) per object."""
        for key, c in self.counts.items():
            what = " and ".join(f"{n} {w}{'s' if n > 1 else ''}" for w, n in c.items())
            first = self.first[key]
            shown = show(decode_name(first))
            yield (*key, f"{what} left out of the zone: a DNS name can have no label over 63 "
                         f"octets and no more than 255 (first: {len(first)} octets, {shown})")


class LeftOutLog:
    """Reports each service's LeftOut after its records are built (on the event loop),
    counting each object reported in the store's skipped objects or parts."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.now: dict[Key, tuple[int, frozenset[Line]]] = {}  # names left out, lines logged
        self.capped = 0  # RRsets cut, every build counted
        # a large service cuts again on each rebuild: at most 5 lines per namespace per 10 min
        self._cut_log = Throttle(log, "cut RRsets", window=600.0)

    def report(self, key: Key, left: LeftOut) -> None:
        if left.cuts:
            self._capped(key, left)
        if not left.counts:
            self.now.pop(key, None)
            return
        lines = frozenset(left.lines())
        _, before = self.now.get(key, (0, frozenset()))
        self.now[key] = left.total(), lines
        for kind, obj, msg in sorted(lines - before):
            self.store.skipped[kind] += 1
            log.warning("%s %s: %s", kind, obj, msg)

    def _capped(self, key: Key, left: LeftOut) -> None:
        n = len(left.cuts)
        self.capped += n
        ns, name = key
        self._cut_log.log(ns, logging.WARNING, "service %s/%s: %s", ns, name, left.cut_text(),
                          extra={"event": "rrset_capped", "namespace": ns, "service": name, "rrsets": n})

    def publish(self, put: Put) -> None:
        put(LEFT_OUT, sum(n for n, _ in self.now.values()))
        put(CAPPED, self.capped)
