"""Declared reads: the fields of an object that the controller looks at, and the trim that
keeps only those (what an informer cache may drop without changing any reconcile).

A field is a dotted path ("spec.ports.name"); a path through a list applies to each item.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]
Tree = dict[str, "Tree | None"]  # field -> its kept sub-fields; None: the whole value

CACHE_FIELDS = ("metadata.name", "metadata.namespace", "metadata.resourceVersion")  # key, version


def tree(paths: Iterable[str]) -> Tree:
    """The kept fields as a tree; a field kept whole absorbs any path below it."""
    out: Tree = {}
    for path in sorted(paths, key=lambda p: p.count(".")):
        node: Tree | None = out
        *parents, last = path.split(".")
        for part in parents:
            if node is None:
                break
            if part not in node:
                node[part] = {}
            node = node[part]
        if node is not None:
            node[last] = None
    return out


def keep(value: Any, node: Tree | None) -> Any:
    """A copy of `value` with only the fields of `node`; values of an unexpected type stay as
    they are (a reader that copes with them sees them unchanged)."""
    if node is None:
        return value
    if isinstance(value, dict):
        return {k: keep(value[k], sub) for k, sub in node.items() if k in value}
    if isinstance(value, list):
        return [keep(v, node) for v in value]
    return value


def trim(obj: Obj, node: Tree) -> None:
    """Keep only `node`'s fields of `obj`, in place."""
    kept = keep(obj, node)
    obj.clear()
    obj.update(kept)
