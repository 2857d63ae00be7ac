"""The object store: what the sources last said, grouped by service.

Sources call `upsert`, `delete` and `replace` (a full list of one kind) on the
event-loop thread. Every call ends by telling subscribers which services
changed, so only those are rebuilt.

Once `loop` is set, one call parses at most about BIG_ITEMS endpoints and ports on the
event loop: a larger object, and the objects past that budget, are parsed in the loop's
executor and stored when that is done, unless a later event for the same object came
first; `idle` is False meanwhile.

`restore` loads objects saved by an earlier run (--state-dir); each stays
marked as restored until a source upserts or deletes it, and
`drop_restored` removes those the source never confirmed (deleted meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from ..kube.keys import Key, key_of
from ..ops import gcpause
from ..ops.stats import Put, define
from .objects import (
    EndpointSlice,
    Malformed,
    Port,
    ServiceImport,
    parse_cluster_id,
    parse_endpoint_slice,
    parse_service_import,
)

log = logging.getLogger("mcsdns.store")

SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY = "ServiceImport", "EndpointSlice", "ClusterProperty"
KINDS = (SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY)

ServiceKey = Key  # a ServiceImport's, naming the service
ObjKey = Key  # an object's within one kind
Listener = Callable[[set[ServiceKey]], None]

BIG_ITEMS = 2000  # endpoints + ports of one object above which it is parsed off the event loop
Parsed: TypeAlias = ServiceImport | EndpointSlice


def size(obj: dict[str, Any]) -> int:
    """Endpoints and ports of a raw ServiceImport or EndpointSlice (0 where malformed)."""
    spec = obj.get("spec")
    parts = (obj.get("endpoints"), obj.get("ports"), spec.get("ports") if isinstance(spec, dict) else None)
    return sum(len(p) for p in parts if isinstance(p, list))


def parsed_size(si: ServiceImport | None, slices: Iterable[EndpointSlice]) -> int:
    """Endpoints and ports of a parsed service (what its records cost to build)."""
    ports: tuple[Port, ...] = si.ports if si is not None else ()
    return len(ports) + sum(len(s.endpoints) + len(s.ports) for s in slices)


Deferred = tuple[str, ObjKey, object, dict[str, Any], Parsed | None]  # kind, key, token, raw, stored


def _parse_all(job: list[Deferred]) -> list[tuple[Parsed | Malformed, bool]]:
    return [_parse(kind, obj, old) for kind, _, _, obj, old in job]


def _parse(kind: str, obj: dict[str, Any], old: Parsed | None) -> tuple[Parsed | Malformed, bool]:
    """(the parsed object or why it is malformed, whether it equals `old`), off the loop."""
    try:
        new: Parsed = parse_service_import(obj) if kind == SERVICE_IMPORT else parse_endpoint_slice(obj)
    except Malformed as e:
        return e, False
    return new, old == new


SKIPPED = define("mcsdns_skipped_objects_total", "counter",
                 "Malformed Kubernetes objects or parts skipped.", ("kind",))
EVENTS = define("mcsdns_watch_events_total", "counter", "Object events applied to the store.", ("kind",))
SERVICES = define("mcsdns_services", "gauge", "ServiceImports served.")


def obj_key(obj: dict[str, Any]) -> ObjKey:
    """As kubectl applies manifests: an object that names no namespace is in "default"."""
    return key_of(obj, "default")


class Store:
    """What the sources last said: ServiceImports and EndpointSlices by key, and the
    slices of each service.

    Invariants: `by_service` indexes exactly the slices in `slices`; every mutation ends
    with one notification naming the services it changed (none: no notification);
    malformed objects are never stored, only counted in `skipped`.
    """

    def __init__(self) -> None:
        self.imports: dict[ObjKey, ServiceImport] = {}
        self.slices: dict[ObjKey, EndpointSlice] = {}
        self.by_service: dict[ServiceKey, set[ObjKey]] = {}  # slice keys per service
        self.cluster_id: str | None = None
        self.skipped: Counter[str] = Counter()  # malformed objects/parts by kind
        self.events: Counter[str] = Counter()  # applied events by kind
        self._listeners: list[Listener] = []
        self.restored: set[tuple[str, ObjKey]] = set()  # (kind, key) not yet confirmed by a source
        self.loop: asyncio.AbstractEventLoop | None = None  # set: big objects are parsed off it
        self.pending: dict[tuple[str, ObjKey], tuple[object, dict[str, Any]]] = {}  # parsing: token, raw
        self._later: list[Deferred] = []  # deferred by the current call, not yet submitted
        self._budget = BIG_ITEMS  # items the current call may still parse on the loop

    @property
    def idle(self) -> bool:
        """No object is being parsed off the loop."""
        return not self.pending

    def resume(self) -> None:
        """In a forked process (its parent's parsing threads did not come along): parse
        again what was pending, on this process's `loop`."""
        for (kind, key), (_, obj) in list(self.pending.items()):
            self._defer(kind, key, obj)
        self._submit()

    def publish(self, put: Put) -> None:
        for k, v in list(self.skipped.items()):
            put(SKIPPED, v, kind=k)
        for k, v in list(self.events.items()):
            put(EVENTS, v, kind=k)
        put(SERVICES, len(self.imports))

    def subscribe(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def service(self, key: ServiceKey) -> tuple[ServiceImport | None, list[EndpointSlice]]:
        return self.imports.get(key), [self.slices[k] for k in sorted(self.by_service.get(key, ()))]

    def services(self) -> list[ServiceKey]:
        return sorted(self.imports)

    # ---- mutations ----

    def upsert(self, obj: dict[str, Any]) -> None:
        self._budget = BIG_ITEMS
        changed = self._upsert(obj)
        self._submit()
        self._notify(changed)

    def delete(self, obj: dict[str, Any]) -> None:
        self._notify(self._delete(str(obj.get("kind", "")), obj_key(obj)))

    def apply(self, upserts: Iterable[dict[str, Any]], deletes: Iterable[tuple[str, ObjKey]]) -> None:
        """Apply several changes, then notify once."""
        self._budget = BIG_ITEMS
        changed: set[ServiceKey] = set()
        for kind, key in deletes:
            changed |= self._delete(kind, key)
        for obj in upserts:
            changed |= self._upsert(obj)
        self._submit()
        self._notify(changed)

    def replace(self, kind: str, objs: Iterable[dict[str, Any]]) -> None:
        """Make the objects of `kind` exactly `objs` (after a list or relist)."""
        self._budget = BIG_ITEMS
        changed: set[ServiceKey] = set()
        seen: set[ObjKey] = set()
        for obj in objs:
            obj.setdefault("kind", kind)
            seen.add(obj_key(obj))
            changed |= self._upsert(obj)
        existing: list[ObjKey] = list(self.imports) if kind == SERVICE_IMPORT else (
            list(self.slices) if kind == ENDPOINT_SLICE else [])
        for k in [k for k in existing if k not in seen]:
            changed |= self._delete(kind, k)
        self._submit()
        self._notify(changed)

    def restore(self, objs: Iterable[dict[str, Any]]) -> None:
        """Load saved objects (malformed ones skipped as usual), marked as restored."""
        events = Counter(self.events)
        changed: set[ServiceKey] = set()
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
        changed: set[ServiceKey] = set()
        for kind, key in left:
            changed |= self._delete(kind, key)
        self._notify(changed)
        return len(left)

    def _upsert(self, obj: dict[str, Any]) -> set[ServiceKey]:
        kind = obj.get("kind")
        key = obj_key(obj)
        self.events[str(kind)] += 1
        if self.restored:
            self.restored.discard((str(kind), key))
        if self.pending:
            self.pending.pop((str(kind), key), None)  # this event supersedes the one being parsed
        if kind in (SERVICE_IMPORT, ENDPOINT_SLICE):
            if self.loop is not None:
                items = size(obj) + 1
                if items > self._budget or items > BIG_ITEMS:
                    self._defer(kind, key, obj)
                    return set()
                self._budget -= items
            old = self._current(kind, key)
            new, same = _parse(kind, obj, old)
            return self._put(kind, key, new, same)
        try:
            if kind == CLUSTER_PROPERTY:
                cid = parse_cluster_id(obj)
                if cid is not None and cid != self.cluster_id:
                    self.cluster_id = cid
                    log.info("cluster ID is %s", cid)
                    return set(self.imports)  # locality may change every answer
                return set()
        except Malformed as e:
            self._skip(str(kind), str(e))
            # The object's current state is unusable: stop serving its old state.
            return self._delete(str(kind), key)
        self._skip(str(kind), f"{key[0]}/{key[1]}: unknown kind {kind!r}")
        return set()

    def _current(self, kind: str, key: ObjKey) -> Parsed | None:
        return self.imports.get(key) if kind == SERVICE_IMPORT else self.slices.get(key)

    def _put(self, kind: str, key: ObjKey, new: Parsed | Malformed, same: bool) -> set[ServiceKey]:
        """Store a parsed object (`same`: it equals the stored one), or stop serving one
        that became malformed; returns the services changed."""
        if isinstance(new, Malformed):
            self._skip(kind, str(new))
            return self._delete(kind, key)  # its current state is unusable: stop serving the old one
        if isinstance(new, ServiceImport):
            if same:
                return set()
            self.imports[key] = new
            return {key}
        for reason in new.dropped:
            self._skip(kind, f"{key[0]}/{key[1]}: {reason}")
        if same:
            return set()
        changed = self._delete(kind, key)
        self.slices[key] = new
        svc = (new.namespace, new.service)
        self.by_service.setdefault(svc, set()).add(key)
        return changed | {svc}

    def _defer(self, kind: str, key: ObjKey, obj: dict[str, Any]) -> None:
        """Parse `obj` off the loop (with the rest of this call's `_later`); it is stored
        when done, unless a later event for it came first."""
        token = object()
        self.pending[(kind, key)] = (token, obj)
        self._later.append((kind, key, token, obj, self._current(kind, key)))

    def _submit(self) -> None:
        """Hand what this call deferred to the loop's executor, about BIG_ITEMS per job."""
        later, self._later = self._later, []
        job: list[Deferred] = []
        items = 0
        for d in later:
            job.append(d)
            items += size(d[3]) + 1
            if items > BIG_ITEMS or d is later[-1]:
                self._run(job)
                job, items = [], 0

    def _run(self, job: list[Deferred]) -> None:
        assert self.loop is not None
        gcpause.hold()
        fut = self.loop.run_in_executor(None, _parse_all, job)

        def done(f: asyncio.Future[list[tuple[Parsed | Malformed, bool]]]) -> None:
            gcpause.release()
            if f.cancelled():
                return  # shutting down
            try:
                results = f.result()
            except Exception:  # pragma: no cover - the parsers raise only Malformed
                log.exception("parsing %d objects failed", len(job))
                results = [(Malformed("parser failed"), False)] * len(job)
            changed: set[ServiceKey] = set()
            for (kind, key, token, _, old), (new, same) in zip(job, results, strict=True):
                entry = self.pending.get((kind, key))
                if entry is None or entry[0] is not token:
                    continue  # superseded by a later event
                del self.pending[(kind, key)]
                changed |= self._put(kind, key, new, same and self._current(kind, key) is old)
            self._notify(changed)

        fut.add_done_callback(done)

    def _delete(self, kind: str, key: ObjKey) -> set[ServiceKey]:
        if self.restored:
            self.restored.discard((kind, key))
        if self.pending:
            self.pending.pop((kind, key), None)
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

    def _skip(self, kind: str, reason: str) -> None:
        self.skipped[kind] += 1
        log.warning("skipped malformed %s: %s", kind, reason)

    def _notify(self, changed: set[ServiceKey]) -> None:
        if changed:
            for fn in self._listeners:
                fn(changed)
