"""The fault suite's independent checker: every second it reads every member (plain HTTP,
robustness/fault_observe.py) and asks each member's `mcsdns serve` (dnspython) for every
service, and keeps, per phase, what the invariants say:

- `lag`: the age of the oldest difference between what a member read now holds and what it
  should (fault_observe.problems); a difference older than `bound` is a violation;
- `nxdomain`: seconds a member read now answered NXDOMAIN for a service some member has
  validly exported for at least NEW_EXPORT seconds, the member read for as long (one back
  from a fault gets as long to catch up); summed over members and services;
- `dns_wrong`: seconds a member's DNS answer differed from its ServiceImport's ips (or gave an
  address without one) for longer than DNS_LAG (summed likewise; a timing: the order, that
  DNS is right again after the objects changed, is in `consistent` and the "dns" violation);
- `eps_gone`: the seconds from the phase's start (the fault) until no member read held an
  imported slice from the fault's target, while that target could not be read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from robustness.fault_cluster import NS, Member
from robustness.fault_observe import View, exporters, holding, problems, read

NEW_EXPORT = 5.0  # seconds an export is given before its NXDOMAIN counts
DNS_LAG = 2.0  # seconds mcsdns serve is given to follow its member's objects


@dataclass
class Stats:
    """What one phase of the run saw."""

    start: float
    max_lag: float = 0.0
    nxdomain: float = 0.0
    dns_wrong: float = 0.0
    violations: set[str] = field(default_factory=set)  # kinds of differences older than the bound
    eps_gone: float | None = None
    unread: set[str] = field(default_factory=set)  # members not read at some tick
    extra_max: dict[str, float] = field(default_factory=dict)
    nx_names: set[tuple[str, str]] = field(default_factory=set)  # (member, service) NXDOMAIN counted
    ticks: int = 0


class Checker:
    """Reads every member once a second in its own thread until `close`."""

    def __init__(self, members: list[Member], names: list[str], dns_ports: dict[str, int], bound: float,
                 extra: Callable[[], dict[str, float]] | None = None) -> None:
        self.members = {m.cid: m for m in members}
        self.names, self.dns_ports, self.bound, self.extra = names, dns_ports, bound, extra
        self.views: dict[str, View] = {}
        self.fresh: set[str] = set()
        self.since: dict[tuple[str, str, str], float] = {}
        self.wanted_since: dict[str, float] = {}
        self.fresh_since: dict[str, float] = {}
        self.dns_since: dict[tuple[str, str], float] = {}
        # (began, every member read, no difference, every DNS answer as its member's objects say)
        self.ticks: deque[tuple[float, bool]] = deque(maxlen=900)
        self.target: str | None = None
        self.stats = Stats(time.monotonic())
        self.lock = threading.Lock()
        self._pool = ThreadPoolExecutor(len(members) + len(dns_ports))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checker", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def phase(self, target: str | None = None, reset: bool = False) -> Stats:
        """End the current phase (returned) and start a new one; `target`: the member whose
        imported slices elsewhere `eps_gone` times once it is no longer read; `reset`: ages
        (of differences, of exports for NXDOMAIN) count from now (a fault's start)."""
        with self.lock:
            old, self.stats = self.stats, Stats(time.monotonic())
            self.target = target
            if reset:
                now = self.stats.start
                self.since = dict.fromkeys(self.since, now)
                self.dns_since = dict.fromkeys(self.dns_since, now)
                self.wanted_since = dict.fromkeys(self.wanted_since, now)
        return old

    def consistent(self, after: float = 0.0, ticks: int = 2) -> float | None:
        """When the clusterset became consistent (every member read, no difference, and each DNS
        server answering as its member's objects say, `ticks` ticks in a row, all begun after
        `after`, a time.monotonic()): the first one's start."""
        with self.lock:
            seen = [(t, ok) for t, ok in self.ticks if t >= after]
        for i in range(len(seen) - ticks + 1):
            if all(ok for _, ok in seen[i:i + ticks]):
                return seen[i][0]
        return None

    def ips(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(member, service) -> its ServiceImport's ips, as last read."""
        with self.lock:
            return {(r, s): ips for r, v in self.views.items() for s, ips in v.imports.items()}

    def imports(self, cid: str) -> int:
        with self.lock:
            v = self.views.get(cid)
            return len(v.imports) if v and cid in self.fresh else 0

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.tick(min(t0 - last, 5.0))
            except Exception as e:  # noqa: BLE001 - the checker must outlive a bad read
                print(f"checker: {type(e).__name__}: {e}", flush=True)
            last = t0
            self._stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))

    def tick(self, dt: float) -> None:
        """Read everything once and account for `dt` seconds."""
        cids, began = list(self.members), time.monotonic()
        reads = {c: self._pool.submit(read, self.members[c]) for c in cids}
        asks = {c: self._pool.submit(self._ask, c) for c in self.dns_ports}
        got, answers = {c: f.result() for c, f in reads.items()}, {c: f.result() for c, f in asks.items()}
        extra = self.extra() if self.extra else {}
        now = time.monotonic()
        with self.lock:
            self.fresh = {c for c, v in got.items() if v is not None}
            self.fresh_since = {c: self.fresh_since.get(c, now) for c in self.fresh}
            self.views.update({c: v for c, v in got.items() if v is not None})
            st = self.stats
            st.ticks += 1
            st.unread |= set(cids) - self.fresh
            for name, x in extra.items():
                st.extra_max[name] = max(st.extra_max.get(name, x), x)
            if len(self.views) < len(cids):
                return
            found = problems(self.views, self.fresh)
            self.since = {k: self.since.get(k, now) for k in found}
            for k, t in self.since.items():
                st.max_lag = max(st.max_lag, now - t)
                if now - t > self.bound:
                    st.violations.add(k[0])
            self._exports(now)
            dns_right = self._dns(answers, now, dt)
            self.ticks.append((began, not found and self.fresh == set(cids) and dns_right))
            self._eps(now)

    def _exports(self, now: float) -> None:
        wanted = set(exporters(self.views))
        self.wanted_since = {s: self.wanted_since.get(s, now) for s in wanted}

    def _ask(self, cid: str) -> dict[str, frozenset[str] | None]:
        """Every service's A answer from cid's mcsdns serve: its addresses, None for NXDOMAIN
        (a name not asked or not answered is left out)."""
        out: dict[str, frozenset[str] | None] = {}
        for s in self.names:
            q = dns.message.make_query(f"{s}.{NS}.svc.clusterset.local", "A")
            try:
                a = dns.query.udp(q, "127.0.0.1", port=self.dns_ports[cid], timeout=1.0)
            except (OSError, dns.exception.DNSException):
                continue
            if a.rcode() == dns.rcode.NXDOMAIN:
                out[s] = None
            elif a.rcode() == dns.rcode.NOERROR:
                out[s] = frozenset(r.address for rr in a.answer if rr.rdtype == dns.rdatatype.A for r in rr)
        return out

    def _dns(self, answers: dict[str, dict[str, frozenset[str] | None]], now: float, dt: float) -> bool:
        """Account for the DNS answers; whether each agreed with its member's objects."""
        st = self.stats
        wrong: set[tuple[str, str]] = set()
        for cid, got in answers.items():
            v = self.views[cid]
            for s, ans in got.items():
                ips = v.imports.get(s)
                since = max(self.wanted_since.get(s, now), self.fresh_since.get(cid, now))
                if ans is None and now - since >= NEW_EXPORT:
                    st.nxdomain += dt
                    st.nx_names.add((cid, s))
                want = None if ips is None else frozenset(ips)
                if ans != want and not (ans == frozenset() and want == frozenset()):
                    wrong.add((cid, s))
        self.dns_since = {k: self.dns_since.get(k, now) for k in wrong}
        for t in self.dns_since.values():
            if now - t > DNS_LAG:
                st.dns_wrong += dt
            if now - t > self.bound:
                st.violations.add("dns")
        return not wrong

    def _eps(self, now: float) -> None:
        t = self.target
        if t is not None and self.stats.eps_gone is None and t not in self.fresh \
                and not holding(self.views, self.fresh, t):
            self.stats.eps_gone = now - self.stats.start
