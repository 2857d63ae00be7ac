"""`mcsdns leave`'s work in a member: the binding and ServiceAccount join made (its tokens
die with it), the ClusterRole when nothing else is bound to it, the namespace when join
created it; on request, every object the controller imported into the member (its
managed-by labels: ServiceImports, derived Services, EndpointSlices)."""

from __future__ import annotations

from collections.abc import Callable

from ..controller.exports import APP_MANAGED_BY, CONTROLLER, MANAGED_BY
from ..kube.client import Client
from ..kube.errors import NotFound
from ..kube.keys import key_of
from ..kube.names import MCS_GROUP
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
from .layout import BINDING, CLUSTER_ROLE, CREATED, JOIN, LEASE_ROLE, SERVICE_ACCOUNT
from .objects import remove

Say = Callable[[str], None]


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


def _gone(done: bool) -> str:
    return "deleted" if done else "not found"


def revoke(c: Client, namespace: str, say: Say, lease_namespace: str | None = None) -> None:
    """Delete what join made, in the order that cuts access first."""
    say(f"clusterrolebinding {BINDING}: {_gone(remove(c, CLUSTER_ROLE_BINDINGS, BINDING))}")
    if lease_namespace:
        for r in (ROLE_BINDINGS, ROLES):
            gone = _gone(remove(c, r, LEASE_ROLE, lease_namespace))
            say(f"{r.kind.lower()} {lease_namespace}/{LEASE_ROLE}: {gone}")
    say(f"serviceaccount {namespace}/{SERVICE_ACCOUNT} (and so its tokens): "
        f"{_gone(remove(c, SERVICE_ACCOUNTS, SERVICE_ACCOUNT, namespace))}")
    users = _role_in_use(c)
    if users:
        say(f"clusterrole {CLUSTER_ROLE}: kept (bound by {', '.join(users)})")
    else:
        say(f"clusterrole {CLUSTER_ROLE}: {_gone(remove(c, CLUSTER_ROLES, CLUSTER_ROLE))}")
    try:
        ns = c.get(NAMESPACES.path(name=namespace))
    except NotFound:
        return
    if ((ns.get("metadata") or {}).get("labels") or {}).get(CREATED) == JOIN:
        say(f"namespace {namespace} (made by join): {_gone(remove(c, NAMESPACES, namespace))}")
    else:
        say(f"namespace {namespace}: kept (not made by join)")


def purge_imports(c: Client, say: Say) -> None:
    """Delete the controller's objects in the member: what it imported there."""
    version = c.preferred(MCS_GROUP)
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
