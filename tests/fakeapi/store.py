"""The test API server's object store: objects, one global resourceVersion counter and the
retained event window, under one lock, as etcd and kube-apiserver's watch cache keep them."""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from .fields import record
from .ipam import ClusterIPs
from .resources import Resource
from .status import HTTPError, Obj

Key = tuple[str, str, str, str]  # group, plural, namespace ("" if cluster-scoped), name
Event = tuple[int, str, str, str, Obj]  # rv, group, plural, type, object


def view(obj: Obj, api_version: str) -> Obj:
    """The object as served at `api_version` (a shallow copy when that differs)."""
    return dict(obj, apiVersion=api_version) if obj.get("apiVersion") != api_version else obj


def _new_metadata(r: Resource, md: Obj) -> None:
    md["uid"] = md.get("uid") or str(uuid.uuid4())
    md["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if r.generation:
        md["generation"] = 1
    else:
        md.pop("generation", None)


def _body(r: Resource, obj: Obj) -> Obj:
    """What a change of bumps metadata.generation: all but metadata (and status, when it is
    a subresource)."""
    return {k: v for k, v in obj.items() if k != "metadata" and not (k == "status" and r.status)}


def _generation(r: Resource, obj: Obj, cur: Obj) -> int | None:
    """The generation of `obj` replacing `cur`, as kube-apiserver's strategies set it: a custom
    resource's bumps when its body changes; an EndpointSlice's also when its labels do;
    other built-in kinds have none."""
    if not r.generation:
        return None
    old = cur["metadata"].get("generation", 1)
    changed = _body(r, obj) != _body(r, cur)
    if r.generation == "endpointslice":
        changed = changed or obj["metadata"].get("labels") != cur["metadata"].get("labels")
    return int(old) + changed


class Store:
    """Objects by key, the resourceVersion counter and the event window. Call the methods
    with `cond` held; `cond` is notified on every event."""

    def __init__(self, window: int, service_cidrs: Iterable[str]) -> None:
        self.window = window
        self.objs: dict[Key, Obj] = {}
        self.events: list[Event] = []
        self.rv = 1  # as a real server's, never "0" (a watch from "0" asks for the current state)
        self.floor = 0  # watching from a resourceVersion below this is 410 Gone
        self.cond = threading.Condition()
        self.ipam = ClusterIPs(service_cidrs)
        self._json: dict[tuple[str, str, str, str], tuple[str, bytes]] = {}  # encoded objects

    @staticmethod
    def key(r: Resource, namespace: str | None, name: str) -> Key:
        return (r.group, r.plural, namespace or "" if r.namespaced else "", name)

    def compact(self) -> None:
        """Forget every retained event."""
        self.events.clear()
        self.floor = self.rv

    def emit(self, r: Resource, typ: str, obj: Obj) -> None:
        self.rv += 1
        if typ == "DELETED":  # the object may be shared with an earlier event: copy it
            obj = dict(obj, metadata=dict(obj["metadata"]))
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, r.group, r.plural, typ, obj))
        if len(self.events) > self.window:
            drop = len(self.events) - self.window
            self.floor = self.events[drop - 1][0]
            del self.events[:drop]
        self.cond.notify_all()

    def remove(self, r: Resource, key: Key) -> Obj | None:
        """Delete an object (its ClusterIPs released); the deleted object, None if absent."""
        cur = self.objs.pop(key, None)
        if cur is None:
            return None
        if r.kind == "Service":
            self.ipam.release(cur)
        self.emit(r, "DELETED", cur)
        return cur

    def write(self, r: Resource, ns: str, obj: Obj, replace_status: bool = False,
              status_only: bool = False, expect_rv: str | None = None, create: bool | None = None,
              manager: str = "kubeapi") -> Obj:
        """Create (`create` True) or replace (False) or either (None) an object, as the API's
        main resource (`status` kept as stored unless `replace_status`) or its /status
        subresource (`status_only`), recorded in managedFields under `manager`; returns a
        copy of what is stored."""
        md = obj.setdefault("metadata", {})
        name = md.get("name")
        if not name:
            raise HTTPError(422, "Invalid", "metadata.name is required")
        key = (r.group, r.plural, ns, name)
        cur = self.objs.get(key)
        self._check(r, name, cur, expect_rv, create)
        if r.namespaced:
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        obj["kind"] = r.kind
        if "apiVersion" not in obj or obj["apiVersion"].rpartition("/")[0] != r.group:
            obj["apiVersion"] = r.api_version(r.versions[0])
        if r.kind == "Service" and not status_only:
            self.ipam.assign(obj, cur, f"{ns}/{name}")
        if cur is None:
            _new_metadata(r, md)
            if r.status and not replace_status:
                obj.pop("status", None)
            if r.kind == "Service":
                obj.setdefault("status", {"loadBalancer": {}})
            typ = "ADDED"
        else:
            obj = self._update(r, obj, cur, replace_status, status_only)
            typ = "MODIFIED"
        given = obj["metadata"].get("managedFields") or (cur or {}).get("metadata", {}).get("managedFields")
        record(r, obj, [e for e in given or [] if isinstance(e, dict)], manager, status_only)
        self.objs[key] = obj
        self.emit(r, typ, obj)
        return copy.deepcopy(obj)

    @staticmethod
    def _check(r: Resource, name: str, cur: Obj | None, expect_rv: str | None, create: bool | None) -> None:
        if create is True and cur is not None:
            raise HTTPError(409, "AlreadyExists", f'{r.plural} "{name}" already exists')
        if create is False and cur is None:
            raise HTTPError(404, "NotFound", f'{r.plural} "{name}" not found')
        if expect_rv and cur is not None and expect_rv != cur["metadata"]["resourceVersion"]:
            raise HTTPError(409, "Conflict", f'Operation cannot be fulfilled on {r.plural} "{name}": '
                            "the object has been modified; please apply your changes to the latest version")

    @staticmethod
    def _update(r: Resource, obj: Obj, cur: Obj, replace_status: bool, status_only: bool) -> Obj:
        """`obj` as it replaces `cur`: identity kept, status per subresource, generation bumped
        when `spec` changes."""
        old = cur["metadata"]
        if status_only:
            obj = dict(copy.deepcopy(cur), status=obj.get("status"))
        elif r.status and not replace_status:
            obj.pop("status", None)
            if "status" in cur:
                obj["status"] = copy.deepcopy(cur["status"])
        md = obj["metadata"]
        md["uid"], md["creationTimestamp"] = old["uid"], old["creationTimestamp"]
        gen = _generation(r, obj, cur)
        if gen is None:
            md.pop("generation", None)
        else:
            md["generation"] = gen
        return obj

    def matching(self, r: Resource, visible: Callable[[str, Obj], bool]) -> list[Obj]:
        """The objects of `r` for which `visible(namespace key, object)` holds, in key order."""
        return [o for (g, p, n, _), o in sorted(self.objs.items())
                if (g, p) == (r.group, r.plural) and visible(n, o)]

    def encoded(self, obj: Obj, api_version: str) -> bytes:
        """An object as JSON, encoded once per resourceVersion and version (as the watch
        cache of kube-apiserver keeps serialized objects)."""
        md = obj["metadata"]
        key = (obj["kind"], md.get("namespace", ""), md["name"], api_version)
        got = self._json.get(key)
        if got is None or got[0] != md["resourceVersion"]:
            got = self._json[key] = (md["resourceVersion"], json.dumps(view(obj, api_version)).encode())
        return got[1]

