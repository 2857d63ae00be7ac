"""The ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30)
that narrows what the controller's identity may write, beyond what RBAC can say: Services,
EndpointSlices and ServiceImports only when they carry the controller's managed-by label
(before and after the write), Services only of the derived shape (a selectorless ClusterIP
Service named `derived-<hash>`, no externalIPs), EndpointSlices routed by kube-proxy only to
such a Service, Events only about ServiceExports and the member Leases (`mcsdns-member-*`, where
the controller tells a member's reachability). `mcsdns join` installs it for the member
ServiceAccount (`guard`), labelled for the member, and `mcsdns leave` removes it as the rest
of what join made (`leave.revoke`); deploy/controller ships it
for the controller's own ServiceAccount (a test holds the YAML equal to `objects`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..controller.exports import APP_MANAGED_BY, CONTROLLER, MANAGED_BY, SERVICE_NAME
from ..controller.lease import MemberLeases
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import NotFound
from ..kube.resources import ENDPOINT_SLICES, EVENTS, SERVICE_IMPORTS, SERVICES, Resource
from .layout import PART_OF, labels, user
from .objects import ensure, manifest

Obj = dict[str, Any]
Say = Callable[[str], None]

GROUP = "admissionregistration.k8s.io"
POLICIES = Resource(GROUP, "validatingadmissionpolicies", "ValidatingAdmissionPolicy", namespaced=False,
                    version="v1")
BINDINGS = Resource(GROUP, "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding",
                    namespaced=False, version="v1")
MEMBER = "mcsdns-member"  # the policy and its binding in a member, for join's ServiceAccount
DERIVED = "^derived-[0-9a-v]{10}$"  # controller.kinds.derivedservice.derived_name (a test holds them equal)

_KIND = "request.resource.resource"
LEASE_PREFIX = MemberLeases.PREFIX
_LABELLED = ("{o} != null && has({o}.metadata.labels) && variables.label in {o}.metadata.labels"
             " && {o}.metadata.labels[variables.label] == '" + CONTROLLER + "'")
_ABOUT_EXPORT = ("{o} == null || (has({o}.involvedObject.kind) && ("
                 "{o}.involvedObject.kind == 'ServiceExport' || "
                 "({o}.involvedObject.kind == 'Lease' && has({o}.involvedObject.name) && "
                 "{o}.involvedObject.name.startsWith('" + LEASE_PREFIX + "'))))")


def _rule(r: Resource, operations: list[str], *subresources: str) -> Obj:
    return {"apiGroups": [r.group], "apiVersions": ["*"], "operations": list(operations),
            "resources": [r.plural, *(f"{r.plural}/{s}" for s in subresources)], "scope": "*"}


def _check(expression: str, message: str) -> Obj:
    return {"expression": expression, "messageExpression": message}


def policy(name: str, users: list[str], tags: dict[str, str] = PART_OF) -> Obj:
    """The policy `name`, applied to the requests of `users` (user names) only; the API's
    defaults spelled out, so a second join finds it unchanged."""
    writes = ["CREATE", "UPDATE", "DELETE"]
    events = f"{_KIND} == '{EVENTS.plural}'"
    who = "'mcsdns: ' + request.userInfo.username + ' may "
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
            "resourceRules": [_rule(SERVICES, writes), _rule(ENDPOINT_SLICES, writes),
                              _rule(SERVICE_IMPORTS, writes, "status"), _rule(EVENTS, ["CREATE", "UPDATE"])]},
        "matchConditions": [{"name": "controller-identity",
                             "expression": f"request.userInfo.username in {users!r}"}],
        "variables": [
            {"name": "label", "expression": f"{_KIND} == '{ENDPOINT_SLICES.plural}' ? '{MANAGED_BY}' "
                                            f": '{APP_MANAGED_BY}'"},
            {"name": "ours", "expression": _LABELLED.format(o="object")},
            {"name": "wasOurs", "expression": _LABELLED.format(o="oldObject")}],
        "validations": [
            _check(f"{events} || request.operation == 'DELETE' || variables.ours",
                   f"{who}write only objects labelled ' + variables.label + '={CONTROLLER}'"),
            _check(f"{events} || request.operation == 'CREATE' || variables.wasOurs",
                   f"{who}change or delete only objects labelled ' + variables.label + '={CONTROLLER}'"),
            _check(f"{_KIND} != '{SERVICES.plural}' || request.operation == 'DELETE' || ("
                   f"object.metadata.name.matches('{DERIVED}') && !has(object.spec.selector) && "
                   "!has(object.spec.externalIPs) && "
                   "(!has(object.spec.type) || object.spec.type == 'ClusterIP'))",
                   f"{who}write only derived Services: selectorless, ClusterIP, no externalIPs, named "
                   f"{DERIVED}'"),
            _check(f"{_KIND} != '{ENDPOINT_SLICES.plural}' || request.operation == 'DELETE' || "
                   f"!has(object.metadata.labels) || !('{SERVICE_NAME}' in object.metadata.labels) || "
                   f"object.metadata.labels['{SERVICE_NAME}'].matches('{DERIVED}')",
                   f"{who}label EndpointSlices {SERVICE_NAME} only with a derived Service name'"),
            _check(f"!({events}) || (({_ABOUT_EXPORT.format(o='object')}) && "
                   f"({_ABOUT_EXPORT.format(o='oldObject')}))",
                   f"{who}write only Events about ServiceExports and member Leases'"),
        ]}
    return manifest(POLICIES, name, labels=tags, spec=spec)


def binding(name: str, tags: dict[str, str] = PART_OF) -> Obj:
    """The binding of policy `name`: every namespace, denying what it refuses."""
    return manifest(BINDINGS, name, labels=tags, spec={"policyName": name, "validationActions": ["Deny"]})


def objects(name: str, users: list[str], tags: dict[str, str] = PART_OF) -> list[Obj]:
    return [policy(name, users, tags), binding(name, tags)]


def served(c: Client) -> bool:
    """Whether the API server serves ValidatingAdmissionPolicies (Kubernetes 1.30+)."""
    try:
        found = c.get(f"/apis/{GROUP}/{POLICIES.version}")
    except NotFound:
        return False
    return any(r.get("name") == POLICIES.plural for r in found.get("resources") or [])


def guard(c: Client, namespace: str, member: str, say: Say) -> None:
    """The policy and binding for join's ServiceAccount in `namespace`, labelled for `member`,
    made or updated; said and skipped when the API server serves no ValidatingAdmissionPolicy."""
    if not served(c):
        say(f"{POLICIES.kind.lower()} {MEMBER}: NOT installed: the API server serves no "
            f"{POLICIES.plural}.{GROUP}/v1 (Kubernetes 1.30+); the member's token is limited by RBAC alone")
        return
    for obj, r in zip(objects(MEMBER, [user(namespace)], labels(member)), (POLICIES, BINDINGS), strict=True):
        say(f"{r.kind.lower()} {MEMBER}: {ensure(c, r, obj)}")

