"""reconcile(key): one service's desired state in every member, from the informer caches.

For one (namespace, name) the caches of every live member give its
ServiceExports, Services and source EndpointSlices; the pure merge derives
the ServiceImport (a member lost past the endpoint TTL still counts for the import, not
its endpoints, for the import grace: `kept`); every reachable member that has the namespace gets each kind
in `kinds` in turn (`MemberSync`), with the ClusterSetIP strategy's contributions
(`clustersetip`); then each export's status. Only differences from the cached
objects are written (`engine`), and each write's result goes back into the cache.
Objects without our managed-by label are never updated or deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..kube.apiclient.keys import Key
from .clustersetip import IPs, strategy
from .contract import Target
from .engine import Engine, Result
from .events import Recorder
from .exports import ExportState, read_export
from .ipam import Allocator
from .kinds import ENDPOINT_SLICES, MEMBER_REMOVAL, MEMBER_SYNC, SERVICE_EXPORT
from .member.view import MemberView
from .merge import Merged, PortSpec, merge, serving_ports, unserved_message
from .outage import held
from .writers import Writers, conflict_event

log = logging.getLogger("mcsdns.controller")

Exports = list[tuple[MemberView, ExportState]]


@dataclass(frozen=True)
class Plan:
    """One key's desired state, read once per reconcile: the exports, their merge, whether
    the import is held (`outage`), and the strategy's ClusterSetIPs."""

    exports: Exports
    merged: Merged | None
    hold: bool
    ips: IPs | None


