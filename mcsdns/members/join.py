"""`mcsdns join`'s work in a member: the namespace, the ServiceAccount, the controller's
ClusterRole (mcsdns.kube.permissions.CONTROLLER, the rules diagnose checks) and its
binding, each made or brought up to date; then a TokenRequest for the ServiceAccount and
the member kubeconfig built on it. Re-running it changes nothing but the token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import NotFound
from ..kube.permissions import CONTROLLER, CONTROLLER_LEASES, policy_rules
from ..kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    NAMESPACES,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    TOKEN_REQUESTS,
)
from .kubeconfig import member_kubeconfig
from .layout import BINDING, CLUSTER_ROLE, CREATED, JOIN, LEASE_ROLE, SERVICE_ACCOUNT, labels, user
from .objects import ensure, manifest
from .record import check_join

Obj = dict[str, Any]
Say = Callable[[str], None]


class Refused(Exception):
    """The member is in a state join cannot work in; the message says what to do."""


def _namespace(c: Client, namespace: str, member: str) -> str:
    try:
        ns = c.get(NAMESPACES.path(name=namespace))
    except NotFound:
        made = manifest(NAMESPACES, namespace, labels={**labels(member), CREATED: JOIN})
        return ensure(c, NAMESPACES, made)
    if (ns.get("metadata") or {}).get("deletionTimestamp"):
        raise Refused(f"namespace {namespace} is being deleted (a leave?): run join again once it is gone, "
                      "or give another --namespace")
    return "exists"


def grant(c: Client, member: str, namespace: str, say: Say) -> None:
    """The namespace, ServiceAccount, ClusterRole and ClusterRoleBinding, made or updated,
    each labelled with `member`."""
    say(f"namespace {namespace}: {_namespace(c, namespace, member)}")
    sa = manifest(SERVICE_ACCOUNTS, SERVICE_ACCOUNT, namespace, labels(member))
    say(f"serviceaccount {namespace}/{SERVICE_ACCOUNT}: {ensure(c, SERVICE_ACCOUNTS, sa)}")
    role = manifest(CLUSTER_ROLES, CLUSTER_ROLE, labels=labels(member), rules=policy_rules(CONTROLLER))
    say(f"clusterrole {CLUSTER_ROLE}: {ensure(c, CLUSTER_ROLES, role)} "
        f"({sum(len(v) for _, _, v in CONTROLLER)} permissions, those `mcsdns diagnose` checks)")
    ref = {"apiGroup": CLUSTER_ROLES.group, "kind": CLUSTER_ROLES.kind, "name": CLUSTER_ROLE}
    subject = {"kind": SERVICE_ACCOUNTS.kind, "name": SERVICE_ACCOUNT, "namespace": namespace}
    binding = manifest(CLUSTER_ROLE_BINDINGS, BINDING, labels=labels(member), roleRef=ref, subjects=[subject])
    say(f"clusterrolebinding {BINDING}: {ensure(c, CLUSTER_ROLE_BINDINGS, binding)}")


def grant_leases(c: Client, member: str, namespace: str, lease_namespace: str, say: Say) -> None:
    """The Lease Role (permissions.CONTROLLER_LEASES) in `lease_namespace`, bound to the
    ServiceAccount: for the member that holds the controller's Leases (--lease-cluster)."""
    say(f"namespace {lease_namespace}: {_namespace(c, lease_namespace, member)}")
    role = manifest(ROLES, LEASE_ROLE, lease_namespace, labels(member), rules=policy_rules(CONTROLLER_LEASES))
    say(f"role {lease_namespace}/{LEASE_ROLE}: {ensure(c, ROLES, role)}")
    ref = {"apiGroup": ROLES.group, "kind": ROLES.kind, "name": LEASE_ROLE}
    subject = {"kind": SERVICE_ACCOUNTS.kind, "name": SERVICE_ACCOUNT, "namespace": namespace}
    binding = manifest(ROLE_BINDINGS, LEASE_ROLE, lease_namespace, labels(member), roleRef=ref,
                       subjects=[subject])
    say(f"rolebinding {lease_namespace}/{LEASE_ROLE}: {ensure(c, ROLE_BINDINGS, binding)}")


def token(c: Client, namespace: str, seconds: int) -> tuple[str, str]:
    """A TokenRequest for the ServiceAccount: (token, expirationTimestamp); the server may
    shorten the lifetime (--service-account-max-token-expiration)."""
    body = {"apiVersion": TOKEN_REQUESTS.api_version(), "kind": TOKEN_REQUESTS.kind,
            "spec": {"expirationSeconds": seconds}}
    out = c.request("POST", SERVICE_ACCOUNTS.path(namespace, SERVICE_ACCOUNT, "token"), body=body)
    status = out.get("status") or {}
    return str(status.get("token") or ""), str(status.get("expirationTimestamp") or "")


def join(c: Client, member: str, cluster: Obj, namespace: str, seconds: int, say: Say,
         lease_namespace: str | None = None) -> Obj:
    """Everything in the member (with `lease_namespace`, the Lease Role there too); its
    kubeconfig for the controller. WrongMember, before any write, when the cluster is
    joined under another name."""
    check_join(c, member, namespace)
    grant(c, member, namespace, say)
    if lease_namespace:
        grant_leases(c, member, namespace, lease_namespace, say)
    tok, expires = token(c, namespace, seconds)
    say(f"token of {user(namespace)}: expires {expires} (rotate: run join again before then)")
    return member_kubeconfig(member, cluster, SERVICE_ACCOUNT, tok)
