"""Which member a cluster was joined as: the label `layout.MEMBER` join puts on what it
makes, read before join or leave writes anything. A cluster is joined under one name at a
time (join's ServiceAccount and ClusterRoleBinding have fixed names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import NotFound
from ..kube.resources import CLUSTER_ROLE_BINDINGS, NAMESPACES, ROLE_BINDINGS, ROLES, SERVICE_ACCOUNTS
from .layout import BINDING, CREATED, JOIN, MEMBER, READER, SERVICE_ACCOUNT

Obj = dict[str, Any]


class WrongMember(Exception):
    """The cluster was joined under another name, or not at all: nothing was changed (exit 2)."""


@dataclass
class Found:
    """Join's objects in a member: the names they record, and those that record none
    (made by an older join) as "kind name"."""

    members: set[str] = field(default_factory=set)
    unrecorded: list[str] = field(default_factory=list)


def member_of(obj: Obj) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(MEMBER)


def _get(c: Client, path: str) -> Obj | None:
    try:
        out: Obj = c.get(path)
    except NotFound:
        return None
    return out


def read(c: Client, namespace: str) -> Found:
    """Join's ServiceAccounts (in `namespace`: the controller's and the reader's), their
    ClusterRoleBindings and the lease Roles and RoleBindings it labelled, anywhere."""
    out = Found()
    for what, path in ((f"serviceaccount {namespace}/{SERVICE_ACCOUNT}",
                        SERVICE_ACCOUNTS.path(namespace, SERVICE_ACCOUNT)),
                       (f"clusterrolebinding {BINDING}", CLUSTER_ROLE_BINDINGS.path(name=BINDING)),
                       (f"serviceaccount {namespace}/{READER}", SERVICE_ACCOUNTS.path(namespace, READER)),
                       (f"clusterrolebinding {READER}", CLUSTER_ROLE_BINDINGS.path(name=READER))):
        obj = _get(c, path)
        if obj is not None:
            name = member_of(obj)
            if name is None:
                out.unrecorded.append(what)
            else:
                out.members.add(name)
    for r in (ROLES, ROLE_BINDINGS):
        out.members.update(str(member_of(o)) for o in c.list(r.path(), MEMBER))
    return out


def made_namespaces(c: Client, member: str) -> list[str]:
    """The namespaces join made for `member`."""
    made = c.list(NAMESPACES.path(), f"{CREATED}={JOIN},{MEMBER}={member}")
    return [str(ns["metadata"]["name"]) for ns in made]


def check_join(c: Client, member: str, namespace: str) -> None:
    """WrongMember when the cluster is joined under another name."""
    others = sorted(read(c, namespace).members - {member})
    if others:
        raise WrongMember(f"this cluster is joined as {others[0]}: run `mcsdns leave {others[0]}` first "
                          f"(or join it again as {others[0]}); nothing changed")


def check_leave(c: Client, member: str, namespace: str, force: bool) -> None:
    """WrongMember unless join's objects record `member`: when they record another name,
    none (an older join: allowed with `force`), or there are none."""
    found = read(c, namespace)
    others = sorted(found.members - {member})
    if others:
        raise WrongMember(f"this cluster was joined as {others[0]}, not {member}: nothing deleted "
                          f"(`mcsdns leave {others[0]}` removes it)")
    if member in found.members or made_namespaces(c, member):
        return
    if found.unrecorded and not force:
        raise WrongMember(f"{' and '.join(found.unrecorded)} record no member name (made by an older "
                          f"mcsdns join): nothing deleted; give --force to remove them as {member}'s")
    if not found.unrecorded:
        raise WrongMember(f"not joined to this cluster (no serviceaccount {namespace}/{SERVICE_ACCOUNT}, "
                          f"no clusterrolebinding {BINDING} of join's): nothing deleted")
