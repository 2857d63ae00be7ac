"""The test API server's RBAC. Requests without a token it issued are the admin's: only
`deny()`ed (resource, verb) pairs are refused. A request bearing a TokenRequest token
(tokens) is the ServiceAccount's: 401 when the token expired or its ServiceAccount is
gone (or was made again: another uid), else authorized as kube-apiserver's RBAC authorizer
does, by the rules of the ClusterRoles and Roles bound to it (ClusterRoleBindings
cluster-wide, RoleBindings in their namespace; apiGroups, resources[/subresource], verbs,
resourceNames, "*"). Refusals are kube-apiserver's 403 `Status`; SelfSubjectAccessReviews
are answered by the same rules, and SubjectAccessReviews (create subjectaccessreviews, as
any request) about a ServiceAccount user by its bindings."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from .resources import Resource, is_watch
from .status import HTTPError, Obj

_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
SUBJECT_ACCESS_REVIEWS = Resource("subjectaccessreviews", "SubjectAccessReview", "authorization.k8s.io",
                                  ("v1",), namespaced=False, status=False, generation="")
Lookup = Callable[[str], list[Obj]]  # kind -> its stored objects


class RBAC:
    """Denied (plural, verb) pairs for the admin, RBAC objects for ServiceAccounts; `user`
    is named in the admin's 403 messages. The caller holds its lock around every call."""

    def __init__(self, objects: Lookup = lambda kind: []) -> None:
        self.user = "system:serviceaccount:mcsdns:mcsdns"
        self.denied: set[tuple[str, str]] = set()  # (plural, verb)
        self.objects = objects

    def deny(self, plural: str, verbs: Iterable[str]) -> None:
        self.denied.update((plural, v) for v in verbs)

    def allow(self) -> None:
        self.denied.clear()

    # ---- who --------------------------------------------------------------------------
    def authenticate(self, token: str, issued: dict[str, tuple[str, str, str, float]]) -> str | None:
        """The ServiceAccount user of an issued token (None: not one of ours, the admin);
        401 when it expired or its ServiceAccount is gone."""
        found = issued.get(token)
        if found is None:
            return None
        ns, name, uid, expiry = found
        sa = next((o for o in self.objects("ServiceAccount") if o["metadata"].get("namespace") == ns
                   and o["metadata"]["name"] == name), None)
        if time.time() >= expiry or sa is None or str(sa["metadata"].get("uid") or "") != uid:
            raise HTTPError(401, "Unauthorized")
        return f"system:serviceaccount:{ns}:{name}"

    # ---- what it may do ---------------------------------------------------------------
    def _role(self, ref: Obj, where: str | None) -> Obj:
        """The ClusterRole, or Role of namespace `where`, a binding refers to ({} if none)."""
        kind = str(ref.get("kind"))
        return next((o for o in self.objects(kind) if o["metadata"]["name"] == ref.get("name")
                     and (kind == "ClusterRole" or o["metadata"].get("namespace") == where)), {})

    def _rules(self, user: str, ns: str | None) -> list[Obj]:
        """The rules bound to `user` that apply in `ns` (None: cluster-wide only)."""
        subject = dict(zip(("kind", "namespace", "name"), ("ServiceAccount", *user.split(":")[2:]),
                           strict=True))
        out: list[Obj] = []
        for kind in ("ClusterRoleBinding", "RoleBinding"):
            for b in self.objects(kind):
                where = b["metadata"].get("namespace")
                subjects = [{k: s.get(k) for k in subject} for s in b.get("subjects") or []]
                if (kind == "RoleBinding" and where != ns) or subject not in subjects:
                    continue
                out += self._role(b.get("roleRef") or {}, where).get("rules") or []
        return out

    def allows(self, user: str, group: str, resource: str, verb: str, ns: str | None,
               name: str | None) -> bool:
        def has(values: list[str], v: str) -> bool:
            return "*" in values or v in values
        return any(has(r.get("apiGroups") or [], group) and has(r.get("resources") or [], resource)
                   and has(r.get("verbs") or [], verb)
                   and (not r.get("resourceNames") or (name is not None and name in r["resourceNames"]))
                   for r in self._rules(user, ns))

    def authorize(self, method: str, r: Resource, ns: str | None, name: str | None, sub: str | None,
                  q: dict[str, str], user: str | None = None) -> None:
        """kube-apiserver's 403 for a verb `user` (None: the admin) may not use."""
        if method == "GET":
            verb = "get" if name else "watch" if is_watch(q) else "list"
        else:
            verb = _VERB[method]
        res = f"{r.plural}/{sub}" if sub else r.plural
        if user is None and (r.plural, verb) not in self.denied:
            return
        if user is not None and self.allows(user, r.group, res, verb, ns, name):
            return
        what = f"{r.plural}.{r.group}" if r.group else r.plural
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        who = user or self.user
        e = HTTPError(403, "Forbidden", f'{what}{f" {json.dumps(name)}" if name else ""} is forbidden: '
                      f'User "{who}" cannot {verb} resource "{res}" in API group "{r.group}" {scope}')
        e.body["details"] = {"group": r.group, "kind": r.plural, **({"name": name} if name else {})}
        raise e

    def review_for(self, body: Any, user: str | None = None) -> Obj:
        """A SubjectAccessReview by `user` (None: the admin) about its `spec.user`."""
        self.authorize("POST", SUBJECT_ACCESS_REVIEWS, None, None, None, {}, user)
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        subject = str((spec or {}).get("user") or "")
        if not subject.startswith("system:serviceaccount:") or subject.count(":") != 3:
            raise HTTPError(422, "Invalid", "spec.user: a ServiceAccount user is all this server answers for")
        return dict(self.review(body, subject), kind="SubjectAccessReview")

    def review(self, body: Any, user: str | None = None) -> Obj:
        """A SelfSubjectAccessReview, answered by the rules `authorize` enforces."""
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        attrs = (spec or {}).get("resourceAttributes")
        if not isinstance(attrs, dict) or not attrs.get("verb") or not attrs.get("resource"):
            raise HTTPError(422, "Invalid", "spec.resourceAttributes: resource and verb are required")
        resource = str(attrs["resource"]) + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        if user is None:
            allowed = (str(attrs["resource"]), str(attrs["verb"])) not in self.denied
        else:
            allowed = self.allows(user, str(attrs.get("group") or ""), resource, str(attrs["verb"]),
                                  attrs.get("namespace"), attrs.get("name"))
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": {"allowed": allowed}}
