"""The test API server's RBAC, as far as refusing goes: denied (resource, verb) pairs answered
with kube-apiserver's 403 `Status`, and SelfSubjectAccessReviews answered by the same rules."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kube_resources import Resource, is_watch
from kube_status import HTTPError, Obj

_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class RBAC:
    """Denied (plural, verb) pairs, any group and namespace; `user` is named in 403 messages.
    The caller holds its lock around every call."""

    def __init__(self) -> None:
        self.user = "system:serviceaccount:mcsdns:mcsdns"
        self.denied: set[tuple[str, str]] = set()  # (plural, verb)

    def deny(self, plural: str, verbs: Iterable[str]) -> None:
        self.denied.update((plural, v) for v in verbs)

    def allow(self) -> None:
        self.denied.clear()

    def authorize(self, method: str, r: Resource, ns: str | None, name: str | None, sub: str | None,
                  q: dict[str, str]) -> None:
        """kube-apiserver's 403 for a denied verb."""
        if method == "GET":
            verb = "get" if name else "watch" if is_watch(q) else "list"
        else:
            verb = _VERB[method]
        if (r.plural, verb) not in self.denied:
            return
        what = f"{r.plural}.{r.group}" if r.group else r.plural
        res = f"{r.plural}/{sub}" if sub else r.plural
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        e = HTTPError(403, "Forbidden", f'{what}{f" {json.dumps(name)}" if name else ""} is forbidden: '
                      f'User "{self.user}" cannot {verb} resource "{res}" in API group "{r.group}" {scope}')
        e.body["details"] = {"group": r.group, "kind": r.plural, **({"name": name} if name else {})}
        raise e


    def review(self, body: Any) -> Obj:
        """A SelfSubjectAccessReview, answered by the rules `authorize` enforces."""
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        attrs = (spec or {}).get("resourceAttributes")
        if not isinstance(attrs, dict) or not attrs.get("verb") or not attrs.get("resource"):
            raise HTTPError(422, "Invalid", "spec.resourceAttributes: resource and verb are required")
        allowed = (str(attrs["resource"]), str(attrs["verb"])) not in self.denied
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": {"allowed": allowed}}
