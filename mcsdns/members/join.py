"""`mcsdns join`'s work in a member: the namespace, the ServiceAccount, the controller's
ClusterRole (mcsdns.kube.permissions.CONTROLLER, the rules diagnose checks) and its
binding, each made or brought up to date; then a TokenRequest for the ServiceAccount and
the member kubeconfig built on it. Re-running it changes nothing but the token. With
`read_only`, a ServiceAccount, ClusterRole (permissions.READER) and binding `mcsdns-reader`
instead: the credential `controller --local` reads another member with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import NotFound
from ..kube.permissions import CONTROLLER, CONTROLLER_LEASES, READER, Rule, policy_rules
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
from .layout import READER as READER_NAME
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


def grant(c: Client, member: str, namespace: str, say: Say, read_only: bool = False) -> None:
    """The namespace, ServiceAccount, ClusterRole and ClusterRoleBinding, made or updated,
    each labelled with `member` (`read_only`: the reader's)."""
    account, role_name, binding_name, rules, what = (
        (READER_NAME, READER_NAME, READER_NAME, READER, "read only: get, list, watch")
        if read_only else (SERVICE_ACCOUNT, CLUSTER_ROLE, BINDING, CONTROLLER,
                           "those `mcsdns diagnose` checks"))
    say(f"namespace {namespace}: {_namespace(c, namespace, member)}")
    sa = manifest(SERVICE_ACCOUNTS, account, namespace, labels(member))
    say(f"serviceaccount {namespace}/{account}: {ensure(c, SERVICE_ACCOUNTS, sa)}")
    role = manifest(CLUSTER_ROLES, role_name, labels=labels(member), rules=policy_rules(rules))
    say(f"clusterrole {role_name}: {ensure(c, CLUSTER_ROLES, role)} ({_count(rules)} permissions, {what})")
    ref = {"apiGroup": CLUSTER_ROLES.group, "kind": CLUSTER_ROLES.kind, "name": role_name}
    subject = {"kind": SERVICE_ACCOUNTS.kind, "name": account, "namespace": namespace}
    binding = manifest(CLUSTER_ROLE_BINDINGS, binding_name, labels=labels(member), roleRef=ref,
                       subjects=[subject])
    say(f"clusterrolebinding {binding_name}: {ensure(c, CLUSTER_ROLE_BINDINGS, binding)}")


def _count(rules: tuple[Rule, ...]) -> int:
    return sum(len(v) for _, _, v in rules)


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


def token(c: Client, namespace: str, seconds: int, account: str = SERVICE_ACCOUNT) -> tuple[str, str]:
    """A TokenRequest for the ServiceAccount: (token, expirationTimestamp); the server may
    shorten the lifetime (--service-account-max-token-expiration)."""
    body = {"apiVersion": TOKEN_REQUESTS.api_version(), "kind": TOKEN_REQUESTS.kind,
            "spec": {"expirationSeconds": seconds}}
    out = c.request("POST", SERVICE_ACCOUNTS.path(namespace, account, "token"), body=body)
    status = out.get("status") or {}
    return str(status.get("token") or ""), str(status.get("expirationTimestamp") or "")


def join(c: Client, member: str, cluster: Obj, namespace: str, seconds: int, say: Say,
         lease_namespace: str | None = None, read_only: bool = False) -> Obj:
    """Everything in the member (with `lease_namespace`, the Lease Role there too; with
    `read_only`, the reader's account and role); its kubeconfig for the controller.
    WrongMember, before any write, when the cluster is joined under another name."""
    check_join(c, member, namespace)
    grant(c, member, namespace, say, read_only)
    if lease_namespace:
        grant_leases(c, member, namespace, lease_namespace, say)
    account = READER_NAME if read_only else SERVICE_ACCOUNT
    tok, expires = token(c, namespace, seconds, account)
    say(f"token of {user(namespace, account)}: expires {expires} (rotate: run join again before then)")
    return member_kubeconfig(member, cluster, account, tok)
