"""Idempotent writes for join and leave: create an object or bring its fields to the
desired ones (`ensure`), delete one if it exists (`remove`); each returns what it did."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import Conflict, NotFound
from ..kube.resources import Resource

Obj = dict[str, Any]
SKIP = ("apiVersion", "kind", "metadata", "status")
IMMUTABLE = ("roleRef",)  # a binding's roleRef cannot change: delete and create
TRIES = 3  # reads and writes of one object when someone else changes it in between
T = TypeVar("T")


def until_no_conflict(what: str, attempt: Callable[[], T]) -> T:
    """`attempt` (a read, then a write) again while it meets a Conflict (the object was
    made or changed meanwhile), at most TRIES times."""
    for _ in range(TRIES):
        try:
            return attempt()
        except Conflict:
            continue
    raise Conflict(f"{what}: changed by someone else {TRIES} times in a row; try again")


def manifest(r: Resource, name: str, namespace: str | None = None, labels: dict[str, str] | None = None,
             **fields: Any) -> Obj:
    """An object of `r` named `name`, with `fields` at the top level."""
    meta: Obj = {"name": name}
    if namespace and r.namespaced:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": r.api_version(), "kind": r.kind, "metadata": meta, **fields}


def _differs(cur: Obj, want: Obj) -> bool:
    have = (cur.get("metadata") or {}).get("labels") or {}
    if any(have.get(k) != v for k, v in ((want.get("metadata") or {}).get("labels") or {}).items()):
        return True
    return any(cur.get(k) != v for k, v in want.items() if k not in SKIP)


def ensure(c: Client, r: Resource, want: Obj) -> str:
    """Create `want` or update the existing object's fields and labels to it: "created",
    "updated" or "unchanged". A changed binding's roleRef is replaced by delete and create."""
    meta = want["metadata"]
    path = r.path(meta.get("namespace"), meta["name"])

    def attempt() -> str:
        try:
            cur = c.get(path)
        except NotFound:
            c.request("POST", r.path(meta.get("namespace")), body=want)
            return "created"
        if not _differs(cur, want):
            return "unchanged"
        if any(k in want and cur.get(k) != want[k] for k in IMMUTABLE):
            c.request("DELETE", path)
            c.request("POST", r.path(meta.get("namespace")), body=want)
            return "updated"
        labels = dict((cur.get("metadata") or {}).get("labels") or {}, **(meta.get("labels") or {}))
        body = dict(cur, **{k: v for k, v in want.items() if k not in SKIP})
        body["metadata"] = dict(cur["metadata"], labels=labels)
        c.request("PUT", path, body=body)
        return "updated"
    return until_no_conflict(path, attempt)


def remove(c: Client, r: Resource, name: str, namespace: str | None = None) -> bool:
    """Delete the object; False when there was none."""
    try:
        c.request("DELETE", r.path(namespace, name))
    except NotFound:
        return False
    return True