class Reconciler:
    """Brings one service key to its desired state in every reachable member.

    Invariants: it writes only differences from the informer caches, and updates with the
    cached resourceVersion; it never updates or deletes an object without our managed-by
    label; every write's result goes back into the cache; a failed write marks the key
    for a retry and is named in the export's Ready condition.
    """

    def __init__(self, members: Sequence[MemberView], mode: str, allocator: Allocator | None,
                 endpoint_ttl: float, clock: Callable[[], float] = time.monotonic,
                 import_grace: float = 0.0) -> None:
        self.members = members
        self.strategy = strategy(mode, allocator)
        self.ttl = endpoint_ttl
        self.grace = import_grace
        self.clock = clock
        self.unserved: dict[Key, dict[str, list[PortSpec]]] = {}  # key -> member name -> ports
        self.unserved_lock = threading.Lock()
        self.outcomes: dict[Key, dict[str, tuple[str, ...]]] = {}  # key -> member -> its failures
        self.outcome_lock = threading.Lock()
        self.events: Recorder | None = None  # Events on ServiceExports (set by the Manager)
        self.writers: Writers | None = None  # our identity and the other writers (set by the cli)

    # --- which members count ------------------------------------------------------
    def live(self, mc: MemberView) -> bool:
        """Whether this member's exports count: read once, and reachable or lost less than the TTL ago."""
        if not mc.synced:
            return False
        return mc.reachable or (mc.last_ok is not None and self.clock() - mc.last_ok < self.ttl)

    def kept(self, mc: MemberView) -> bool:
        """Whether this member's exports keep their imports (names, ClusterSetIPs, derived
        Services): live, or lost less than the import grace ago (its endpoints are withdrawn
        from the TTL on). Both count from the last contact; a grace under the TTL is the TTL."""
        if self.live(mc):
            return True
        return mc.synced and mc.last_ok is not None and self.clock() - mc.last_ok < self.grace

    def all_keys(self) -> set[Key]:
        out: set[Key] = set()
        for mc in self.members:
            out |= mc.keys()
        return out

    def adopt(self) -> None:
        """Keep what the strategy finds in our existing objects (cidr: their ClusterSetIPs)."""
        self.strategy.adopt(self.members)

    def service_key(self, k: Key) -> Key:
        """The key of the import a Service named `k` affects (itself unless the strategy names it)."""
        return self.strategy.service_keys.get(k, k)

    # --- one key ------------------------------------------------------------------
    def exports(self, key: Key) -> tuple[Exports, Merged | None]:
        """Every kept member's export of `key`, read and merged; only live members' slices,
        and only live members in the import's status.clusters."""
        exports: Exports = []
        serving: set[str] = set()  # the clusters whose endpoints count
        for mc in self.members:
            se = mc.export(key) if self.kept(mc) else None
            if se is None:
                continue
            assert mc.member.cluster_id is not None
            ex = read_export(mc.member.cluster_id, se, mc.service(key))
            if ex.export is not None and self.live(mc):
                ex.slices = mc.source_slices(key)
                serving.add(mc.member.cluster_id)
            exports.append((mc, ex))
        valid = [ex.export for _, ex in exports if ex.export is not None]
        merged = merge(valid) if valid else None
        if merged is not None:
            merged.clusters = [c for c in merged.clusters if c in serving]
        for _, ex in exports:
            if merged is not None and ex.export is not None:
                ex.serving = serving_ports(merged.ports, ex.export.ports)
        return exports, merged

    def plan(self, key: Key) -> Plan:
        """What every member should hold of `key`, from the caches now."""
        exports, merged = self.exports(key)
        self._note_unserved(key, exports, merged)
        hold = merged is None and held(self.members, key, self.clock, self.grace)
        ips = None if hold else self.strategy.for_key(key, merged)  # held: its ClusterSetIP kept
        return Plan(exports, merged, hold, ips)

    def reconcile(self, key: Key) -> Result:
        """One service in every reachable member (in parallel), then each export's status."""
        p, r = self.plan(key), Result()
        targets = [mc for mc in self.members if mc.synced and mc.reachable]
        targets = [mc for mc in targets if not self._yields(mc, key, p.exports, r)]
        if len(targets) > 1:
            with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="member-write") as pool:
                list(pool.map(lambda mc: self._write(mc, key, p, r), targets))
        else:
            for mc in targets:
                self._write(mc, key, p, r)
        for mc in self.members:
            self._outcome(key, mc.member.name, r.failed_in.get(mc.member.name, []) if mc in targets else [])
        for mc in targets:
            self._report(mc, key, p, r)
        return r

    def reconcile_in(self, mc: MemberView, key: Key) -> Result:
        """One service in one member: its writes, then its exports' status, which names every
        member's last failures; `changed` when this member's failures changed (the other
        members' statuses follow: the caller queues the key for them)."""
        p, r, name = self.plan(key), Result(), mc.member.name
        if not mc.synced or not mc.reachable or self._yields(mc, key, p.exports, r):
            r.changed = self._outcome(key, name, [])
            return r
        self._write(mc, key, p, r)
        r.changed = self._outcome(key, name, r.failed_in.get(name, []))
        self._report(mc, key, p, r)
        return r

    # --- failures by member, for the exports' status -------------------------------
    def _outcome(self, key: Key, name: str, failed: list[str]) -> bool:
        """Record member `name`'s failures for `key`; whether they changed."""
        now = tuple(sorted(set(failed)))
        with self.outcome_lock:
            by_member = self.outcomes.get(key, {})
            if by_member.get(name, ()) == now:
                return False
            if now:
                self.outcomes.setdefault(key, {})[name] = now
            else:
                by_member.pop(name, None)
                if not by_member:
                    self.outcomes.pop(key, None)
            return True

    def failures(self, key: Key) -> list[str]:
        """Every current member's last failures for `key`."""
        names = {mc.member.name for mc in self.members}
        with self.outcome_lock:
            by_member = dict(self.outcomes.get(key, {}))
        return [why for name, whys in sorted(by_member.items()) if name in names for why in whys]

    def forget_member(self, name: str) -> None:
        """A member left: its failures no longer count."""
        with self.outcome_lock:
            for key in list(self.outcomes):
                self.outcomes[key].pop(name, None)
                if not self.outcomes[key]:
                    del self.outcomes[key]

    def _report(self, mc: MemberView, key: Key, p: Plan, r: Result) -> None:
        """`mc`'s export of `key` gets its status (every member's failures) and its Events."""
        for emc, ex in p.exports:
            if emc is not mc:
                continue
            rs = Result(failed=self.failures(key))
            SERVICE_EXPORT.sync(Engine(mc, key, rs, self.writers), ex, p.merged)
            r.writes, r.retry, r.wait = r.writes + rs.writes, r.retry or rs.retry, max(r.wait, rs.wait)
            if self.events is not None:
                self.events.export(mc.member, ex.obj, mc.export(key), r.failed_in.get(mc.member.name, []))

    def _note_unserved(self, key: Key, exports: Exports, m: Merged | None) -> None:
        """Keep the count of each member's unserved ports; log when they change."""
        now = {mc.member.name: ex.unserved() for mc, ex in exports if ex.unserved()}
        with self.unserved_lock:
            before = self.unserved.pop(key, {})
            if now:
                self.unserved[key] = now
        for name, ports in sorted(now.items()):
            if m is not None and before.get(name) != ports:
                log.warning("cluster %s: ServiceExport %s/%s: %s", name, *key,
                            unserved_message(ports, m.ports))
        present = {mc.member.name for mc, ex in exports if ex.export is not None}
        for name in sorted((before.keys() - now.keys()) & present):
            log.info("cluster %s: ServiceExport %s/%s: every port is served now", name, *key)

    # --- one member ---------------------------------------------------------------
    def _yields(self, mc: MemberView, key: Key, exports: Exports, r: Result) -> bool:
        """Whether another controller writes this service's objects in `mc` (`writers`): then
        they are left to it, said once, and the key retried once that writer may be gone."""
        if self.writers is None:
            return False
        si = mc.service_import(key)
        objs = [*((("serviceimports", si),) if si is not None else ()),
                *(("services", s) for s in mc.our_services(key)),
                *(("endpointslices", s) for s in mc.our_slices(key))]
        other = self.writers.holder(mc.member.name, objs)
        if other is None:
            return False
        if self.writers.first(mc.member.name, other):
            log.warning("cluster %s: another controller, writer %r, writes the objects of %s/%s (and "
                        "maybe more); this one, writer %r, leaves them to it while it writes",
                        mc.member.name, other, *key, self.writers.me,
                        extra={"event": "writer_conflict", "cluster": mc.member.name, "writer": other})
        if self.events is not None and self.writers.first_event(mc.member.name, key, other):
            for emc, ex in exports:
                if emc is mc:
                    self.events.emit(mc.member, ex.obj, conflict_event(self.writers.me, other))
        r.retry, r.wait = True, max(r.wait, self.writers.wait(other) + 1.0)
        return True

    def _write(self, mc: MemberView, key: Key, p: Plan, r: Result) -> None:
        """Each kind in order (a step may stop the rest); when nothing of the service belongs
        here, each kind's objects of ours deleted; a held import (`outage`) keeps its
        ServiceImport and derived Service, its slices go."""
        eng = Engine(mc, key, r, self.writers)
        if p.hold:
            ENDPOINT_SLICES.remove(eng)
            return
        if p.merged is None or not mc.has_namespace(key[0]):
            for remove in MEMBER_REMOVAL:
                remove(eng)
            return
        t = Target(p.merged, [ex for _, ex in p.exports], p.ips)
        self.strategy.plan(mc, key, t)
        for step in MEMBER_SYNC:
            if not step(eng, t):
                return
