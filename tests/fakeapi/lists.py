"""The test API server's lists, as kube-apiserver serves them: selectors, `limit`/`continue`
paging over a consistent snapshot (410 Expired for an unknown or evicted token),
`resourceVersion` 0 served whole from the watch cache, `resourceVersionMatch=Exact`."""

from __future__ import annotations

import base64
import itertools
import json
from collections import OrderedDict

from .resources import Resource
from .select import field_matcher, label_matcher
from .status import HTTPError, Obj, RawJSON
from .store import Store

_META_V1 = "meta.k8s.io/v1"
_PAGES_KEPT = 64  # snapshots kept for `continue` tokens; older tokens are 410 Expired


class Lists:
    """List requests over one store, with the snapshots their `continue` tokens name."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pages: OrderedDict[str, tuple[int, list[Obj]]] = OrderedDict()
        self._page_ids = itertools.count(1)

    def forget(self) -> None:
        """Expire every `continue` token (call with the store's lock held)."""
        self._pages.clear()

    def serve(self, r: Resource, api_version: str, ns: str | None, q: dict[str, str],
              cache_pages: bool, metadata_only: bool = False) -> RawJSON:
        """A `<Kind>List` (`cache_pages`: resourceVersion=0 lists are paged too), or with
        `metadata_only` a `PartialObjectMetadataList`."""
        limit = int(q.get("limit") or 0)
        with self.store.cond:
            cont = q.get("continue")
            if cont:
                rv, items, offset, token = self._resume(cont)
            else:
                asked = q.get("resourceVersion")
                if q.get("resourceVersionMatch") == "Exact" and asked != str(self.store.rv):
                    raise HTTPError(410, "Expired", f"too old resource version: {asked}")
                if asked == "0" and not cache_pages:
                    limit = 0  # served from the watch cache, which ignores limit
                rv, items, offset, token = self.store.rv, self._select(r, ns, q), 0, ""
            page = items[offset:offset + limit] if limit else items[offset:]
            meta: Obj = {"resourceVersion": str(rv)}
            if limit and offset + limit < len(items):
                token = token or self._keep(rv, items)
                meta["continue"] = base64.urlsafe_b64encode(f"{token}:{offset + limit}".encode()).decode()
                meta["remainingItemCount"] = len(items) - offset - limit
            if metadata_only:
                out = [json.dumps({"kind": "PartialObjectMetadata", "apiVersion": _META_V1,
                                   "metadata": o["metadata"]}).encode() for o in page]
            else:
                out = [self.store.encoded(o, api_version) for o in page]
        head = json.dumps({"kind": "PartialObjectMetadataList" if metadata_only else f"{r.kind}List",
                           "apiVersion": _META_V1 if metadata_only else api_version, "metadata": meta})
        return RawJSON(head[:-1].encode() + b', "items": [' + b", ".join(out) + b"]}")

    def _select(self, r: Resource, ns: str | None, q: dict[str, str]) -> list[Obj]:
        labels = label_matcher(q.get("labelSelector", ""))
        fields = field_matcher(q.get("fieldSelector", ""), r)
        return self.store.matching(r, lambda n, o: (ns is None or n == ns)
                                   and labels(o["metadata"].get("labels") or {}) and fields(o))

    def _resume(self, cont: str) -> tuple[int, list[Obj], int, str]:
        """(resourceVersion, items, offset, token) of a `continue` token."""
        try:
            token, offset_s = base64.urlsafe_b64decode(cont.encode() + b"==").decode().split(":")
            offset = int(offset_s)
        except ValueError as e:  # as the real server answers a token it cannot decode
            raise HTTPError(400, "BadRequest", f"invalid continue token: continue key is not valid: {e}"
                            ) from e
        if token not in self._pages:
            raise HTTPError(410, "Expired", "The provided continue parameter is too old "
                            "to display a consistent list result.")
        rv, items = self._pages[token]
        return rv, items, offset, token

    def _keep(self, rv: int, items: list[Obj]) -> str:
        """Keep a snapshot for its next pages; its token."""
        token = str(next(self._page_ids))
        self._pages[token] = (rv, items)
        while len(self._pages) > _PAGES_KEPT:
            self._pages.popitem(last=False)
        return token
