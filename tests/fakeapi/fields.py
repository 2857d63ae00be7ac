"""The test API server's `metadata.managedFields`, written as kube-apiserver writes them on
every create and update: one entry per (manager, operation, subresource), its `fieldsV1`
the fields that write set (`f:` keys; Service ports keyed `k:{"port":..,"protocol":..}`;
other lists atomic). The manager is the `fieldManager` parameter, else the User-Agent up to
its first "/". Ownership is simplified: a manager's entry holds every field of the object
it wrote (the real server moves only the fields that changed); other entries are kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .resources import Resource
from .status import Obj

_SKIP_TOP = {"apiVersion", "kind", "metadata"}
_META = ("labels", "annotations", "finalizers", "ownerReferences")
_ALLOCATED = {"clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"}  # Service: the server's


def manager_of(user_agent: str, field_manager: str | None) -> str:
    """The manager a write is recorded under."""
    return field_manager or user_agent.split("/", 1)[0].strip() or "unknown"


def _tree(v: Any, dot: bool, keyed: bool = False) -> Obj:
    """The field set of value `v` (`dot`: the map itself is a member, as ".")."""
    if isinstance(v, dict):
        out: Obj = {".": {}} if dot else {}
        for k, sub in v.items():
            out[f"f:{k}"] = _tree(sub, True)
        return out
    if isinstance(v, list) and keyed:
        out = {".": {}}
        for item in v:
            if isinstance(item, dict):
                key = json.dumps({"port": item.get("port"), "protocol": item.get("protocol", "TCP")},
                                 separators=(",", ":"))
                out[f"k:{key}"] = _tree(item, True)
        return out
    return {}


def _meta(md: Obj) -> Obj:
    out: Obj = {}
    for k in _META:
        v = md.get(k)
        if isinstance(v, dict) and v:
            out[f"f:{k}"] = _tree(v, True)
        elif k == "ownerReferences" and isinstance(v, list) and v:
            out["f:ownerReferences"] = {".": {}, **{"k:" + json.dumps({"uid": o.get("uid")}): {}
                                                     for o in v if isinstance(o, dict)}}
        elif k == "finalizers" and isinstance(v, list) and v:
            out["f:finalizers"] = {".": {}, **{"v:" + json.dumps(f): {} for f in v}}
    return out


def fields_v1(r: Resource, obj: Obj, status_only: bool) -> Obj:
    """The field set a write of `obj` sets (the main resource's, or its /status's)."""
    if status_only:
        return {"f:status": _tree(obj.get("status") or {}, True)}
    out: Obj = {}
    md = _meta(obj.get("metadata") or {})
    if md:
        out["f:metadata"] = md
    for k, v in obj.items():
        if k in _SKIP_TOP or (k == "status" and r.status):
            continue
        if k == "spec" and r.kind == "Service" and isinstance(v, dict):
            spec = {sk: sv for sk, sv in v.items() if sk not in _ALLOCATED}
            out["f:spec"] = {f"f:{sk}": _tree(sv, True, keyed=sk == "ports") for sk, sv in spec.items()}
        else:
            out[f"f:{k}"] = _tree(v, r.generation == "custom")
    return out


def record(r: Resource, obj: Obj, old: list[Obj], manager: str, status_only: bool) -> None:
    """Set `obj`'s managedFields: `old` with the entry of this write replaced."""
    sub = "status" if status_only else ""
    entry: Obj = {"manager": manager, "operation": "Update", "apiVersion": obj.get("apiVersion", ""),
                  "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "fieldsType": "FieldsV1",
                  "fieldsV1": fields_v1(r, obj, status_only)}
    if sub:
        entry["subresource"] = sub
    keep = [e for e in old if (e.get("manager"), e.get("operation"), e.get("subresource", "")) !=
            (manager, "Update", sub)]
    obj["metadata"]["managedFields"] = [*keep, entry]
