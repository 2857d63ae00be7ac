"""`mcsdns leave`'s work in a member: what join made for that member (labelled
`layout.MEMBER`), and nothing else: the binding and ServiceAccount (its tokens die with
it), the lease Roles and RoleBindings, the ClusterRole when nothing else is bound to it,
the admission policy and its binding, and each namespace join made once it holds nothing
else; on request, every object the controller imported into the member (its managed-by
labels: ServiceImports, derived Services, EndpointSlices). `record.check_leave` has
checked the member name first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..controller.exports import APP_MANAGED_BY, CONTROLLER, MANAGED_BY
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import NotFound
from ..kube.apiclient.keys import key_of
from ..kube.names import MCS_GROUP, PREFERRED
from ..kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    ENDPOINT_SLICES,
    NAMESPACES,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    SERVICE_IMPORTS,
    SERVICES,
    Resource,
)
from .admission import BINDINGS, POLICIES
from .admission import MEMBER as POLICY
from .contents import held
from .layout import BINDING, CLUSTER_ROLE, CREATED, JOIN, MEMBER, OLD_LEASE_ROLE, READER, SERVICE_ACCOUNT
from .record import made_namespaces, member_of

Say = Callable[[str], None]
Obj = dict[str, Any]


def _role_in_use(c: Client) -> list[str]:
    """The bindings (other than join's) that refer to the ClusterRole."""
    out = []
    for r in (CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS):
        for b in c.list(r.path()):
            ref = b.get("roleRef") or {}
            ns, name = key_of(b)
            if ref.get("kind") == CLUSTER_ROLES.kind and ref.get("name") == CLUSTER_ROLE \
                    and not (r is CLUSTER_ROLE_BINDINGS and name == BINDING):
                out.append(f"{r.kind.lower()} {ns + '/' if ns else ''}{name}")
    return out


def _delete(c: Client, r: Resource, obj: Obj) -> str:
    """Delete this very object (its uid a precondition): "deleted", or "not found"."""
    ns, name = key_of(obj)
    opts = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": obj["metadata"].get("uid")}}
    try:
        c.request("DELETE", r.path(ns or None, name), body=opts)
    except NotFound:
        return "not found"
    return "deleted"


def _owner(obj: Obj) -> str:
    owner = member_of(obj)
    return f"made by join for {owner}" if owner else "no member name: see --force"


class Leave:
    """Removes what join made for `member`; with `force`, also join's objects that record
    no member name (an older join's)."""

    def __init__(self, c: Client, member: str, say: Say, force: bool = False) -> None:
        self.c, self.member, self.say, self.force = c, member, say, force

    def ours(self, obj: Obj) -> bool:
        name = member_of(obj)
        return name == self.member or (self.force and name is None)

    def fixed(self, r: Resource, name: str, namespace: str | None = None, line: str = "") -> Obj | None:
        """Join's object of this name, when ours: deleted (and returned)."""
        what = f"{r.kind.lower()} {namespace + '/' if namespace else ''}{name}{line}"
        try:
            obj: Obj = self.c.get(r.path(namespace, name))
        except NotFound:
            self.say(f"{what}: not found")
            return None
        if not self.ours(obj):
            self.say(f"{what}: kept ({_owner(obj)})")
            return None
        self.say(f"{what}: {_delete(self.c, r, obj)}")
        return obj

    def leases(self, lease_namespace: str | None) -> None:
        """The lease RoleBindings and Roles labelled ours, anywhere; with `force`, those
        join named OLD_LEASE_ROLE in `lease_namespace` when bound to join's account alone."""
        for r in (ROLE_BINDINGS, ROLES):
            for obj in self.c.list(r.path(), f"{MEMBER}={self.member}"):
                ns, name = key_of(obj)
                self.say(f"{r.kind.lower()} {ns}/{name}: {_delete(self.c, r, obj)}")
        if not (self.force and lease_namespace):
            return
        for r in (ROLE_BINDINGS, ROLES):
            try:
                obj = self.c.get(r.path(lease_namespace, OLD_LEASE_ROLE))
            except NotFound:
                continue
            subjects = [(s.get("kind"), s.get("name")) for s in obj.get("subjects") or []]
            if r is ROLE_BINDINGS and subjects != [(SERVICE_ACCOUNTS.kind, SERVICE_ACCOUNT)]:
                self.say(f"rolebinding {lease_namespace}/{OLD_LEASE_ROLE}: kept (binds {subjects})")
                return  # and its Role with it
            self.say(f"{r.kind.lower()} {lease_namespace}/{OLD_LEASE_ROLE}: {_delete(self.c, r, obj)}")

    def cluster_role(self) -> None:
        users = _role_in_use(self.c)
        if users:
            self.say(f"clusterrole {CLUSTER_ROLE}: kept (bound by {', '.join(users)})")
        else:
            self.fixed(CLUSTER_ROLES, CLUSTER_ROLE)

    def reader(self, namespace: str) -> None:
        """join --read-only's binding, ServiceAccount and ClusterRole, when it made them."""
        try:
            self.c.get(CLUSTER_ROLE_BINDINGS.path(name=READER))
        except NotFound:
            return
        if self.fixed(CLUSTER_ROLE_BINDINGS, READER) is not None:
            self.fixed(SERVICE_ACCOUNTS, READER, namespace, " (and so its tokens)")
            self.fixed(CLUSTER_ROLES, READER)

    def namespaces(self, *named: str | None) -> None:
        """Each namespace join made for the member (with `force`, also `named` ones join made
        without a member name), deleted when it holds nothing join did not make."""
        made = made_namespaces(self.c, self.member)
        for ns in dict.fromkeys([*made, *(n for n in named if n)]):
            try:
                obj = self.c.get(NAMESPACES.path(name=ns))
            except NotFound:
                continue
            if ((obj.get("metadata") or {}).get("labels") or {}).get(CREATED) != JOIN:
                self.say(f"namespace {ns}: kept (not made by join)")
                continue
            if not self.ours(obj):
                self.say(f"namespace {ns}: kept ({_owner(obj)})")
                continue
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                self.say(f"namespace {ns} (made by join): being deleted")
                continue
            others = held(self.c, ns, lambda o: member_of(o) == self.member)  # not --force's: the Secret
            if others:
                self.say(f"namespace {ns}: kept (holds {', '.join(others)})")
            else:
                self.say(f"namespace {ns} (made by join): {_delete(self.c, NAMESPACES, obj)}")


def revoke(c: Client, member: str, namespace: str, say: Say, lease_namespace: str | None = None,
           force: bool = False, then: Callable[[], None] | None = None) -> None:
    """Delete what join made for `member`, in the order that cuts access first; `then` runs
    once the controller's access is gone, before join's namespaces (one may hold the Lease)."""
    lv = Leave(c, member, say, force)
    binding = lv.fixed(CLUSTER_ROLE_BINDINGS, BINDING)
    lv.leases(lease_namespace)
    accounts = [namespace, *(s.get("namespace") for s in (binding or {}).get("subjects") or []
                             if s.get("kind") == SERVICE_ACCOUNTS.kind and s.get("name") == SERVICE_ACCOUNT)]
    for ns in dict.fromkeys(a for a in accounts if a):  # the binding names join's --namespace
        lv.fixed(SERVICE_ACCOUNTS, SERVICE_ACCOUNT, ns, " (and so its tokens)")
    lv.cluster_role()
    lv.reader(namespace)
    for r in (BINDINGS, POLICIES):  # the limit goes once the access it limits is gone
        lv.fixed(r, POLICY)
    if then is not None:
        then()
    lv.namespaces(*accounts, lease_namespace)


def purge_imports(c: Client, say: Say) -> None:
    """Delete the controller's objects in the member: what it imported there."""
    version = c.preferred(MCS_GROUP, PREFERRED)
    kinds: list[tuple[Resource, str, str | None]] = [
        (ENDPOINT_SLICES, MANAGED_BY, None), (SERVICES, APP_MANAGED_BY, None)]
    if version is not None:
        kinds.insert(0, (SERVICE_IMPORTS, APP_MANAGED_BY, version))
    for r, label, v in kinds:
        n = 0
        for obj in c.list(r.path(version=v), f"{label}={CONTROLLER}"):
            ns, name = key_of(obj)
            try:
                c.request("DELETE", r.path(ns, name, version=v))
                n += 1
            except NotFound:
                pass
        say(f"{r.plural} imported by the controller: {n} deleted")
