"""The test API server's label and field selectors, and merge/JSON patches, as kube-apiserver
reads them."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

from .resources import Resource
from .status import HTTPError, Obj

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """A predicate for a Kubernetes label selector string."""
    terms: list[tuple[str, str, frozenset[str]]] = []  # (op, key, values)
    for term in _split_terms(selector):
        m = _SET_TERM.match(term)
        if m:
            terms.append((m[2], m[1], frozenset(v.strip() for v in m[3].split(","))))
        elif "!=" in term:
            k, v = (s.strip() for s in term.split("!=", 1))
            terms.append(("!=", k, frozenset({v})))
        elif "=" in term:
            k, v = (s.strip() for s in term.split("=", 1))
            terms.append(("=", k, frozenset({v.lstrip("=").strip()})))
        elif term.startswith("!"):
            terms.append(("absent", term[1:].strip(), frozenset()))
        else:
            terms.append(("exists", term, frozenset()))

    def one(lb: dict[str, str], op: str, k: str, vals: frozenset[str]) -> bool:
        if op in ("in", "="):
            return lb.get(k) in vals
        if op in ("notin", "!="):
            return lb.get(k) not in vals
        return (k in lb) == (op == "exists")

    return lambda labels: all(one(labels, *term) for term in terms)


def _field(o: Obj, path: str) -> str:
    v: Any = o
    for p in path.split("."):
        v = v.get(p) if isinstance(v, dict) else None
    return "" if v is None else str(v)


def field_matcher(selector: str, r: Resource | None = None) -> Callable[[Obj], bool]:
    """A predicate for a field selector: `metadata.name`, `metadata.namespace` and the
    resource's own fields (`Resource.fields`), refused as kube-apiserver refuses others."""
    known = ("metadata.name", "metadata.namespace", *(r.fields if r else ()))
    terms: list[tuple[str, str, bool]] = []  # (field path, value, negated)
    for term in _split_terms(selector):
        neg = "!=" in term
        f, v = (s.strip() for s in re.split(r"!=|==|=", term, maxsplit=1))
        if f not in known:
            if r is not None and r.generation != "custom":
                raise HTTPError(400, "BadRequest", f"{json.dumps(f)} is not a known field selector: only "
                                + ", ".join(json.dumps(k) for k in known))
            raise HTTPError(400, "BadRequest", f"field label not supported: {f}")
        terms.append((f, v, neg))
    return lambda o: all((_field(o, f) == v) != neg for f, v, neg in terms)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 JSON patch: add, replace, remove."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if isinstance(parent, list):
            idx = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(idx, op["value"])
            elif op["op"] == "replace":
                parent[idx] = op["value"]
            elif op["op"] == "remove":
                del parent[idx]
        elif op["op"] in ("add", "replace"):
            parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        else:
            raise HTTPError(422, "Invalid", f"unsupported patch op {op['op']}")
    return doc
