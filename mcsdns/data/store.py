"""The object store: what the sources last said, grouped by service.

Sources call `upsert`, `delete`, `apply` and `replace` (a full list of one kind) on
the event-loop thread. Subscribers are told which services changed, so only those
are rebuilt.

Once `loop` is set, the loop parses about load.TURN_ITEMS endpoints and ports per turn: a
larger batch goes on over the next turns, in order; an object of more than load.BIG_ITEMS
is parsed in `executor` and stored when that is done, unless a later small event or a
deletion of the same object came first (a later large one is parsed next, so each
lands). `idle` is False meanwhile. A slice stored with its endpoints as text (ops/load.py,
stage 3) has them parsed, and its dropped parts reported, when `service` first reads it.

`restore` loads objects saved by an earlier run (--state-dir); each stays
marked as restored until a source upserts or deletes it, and
`drop_restored` removes those the source never confirmed (deleted meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import Any

from ..kube.apiclient.keys import Key
from ..ops import load
from ..ops.logs import Throttle, cut, show
from ..ops.stats import Put, define
from .objects import (
    CLUSTER_PROPERTY,
    ENDPOINT_SLICE,
    SERVICE_IMPORT,
    ClusterProperty,
    EndpointSlice,
    Malformed,
    Port,
    ServiceImport,
    who,
)
from .parsing import Deferred, Parsed, obj_key, parse, parse_all, size

log = logging.getLogger("mcsdns.store")

Listener = Callable[[set[Key]], None]


def parsed_size(si: ServiceImport | None, slices: Iterable[EndpointSlice]) -> int:
    """What a parsed service's records cost to build, in items: its ports, its slices'
    endpoints and ports, and for a headless service also an SRV record per endpoint and
    port of each slice (1,000 endpoints x 100 ports: 100,000 records)."""
    ports: tuple[Port, ...] = si.ports if si is not None else ()
    per_port = si is not None and si.headless
    return len(ports) + sum(len(s.endpoints) * (1 + len(s.ports) * per_port) + len(s.ports) for s in slices)


SKIPPED = define("mcsdns_skipped_objects_total", "counter",
                 "Malformed Kubernetes objects or parts skipped.", ("kind",))
EVENTS = define("mcsdns_watch_events_total", "counter", "Object events applied to the store.", ("kind",))
SERVICES = define("mcsdns_services", "gauge", "ServiceImports served.")


class Store:
    """What the sources last said: ServiceImports and EndpointSlices by key, and the
    slices of each service.

    Invariants: `by_service` indexes exactly the slices in `slices`; operations apply in
    the order of the calls, and each change is notified once, naming the services it
    changed (none: no notification); malformed objects are never stored, only counted
    in `skipped`.
    """

    def __init__(self) -> None:
        self.imports: dict[Key, ServiceImport] = {}
        self.slices: dict[Key, EndpointSlice] = {}
        self.by_service: dict[Key, set[Key]] = {}  # slice keys per service
        self.cluster_id: str | None = None
        self.skipped: Counter[str] = Counter()  # malformed objects/parts by kind
        self.events: Counter[str] = Counter()  # applied events by kind
        self._listeners: list[Listener] = []
        self.restored: set[tuple[str, Key]] = set()  # (kind, key) not yet confirmed by a source
        self._skip_log = Throttle(log, "skipped malformed objects")  # per namespace
        self.loop: asyncio.AbstractEventLoop | None = None  # set: big objects are parsed off it
        self.pending: dict[tuple[str, Key], tuple[object, dict[str, Any]]] = {}  # parsing: token, raw
        self.waiting: dict[tuple[str, Key], dict[str, Any]] = {}  # raw, after the one being parsed
        self._later: list[Deferred] = []  # deferred, not yet submitted
        self._ops: deque[Iterator[None]] = deque()  # operations queued or under way
        self._budget = load.TURN_ITEMS  # items this loop turn may still parse on the loop
        self._turn_scheduled = False
        self.executor: Executor | None = None  # where large objects are parsed (None: the loop's default)

    @property
    def idle(self) -> bool:
        """Every operation has been applied, nothing is being parsed off the loop."""
        return not self.pending and not self._ops

    def resume(self) -> None:
        """In a forked process (its parent's parsing thread and scheduled turns did not
        come along): parse again what was pending, and go on with queued operations, on
        this process's `loop`."""
        for (kind, key), (_, obj) in list(self.pending.items()):
            self._defer(kind, key, obj)
        self._submit()
        self._turn_scheduled = False
        self._next_turn()

    def publish(self, put: Put) -> None:
        for k, v in list(self.skipped.items()):
            put(SKIPPED, v, kind=k)
        for k, v in list(self.events.items()):
            put(EVENTS, v, kind=k)
        put(SERVICES, len(self.imports))

    def subscribe(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def service(self, key: Key) -> tuple[ServiceImport | None, list[EndpointSlice]]:
        """A service's import and slices, each slice's endpoints parsed by now (ops/load.py, stage 3)."""
        slices, out = self.slices, []
        for k in sorted(self.by_service.get(key, ())):
            s = slices[k]
            if s.later:
                slices[k] = s = s.settled()
                self._dropped(ENDPOINT_SLICE, s)
            out.append(s)
        return self.imports.get(key), out

    def services(self) -> list[Key]:
        return sorted(self.imports)

    # ---- mutations ----
    # Each call is an operation, run to its end at once when nothing is queued and it fits
    # in this turn's budget (nearly always); otherwise it continues on the next turns, in
    # order, the services changed so far notified at each pause.

    def upsert(self, obj: dict[str, Any]) -> None:
        self._run(self._apply_op([obj], ()))

    def delete(self, obj: dict[str, Any]) -> None:
        self._run(self._apply_op((), [(str(obj.get("kind", "")), obj_key(obj))]))

    def apply(self, upserts: Iterable[dict[str, Any]], deletes: Iterable[tuple[str, Key]]) -> None:
        """Apply several changes, then notify."""
        self._run(self._apply_op(upserts, deletes))

    def replace(self, kind: str, objs: Iterable[dict[str, Any]], applied: Iterable[Key] = ()) -> None:
        """Make the objects of `kind` exactly `objs` and those of `applied` (after a list or
        relist; `applied`: the keys of its objects already upserted)."""
        self._run(self._replace_op(kind, objs, set(applied)))

    def _apply_op(self, upserts: Iterable[dict[str, Any]],
                  deletes: Iterable[tuple[str, Key]]) -> Iterator[None]:
        changed: set[Key] = set()
        for kind, key in deletes:
            changed |= self._delete(kind, key)
            if self._spend(1):
                changed = self._pause(changed)
                yield
        for obj in upserts:
            changed |= self._upsert(obj)
            if self._budget <= 0:
                changed = self._pause(changed)
                yield
        self._pause(changed)

    def _replace_op(self, kind: str, objs: Iterable[dict[str, Any]], seen: set[Key]) -> Iterator[None]:
        changed: set[Key] = set()
        for obj in objs:
            obj.setdefault("kind", kind)
            seen.add(obj_key(obj))
            changed |= self._upsert(obj)
            if self._budget <= 0:
                changed = self._pause(changed)
                yield
        existing: list[Key] = list(self.imports) if kind == SERVICE_IMPORT else (
            list(self.slices) if kind == ENDPOINT_SLICE else [])
        for k in [k for k in existing if k not in seen]:
            changed |= self._delete(kind, k)
        self._pause(changed)

    def _pause(self, changed: set[Key]) -> set[Key]:
        """Hand what was deferred to the executor and notify what changed so far."""
        self._submit()
        self._notify(changed)
        return set()

    def _run(self, op: Iterator[None]) -> None:
        if self.loop is None:  # no loop (tools, tests): all at once
            for _ in op:
                pass
            return
        self._ops.append(op)
        if len(self._ops) == 1:
            self._drive()

    def _drive(self) -> None:
        """Run queued operations while this turn's budget lasts."""
        while self._ops and self._budget > 0:
            try:
                next(self._ops[0])
            except StopIteration:
                self._ops.popleft()

    def _spend(self, items: int) -> bool:
        """Count work done on the loop; True once this turn's budget is spent (the next
        turn, with a new budget, is then scheduled)."""
        if self.loop is None:
            return False
        self._budget -= items
        if self._budget > 0:
            return False
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._next_turn)
        return True

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        self._budget = load.TURN_ITEMS
        self._drive()

    def restore(self, objs: Iterable[dict[str, Any]]) -> None:
        """Load saved objects (malformed ones skipped as usual), marked as restored."""
        events = Counter(self.events)
        changed: set[Key] = set()
        loop, self.loop = self.loop, None  # parsed here, all of it: they are marked restored below
        try:
            for obj in objs:
                changed |= self._upsert(obj)
        finally:
            self.loop = loop
            self.events = events  # restored objects are not watch events
            self.restored = {(SERVICE_IMPORT, k) for k in self.imports}
            self.restored |= {(ENDPOINT_SLICE, k) for k in self.slices}
        self._notify(changed)

    def drop_restored(self) -> int:
        """Delete the restored objects no source has confirmed; returns how many."""
        left, self.restored = self.restored, set()
        changed: set[Key] = set()
        for kind, key in left:
            changed |= self._delete(kind, key)
        self._notify(changed)
        return len(left)

    def _upsert(self, obj: dict[str, Any]) -> set[Key]:
        kind = obj.get("kind")
        key = obj_key(obj)
        self.events[str(kind)] += 1
        if self.restored:
            self.restored.discard((str(kind), key))
        if kind in (SERVICE_IMPORT, ENDPOINT_SLICE):
            if self.loop is not None:
                items = size(kind, obj) + 1
                if not load.on_loop(items):
                    self._spend(1)
                    if (kind, key) in self.pending:  # parsed once the one under way is stored:
                        self.waiting[(kind, key)] = obj  # each lands, however often it changes
                    else:
                        self._defer(kind, key, obj)
                    return set()
                self._spend(items)
            if self.pending:  # this event supersedes the ones being parsed
                self.pending.pop((kind, key), None)
                self.waiting.pop((kind, key), None)
            old = self._current(kind, key)
            new, same = parse(kind, obj, old)
            return self._put(kind, key, new, same)
        try:
            if kind == CLUSTER_PROPERTY:
                prop = ClusterProperty.parse(obj)
                if prop is not None and prop.cluster_id != self.cluster_id:
                    self.cluster_id = prop.cluster_id
                    log.info("cluster ID is %s", prop.cluster_id)
                    return set(self.imports)  # locality may change every answer
                return set()
        except Malformed as e:
            self._skip(str(kind), str(e), key[0])
            # The object's current state is unusable: stop serving its old state.
            return self._delete(str(kind), key)
        self._skip(str(kind), f"{who(*key)}: unknown kind {show(kind)}", key[0])
        return set()

    def _dropped(self, kind: str, s: EndpointSlice) -> None:
        """Report the parts of slice `s` that were dropped, if any."""
        if s.n_dropped:
            more = s.n_dropped - len(s.dropped)
            self._skip(kind, f"{who(s.namespace, s.name)}: {s.n_dropped} parts: {'; '.join(s.dropped)}"
                       + (f" (and {more} more)" if more else ""), s.namespace, s.n_dropped)

    def _current(self, kind: str, key: Key) -> Parsed | None:
        return self.imports.get(key) if kind == SERVICE_IMPORT else self.slices.get(key)

    def _put(self, kind: str, key: Key, new: Parsed | Malformed, same: bool) -> set[Key]:
        """Store a parsed object (`same`: it equals the stored one), or stop serving one
        that became malformed; returns the services changed."""
        if isinstance(new, Malformed):
            self._skip(kind, str(new), key[0])
            return self._delete(kind, key)  # its current state is unusable: stop serving the old one
        if isinstance(new, ServiceImport):
            if same:
                return set()
            self.imports[key] = new
            return {key}
        self._dropped(kind, new)
        if same:
            return set()
        changed = self._delete(kind, key)  # a new set: added to below
        self.slices[key] = new
        svc = (new.namespace, new.service)
        self.by_service.setdefault(svc, set()).add(key)
        changed.add(svc)
        return changed

    def _defer(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        """Parse `obj` off the loop (with the rest of this call's `_later`); it is stored
        when done, unless a later event for it came first."""
        token = object()
        self.pending[(kind, key)] = (token, obj)
        self._later.append((kind, key, token, obj, self._current(kind, key)))

    def _submit(self) -> None:
        """Hand what was deferred to the executor, about load.BIG_ITEMS per job."""
        later, self._later = self._later, []
        job: list[Deferred] = []
        items = 0
        for d in later:
            job.append(d)
            items += size(d[0], d[3]) + 1
            if not load.on_loop(items) or d is later[-1]:
                self._start(job)
                job, items = [], 0

    def _start(self, job: list[Deferred]) -> None:
        assert self.loop is not None
        fut = load.in_executor(self.loop, self.executor, parse_all, job)

        def done(f: asyncio.Future[list[tuple[Parsed | Malformed, bool]]]) -> None:
            if f.cancelled():
                return  # shutting down
            try:
                results = f.result()
            except Exception:  # pragma: no cover - the parsers raise only Malformed
                log.exception("parsing %d objects failed", len(job))
                results = [(Malformed("parser failed"), False)] * len(job)
            changed: set[Key] = set()
            for (kind, key, token, _, old), (new, same) in zip(job, results, strict=True):
                entry = self.pending.get((kind, key))
                if entry is None or entry[0] is not token:
                    continue  # superseded by a later event
                del self.pending[(kind, key)]
                newer = self.waiting.pop((kind, key), None)
                changed |= self._put(kind, key, new, same and self._current(kind, key) is old)
                if newer is not None:
                    self._defer(kind, key, newer)
            self._submit()
            self._notify(changed)

        fut.add_done_callback(done)

    def _delete(self, kind: str, key: Key) -> set[Key]:
        if self.restored:
            self.restored.discard((kind, key))
        if self.pending:
            self.pending.pop((kind, key), None)
            self.waiting.pop((kind, key), None)
        if kind == SERVICE_IMPORT:
            return {key} if self.imports.pop(key, None) is not None else set()
        if kind == ENDPOINT_SLICE:
            old = self.slices.pop(key, None)
            if old is None:
                return set()
            svc = (old.namespace, old.service)
            keys = self.by_service.get(svc)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_service[svc]
            return {svc}
        return set()

    def _skip(self, kind: str, reason: str, namespace: str, parts: int = 1) -> None:
        """Count `parts` skipped (an object, or parts of one) and log one line, rate-limited
        per namespace."""
        kind = cut(kind)
        self.skipped[kind] += parts
        self._skip_log.log(cut(namespace), logging.WARNING, "skipped malformed %s: %s", kind, reason)

    def _notify(self, changed: set[Key]) -> None:
        if changed:
            for fn in self._listeners:
                fn(changed)
