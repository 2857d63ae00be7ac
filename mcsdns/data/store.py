"""The object store: what the sources last said, grouped by service.

Sources call `upsert`, `delete` and `replace` (a full list of one kind) on the
event-loop thread. Every call ends by telling subscribers which services
changed, so only those are rebuilt.

`restore` loads objects saved by an earlier run (--state-dir); each stays
marked as restored until a source upserts or deletes it, and
`drop_restored` removes those the source never confirmed (deleted meanwhile).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ..kube.keys import Key, key_of
from ..ops.logs import Throttle, cut, show
from ..ops.stats import Put, define
from .objects import (
    EndpointSlice,
    Malformed,
    ServiceImport,
    parse_cluster_id,
    parse_endpoint_slice,
    parse_service_import,
    who,
)

log = logging.getLogger("mcsdns.store")

SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY = "ServiceImport", "EndpointSlice", "ClusterProperty"
KINDS = (SERVICE_IMPORT, ENDPOINT_SLICE, CLUSTER_PROPERTY)

ServiceKey = Key  # a ServiceImport's, naming the service
ObjKey = Key  # an object's within one kind
Listener = Callable[[set[ServiceKey]], None]

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
        self._skip_log = Throttle(log, "skipped malformed objects")  # per namespace

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
        self._notify(self._upsert(obj))

    def delete(self, obj: dict[str, Any]) -> None:
        self._notify(self._delete(str(obj.get("kind", "")), obj_key(obj)))

    def apply(self, upserts: Iterable[dict[str, Any]], deletes: Iterable[tuple[str, ObjKey]]) -> None:
        """Apply several changes, then notify once."""
        changed: set[ServiceKey] = set()
        for kind, key in deletes:
            changed |= self._delete(kind, key)
        for obj in upserts:
            changed |= self._upsert(obj)
        self._notify(changed)

    def replace(self, kind: str, objs: Iterable[dict[str, Any]]) -> None:
        """Make the objects of `kind` exactly `objs` (after a list or relist)."""
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
        self._notify(changed)

    def restore(self, objs: Iterable[dict[str, Any]]) -> None:
        """Load saved objects (malformed ones skipped as usual), marked as restored."""
        events = Counter(self.events)
        changed: set[ServiceKey] = set()
        try:
            for obj in objs:
                changed |= self._upsert(obj)
        finally:
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
        try:
            if kind == SERVICE_IMPORT:
                si = parse_service_import(obj)
                if self.imports.get(key) == si:
                    return set()
                self.imports[key] = si
                return {key}
            if kind == ENDPOINT_SLICE:
                sl = parse_endpoint_slice(obj)
                if sl.n_dropped:
                    more = sl.n_dropped - len(sl.dropped)
                    self._skip(kind, f"{who(*key)}: {sl.n_dropped} parts: {'; '.join(sl.dropped)}"
                               + (f" (and {more} more)" if more else ""), key[0], sl.n_dropped)
                old = self.slices.get(key)
                if old == sl:
                    return set()
                changed = self._delete(kind, key)
                self.slices[key] = sl
                svc = (sl.namespace, sl.service)
                self.by_service.setdefault(svc, set()).add(key)
                return changed | {svc}
            if kind == CLUSTER_PROPERTY:
                cid = parse_cluster_id(obj)
                if cid is not None and cid != self.cluster_id:
                    self.cluster_id = cid
                    log.info("cluster ID is %s", cid)
                    return set(self.imports)  # locality may change every answer
                return set()
        except Malformed as e:
            self._skip(str(kind), str(e), key[0])
            # The object's current state is unusable: stop serving its old state.
            return self._delete(str(kind), key)
        self._skip(str(kind), f"{who(*key)}: unknown kind {show(kind)}", key[0])
        return set()

    def _delete(self, kind: str, key: ObjKey) -> set[ServiceKey]:
        if self.restored:
            self.restored.discard((kind, key))
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

    def _notify(self, changed: set[ServiceKey]) -> None:
        if changed:
            for fn in self._listeners:
                fn(changed)
