"""What the controller reads of the objects in each informer cache, from every kind's declared
`reads`, and the trim derived from it (`trim_for`): an informer may drop the rest.

Our own objects are kept whole (an update's body starts from the cached object), and so
is anything a kind declares it reads whole. Others' objects keep the declared fields,
what the cache itself needs (`fields.CACHE_FIELDS`) and their labels (whose they are, and
the informers' indexes).
"""

from __future__ import annotations

from collections.abc import Callable

from ..contract import Reads
from ..exports import is_ours
from . import KINDS
from .fields import CACHE_FIELDS, Obj, Tree, tree, trim

# Namespaces are read by no kind: only whether they exist and are not being deleted.
NAMESPACE_READS: Reads = {"namespaces": ("metadata.deletionTimestamp",)}
OWNER_FIELDS = ("metadata.labels",)


def reads(resource: str) -> tuple[str, ...] | None:
    """Every field read of others' objects of `resource`; None: all of them."""
    out: list[str] = []
    for declared in (*(c.reads for c in KINDS), NAMESPACE_READS):
        if resource not in declared:
            continue
        fields = declared[resource]
        if fields is None:
            return None
        out.extend(fields)
    return (*CACHE_FIELDS, *OWNER_FIELDS, *out)


def trim_for(resource: str) -> Callable[[Obj], None] | None:
    """The informer transform for `resource` (in place); None: keep objects whole."""
    fields = reads(resource)
    if fields is None:
        return None
    kept: Tree = tree(fields)

    def trim_others(obj: Obj) -> None:
        if not is_ours(obj):
            trim(obj, kept)
    return trim_others
