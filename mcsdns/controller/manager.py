"""The controller's run loop: member caches -> a work queue per member -> its workers.

Events from every member's caches become (namespace, name) keys, queued in every
member's de-duplicating queue (`queue.MemberQueues`); each member's workers reconcile one key
at a time each, writing only into their member, so a slow or hung member holds up only
its own writes (an export's status follows when another member's failures change). The
loop opens the gate to writing once every member is synced (or its Endpoint
TTL has run out), follows leader election, re-queues every key on `resync`
and when a member comes back, re-queues a lost member's keys when its TTL
expires (its endpoints go) and when its import grace does (its imports go),
and renews the per-member Leases. Members join (`join`: synced first, then
every key re-queued) and leave (`leave`: its keys re-queued, so its exports go) while it
runs; `tick` (the --members-dir look) is called once per turn of the loop. With `local`
(`--local NAME`) only member NAME has a queue and workers: the others are read only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from ..flags import CIDR
from ..kube.apiclient.keys import Key
from ..ops.process import release_free_memory
from .events import LEASE, NORMAL, WARNING, Recorder
from .informers import MemberCaches
from .ipam import Allocator
from .lease import LeaderElector, MemberLeases
from .member.client import Member
from .probe import UNREACHABLE_AFTER
from .queue import MemberQueues
from .reconcile import Reconciler

log = logging.getLogger("mcsdns.controller")

TICK = 0.1  # seconds between two looks at leases, TTLs and resyncs


class Manager:
    """The controller's run loop: member caches → a work queue per member → its workers.

    Invariants: nothing is written before every member has synced (or its Endpoint TTL
    ran out) and while this replica does not lead; each key is reconciled in a member by
    one worker at a time, and a member's writes wait only for that member; `ready` is set
    after the first full pass, or at once on a healthy follower.
    """

    def __init__(self, members: list[Member], mode: str, cidrs: list[str], ttl: float, resync: float,
                 workers: int = 16, elector: LeaderElector | None = None,
                 member_leases: MemberLeases | None = None, watch_timeout: int = 300,
                 clock: Callable[[], float] = time.monotonic, import_grace: float = 0.0,
                 unreachable_after: float = UNREACHABLE_AFTER, local: str | None = None) -> None:
        self.stop = threading.Event()
        self.local = local  # --local: the one member written; None: every member
        self.queue = MemberQueues()
        self.clock = clock
        self.watch_timeout = watch_timeout
        self.unreachable_after = unreachable_after
        self.caches = [self._caches(m) for m in members]  # replaced, never changed in place
        self.pending: dict[str, MemberCaches] = {}  # joining members, until their caches sync
        self.tick: Callable[[], None] = lambda: None
        self.rec = Reconciler(self.caches, mode, Allocator(cidrs) if mode == CIDR else None, ttl, clock,
                              import_grace)
        self.rec.events = Recorder()
        self.ttl, self.resync, self.nworkers = ttl, resync, workers
        self.elector, self.member_leases = elector, member_leases
        self.active = threading.Event()  # writing allowed: gate open and leading
        self.gate_open = False
        self.ready = threading.Event()
        self.results: Counter[str] = Counter()  # reconciles by result
        self.expired: set[str] = set()  # members whose TTL expiry has been handled
        self.forgotten: set[str] = set()  # members whose import grace expiry has been handled
        self.told: set[str] = set()  # members whose loss an Event has told
        self.started = clock()
        self.threads: list[threading.Thread] = []
        self._waited = False

    def _caches(self, m: Member) -> MemberCaches:
        return MemberCaches(m, self.queue.add, self._enqueue_namespace, threading.Event(), self._on_reachable,
                            self.watch_timeout, self._service_key, self.unreachable_after,
                            read_only=not self._writes_to(m.name))

    def _writes_to(self, name: str) -> bool:
        """Whether member `name` gets a queue and workers (all, or only the --local one)."""
        return self.local is None or name == self.local

    # --- callbacks from member threads ----------------------------------------------------
    def _service_key(self, k: Key) -> Key:
        """A Service named like a derived Service (ours or someone else's) affects that import."""
        return self.rec.service_key(k)

    def _enqueue_namespace(self, ns: str) -> None:
        if self.gate_open:
            self.queue.add_all(k for k in self.rec.all_keys() if k[0] == ns)

    def _on_reachable(self, mc: MemberCaches, ok: bool) -> None:
        self._tell(mc, ok)
        if ok:
            self.expired.discard(mc.member.name)
            self.forgotten.discard(mc.member.name)
            if self.gate_open:  # writes to it were skipped while it was away: look at everything
                self.queue.add_all(self.rec.all_keys())

    def _tell(self, mc: MemberCaches, ok: bool) -> None:
        """A member's reachability changed: an Event on its Lease (`mcsdns-member-<name>`, in the
        Lease cluster) while this replica leads; its return only after its loss was told."""
        leases, rec, name = self.member_leases, self.rec.events, mc.member.name
        lease = leases.objs.get(name) if leases is not None else None
        if leases is None or rec is None or lease is None or not self.leading():
            return
        if not ok:
            self.told.add(name)
            why = mc.probe.why() or mc.problem or "its watches fail"
            ev = (WARNING, "MemberUnreachable", f"cluster {name} unreachable: {why}")
        elif name in self.told:
            self.told.discard(name)
            ev = (NORMAL, "MemberReachable", f"cluster {name} reachable again")
        else:
            return
        rec.emit(leases.member, lease, ev, LEASE)

    # --- startup ------------------------------------------------------------------------
    def start(self) -> None:
        if self.member_leases is not None:
            for mc in self.caches:
                seen = self.member_leases.load(mc.member.name)
                if seen is not None:
                    mc.last_ok = seen
                    log.info("cluster %s: last reached %.1fs ago (its Lease)", mc.member.name,
                             self.clock() - seen)
        for mc in self.caches:
            if self._writes_to(mc.member.name):
                self._workers(mc.member.name)
            mc.start()

    def _workers(self, name: str) -> None:
        """Member `name`'s queue and its workers (--concurrent-reconciles of them)."""
        self.queue.open(name)
        for i in range(self.nworkers):
            t = threading.Thread(target=self._work, args=(name,), daemon=True, name=f"reconcile-{name}-{i}")
            t.start()
            self.threads.append(t)

    def _gate(self) -> bool:
        """Open once every member is synced and reachable (its probe answered: a member not yet
        known reachable gets no writes, and --once would end without them), or past its TTL
        (known from its Lease or since start)."""
        if self.gate_open:
            return True
        now = self.clock()
        waiting = []
        for mc in self.caches:
            if mc.synced and mc.reachable:
                continue
            since = mc.last_ok if mc.last_ok is not None else self.started
            if now - since < self.ttl:
                waiting.append(mc.member.name)
        if waiting:
            if not self._waited:
                log.info("waiting up to %gs for first contact with %s before writing", self.ttl,
                         ", ".join(waiting))
                self._waited = True
            return False
        self.rec.adopt()
        self.gate_open = True
        keys = self.rec.all_keys()
        self.queue.add_all(keys)
        log.info("caches synced; reconciling %d services", len(keys),
                 extra={"event": "caches_synced", "services": len(keys)})
        self._note_unread(now)
        return True

    def _note_unread(self, now: float) -> None:
        """Say which members not read yet hold the imports only they may make (`outage`)."""
        for mc in self.caches:
            if not mc.synced and mc.last_ok is not None and now - mc.last_ok < self.rec.grace:
                log.info("cluster %s not reached yet: imports no reachable member exports stay until "
                         "%.0fs from now (import grace), without endpoints", mc.member.name,
                         self.rec.grace - (now - mc.last_ok))

    # --- workers ------------------------------------------------------------------------
    def _work(self, name: str) -> None:
        """A worker of member `name`: its keys, written into it alone, until it leaves."""
        q = self.queue.open(name)
        while not self.stop.is_set() and not q.closed:
            if not self.active.wait(0.5):
                continue
            key = q.get(timeout=0.5)
            if key is None:
                continue
            try:
                mc = next((c for c in self.caches if c.member.name == name), None)
                if mc is None:
                    continue
                r = self.rec.reconcile_in(mc, key)
            except Exception:
                log.exception("cluster %s: reconcile %s/%s failed", name, *key)
                self.results["error"] += 1
                q.retry(key)
            else:
                if r.changed:  # the other members' exports of it name this one's failures
                    self.queue.add_to((c.member.name for c in self.caches
                                       if c is not mc and c.export(key) is not None), key)
                if r.retry:
                    self.results["retry"] += 1
                    q.retry(key, r.wait)
                else:
                    self.results["ok"] += 1
                    q.forget(key)
            finally:
                q.done(key)

    # --- the loop -----------------------------------------------------------------------
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def run(self) -> None:
        """Until `stop`: leader election, gate, TTLs, Leases, resync, readiness."""
        last_lease = last_resync = 0.0
        renewed: dict[str, float] = {}  # member -> when its Lease was last written
        recorded: dict[str, float] = {}  # member -> the contact written there
        renew_every = max(0.5, min(self.ttl / 4, 10.0))
        while not self.stop.is_set():
            now = self.clock()
            if self.elector is not None and now - last_lease >= self.elector.period:
                was = self.elector.is_leader()
                last_lease = now
                if self.elector.step() and not was and self.gate_open:
                    self.queue.add_all(self.rec.all_keys())  # a new leader looks at everything
            leading = self.leading()
            if self._gate() and leading:
                self.active.set()
            else:
                self.active.clear()
            if not leading:
                self.ready.set()  # a healthy follower
            elif self.gate_open and not self.ready.is_set() and self.queue.idle():
                n = sum(self.results.values())
                log.info("first full sync done (%d reconciles)", n,
                         extra={"event": "synced", "reconciles": n, "results": dict(self.results)})
                release_free_memory()  # the lists' decoded JSON left free heap pages behind
                self.ready.set()
            for mc in self.caches:
                if not mc.reachable and mc.last_ok is not None and mc.member.name not in self.expired \
                        and now - mc.last_ok >= self.ttl and self.gate_open:
                    self.expired.add(mc.member.name)
                    log.warning("cluster %s: no contact for %.1fs (endpoint TTL %gs): dropping its "
                                "endpoints%s", mc.member.name, now - mc.last_ok, self.ttl, self._kept_note())
                    self.queue.add_all(mc.keys())
            self._forget(now)
            if self.member_leases is not None and leading:
                self._record(now, renewed, recorded, renew_every)
            self.tick()
            self._promote()
            if self.gate_open and now - last_resync >= self.resync:
                last_resync = now
                self.queue.add_all(self.rec.all_keys())
            self.stop.wait(TICK)

    def _kept_note(self) -> str:
        """What stays of a member's services once its endpoints go (the TTL log line's end)."""
        if self.rec.grace <= self.ttl:
            return ""
        return f"; its imports and ClusterSetIPs stay until {self.rec.grace:g}s after the last contact"

    def _forget(self, now: float) -> None:
        """A member lost past its import grace: its exports go, so do the imports only it made."""
        if not self.gate_open or self.rec.grace <= self.ttl:
            return
        for mc in self.caches:
            name = mc.member.name
            if mc.reachable or mc.last_ok is None or name in self.forgotten \
                    or now - mc.last_ok < self.rec.grace:
                continue
            self.forgotten.add(name)
            log.warning("cluster %s unreachable for %gs (import grace): dropping its exports", name,
                        self.rec.grace, extra={"event": "member_forgotten", "cluster": name})
            self.queue.add_all(mc.keys() if mc.synced else self.rec.all_keys())  # unread: held ones

    def _record(self, now: float, renewed: dict[str, float], recorded: dict[str, float],
                every: float) -> None:
        """Write each member's last contact measured into its Lease, when it moved on (at most
        once per `every` s): never a contact the probe did not see."""
        assert self.member_leases is not None
        for mc in self.caches:
            name, seen = mc.member.name, mc.last_ok
            if seen is None or seen <= recorded.get(name, float("-inf")):
                continue
            if now - renewed.get(name, -every) >= every:
                renewed[name] = now
                if self.member_leases.renew(name, seen):
                    recorded[name] = seen

    def run_once(self, timeout: float) -> bool:
        """--once: sync, reconcile every key (retrying failures a few times); True when all succeeded."""
        deadline = self.clock() + timeout
        while not self._gate():
            if self.clock() > deadline:
                return False
            self.stop.wait(TICK)
        self.active.set()
        while self.clock() < deadline:
            if self.queue.idle():
                return not self.queue.failing()
            self.stop.wait(TICK)
        return False

    def shutdown(self) -> None:
        self.stop.set()
        self.queue.close()
        for mc in [*self.caches, *self.pending.values()]:
            _halt(mc)
        for t in self.threads:
            t.join(2.0)
        if self.rec.events is not None:
            self.rec.events.close()

    def writes(self) -> int:
        return sum(mc.member.writes for mc in self.caches)

    # --- membership while running (from the loop's thread) --------------------------------
    def join(self, m: Member) -> None:
        """Start member `m` (connected); it replaces the member of its name once synced."""
        old = self.pending.pop(m.name, None)
        if old is not None:
            _halt(old)
        mc = self._caches(m)
        if self.member_leases is not None:
            mc.last_ok = self.member_leases.load(m.name)
        self.pending[m.name] = mc
        mc.start()

    def _promote(self) -> None:
        """Joining members whose caches synced take their place; every key is looked at."""
        for name, mc in list(self.pending.items()):
            if not mc.synced:
                continue
            del self.pending[name]
            old = next((c for c in self.caches if c.member.name == name), None)
            others = [c for c in self.caches if c is not old]
            twin = next((c.member.name for c in others if c.member.cluster_id == mc.member.cluster_id), None)
            if twin is not None:
                log.error("cluster %s not added: its cluster ID %s is %s's", name, mc.member.cluster_id, twin)
                _halt(mc)
                continue
            self._set_caches([*others, mc])
            if old is None and self._writes_to(name):
                self.threads = [t for t in self.threads if t.is_alive()]
                self._workers(name)
            keys = self.rec.all_keys() | (old.keys() if old is not None else set())
            if old is not None:
                self._drop(old)
            log.info("cluster %s (%s) %s: reconciling %d services", name, mc.member.cluster_id,
                     "reloaded" if old is not None else "added", len(keys),
                     extra={"event": "member_added", "cluster": name, "cluster_id": mc.member.cluster_id})
            self.queue.add_all(keys)

    def leave(self, name: str) -> None:
        """Stop member `name`; its exports go from the others (its keys are reconciled), its
        member Lease goes (when leading)."""
        pending = self.pending.pop(name, None)
        if pending is not None:
            _halt(pending)
        mc = next((c for c in self.caches if c.member.name == name), None)
        if mc is None:
            return
        self._set_caches([c for c in self.caches if c is not mc])
        self.queue.drop(name)
        self.rec.forget_member(name)
        keys = mc.keys()
        self._drop(mc)
        self.expired.discard(name)
        self.forgotten.discard(name)
        if self.member_leases is not None and self.leading():
            self.member_leases.drop(name)  # its last contact means nothing once it left
        log.info("cluster %s removed: reconciling its %d services", name, len(keys),
                 extra={"event": "member_removed", "cluster": name})
        self.queue.add_all(keys)

    def _set_caches(self, caches: list[MemberCaches]) -> None:
        self.caches = caches
        self.rec.members = caches

    def _drop(self, mc: MemberCaches) -> None:
        _halt(mc)
        holders = [getattr(x, "member", None) for x in (self.elector, self.member_leases)]
        if not any(mc.member is h for h in holders) and mc.member.client is not None:
            mc.member.client.close()


def _halt(mc: MemberCaches) -> None:
    """Stop one member's informers."""
    mc.stop.set()
    for c in mc.caches.values():
        c.reflector.interrupt()
