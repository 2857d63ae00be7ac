"""What a namespace holds, across every namespaced resource the server lists (as `kubectl
api-resources --namespaced --verbs=list` finds them, each group at its preferred version):
leave deletes a namespace join made only when it holds nothing but what Kubernetes puts
in every namespace and join's own objects."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from ..kube.apiclient.client import METADATA_ONLY, Client
from ..kube.apiclient.errors import ApiError, Rejected

Obj = dict[str, Any]
# What Kubernetes itself puts in every namespace: (group, plural) -> the name, None for all.
BUILTIN: dict[tuple[str, str], str | None] = {
    ("", "serviceaccounts"): "default", ("", "configmaps"): "kube-root-ca.crt",
    ("", "events"): None, ("events.k8s.io", "events"): None}
NAMED = 3  # objects named in the answer; one page of this many (+ BUILTIN's one) is read per resource


def _listable(c: Client) -> Iterator[tuple[str, str, str, str]]:
    """(group, group/version path, plural, kind) of every namespaced resource with the list
    verb, each at its group's preferred version that serves it (client-go's
    ServerPreferredResources), but for BUILTIN's whole kinds (Events)."""
    versions = [("", "/api/v1")]
    for g in c.get("/apis").get("groups") or []:
        pref = (g.get("preferredVersion") or {}).get("groupVersion")
        gvs = [str(v.get("groupVersion")) for v in g.get("versions") or [] if v.get("groupVersion")]
        versions += [(str(g.get("name") or ""), f"/apis/{gv}") for gv in sorted(gvs, key=lambda v: v != pref)]
    seen: set[tuple[str, str]] = set()
    for group, base in versions:
        for r in c.get(base).get("resources") or []:
            name = str(r.get("name") or "")
            if r.get("namespaced") and "list" in (r.get("verbs") or []) and "/" not in name \
                    and BUILTIN.get((group, name), "") is not None and (group, name) not in seen:
                seen.add((group, name))
                yield group, base, name, str(r.get("kind") or name).lower() + (f".{group}" if group else "")


def _page(c: Client, base: str, namespace: str, plural: str) -> tuple[list[Obj], bool]:
    """One page of the collection (its metadata only where the server can): (items, whether
    more follow)."""
    path, query = f"{base}/namespaces/{namespace}/{plural}", {"limit": NAMED + 1}
    try:
        resp = c.open("GET", path, query, accept=METADATA_ONLY[0])
    except Rejected as e:
        if e.status != 406:  # an aggregated API that serves no PartialObjectMetadataList
            raise
        resp = c.open("GET", path, query)
    data = json.loads(resp.data)
    return list(data.get("items") or []), bool((data.get("metadata") or {}).get("continue"))


def held(c: Client, namespace: str, ours: Callable[[Obj], bool]) -> list[str]:
    """Up to NAMED objects of `namespace` that neither Kubernetes nor `ours` accounts for, as
    "kind/name" ("secret/mcsdns-members"), then "..." when there are more; a resource that
    cannot be listed counts as held ("pods: 403 Forbidden")."""
    out: list[str] = []
    for group, base, plural, kind in _listable(c):
        try:
            items, more = _page(c, base, namespace, plural)
        except ApiError as e:
            out.append(f"{plural}{'.' + group if group else ''}: {str(e).rsplit(': ', 1)[-1]}")
            continue
        for obj in items:
            name = str((obj.get("metadata") or {}).get("name"))
            if name != BUILTIN.get((group, plural)) and not ours(obj):
                out.append(f"{kind}/{name}")
        if more or len(out) > NAMED:
            return out[:NAMED] + ["..."]
    return out
