"""What `mcsdns leave` marks or cleans once the member is out: each ServiceExport of the
member gets Ready=False, reason MemberLeft (nothing reads the member any more, so its last
Ready=True would stay), and the member's Lease `mcsdns-member-NAME` (the Endpoint TTL clock,
in the cluster that holds the controller's Leases) is deleted. `check` asks both clusters
first (SelfSubjectAccessReviews) whether the caller may do it, so that a refusal stops leave
before anything is deleted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..controller.kinds.serviceexport import ServiceExport, now_rfc3339
from ..controller.lease import member_lease
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import ApiError, Conflict, NotFound
from ..kube.apiclient.keys import key_of
from ..kube.names import MCS_GROUP, PREFERRED
from ..kube.permissions import show
from ..kube.resources import ACCESS_REVIEWS, LEASES, SERVICE_EXPORTS, Resource

Say = Callable[[str], None]
Obj = dict[str, Any]

LEFT = "MemberLeft"  # the Ready condition's reason
TRIES = 3  # writes of one export's status when another writer's change conflicts


class Denied(Exception):
    """The caller may not do one of these writes: its one line names the permission."""


@dataclass(frozen=True)
class Ask:
    """A write the caller must be allowed, in the cluster `where` names."""

    where: str
    resource: Resource
    verb: str
    namespace: str | None = None
    subresource: str = ""

    def text(self) -> str:
        what = show(self.resource.group, self.resource.plural + (f"/{self.subresource}" if self.subresource
                                                                  else ""), self.verb)
        return f"{what} in {f'namespace {self.namespace}' if self.namespace else 'every namespace'}"


def check(c: Client, asks: Sequence[Ask]) -> None:
    """Denied for the first of `asks` the API server says the caller may not do (a server
    that will not answer the review leaves the write itself to say so)."""
    for a in asks:
        attrs = {"group": a.resource.group, "resource": a.resource.plural, "verb": a.verb}
        if a.subresource:
            attrs["subresource"] = a.subresource
        if a.namespace:
            attrs["namespace"] = a.namespace
        review = {"apiVersion": ACCESS_REVIEWS.api_version(), "kind": ACCESS_REVIEWS.kind,
                  "spec": {"resourceAttributes": attrs}}
        try:
            out = c.request("POST", ACCESS_REVIEWS.path(), body=review)
        except ApiError:
            return
        if not ((out or {}).get("status") or {}).get("allowed"):
            raise Denied(f"may not {a.text()} of {a.where}: nothing deleted")


def exports_ask(where: str) -> Ask:
    return Ask(where, SERVICE_EXPORTS, "update", subresource="status")


def lease_asks(where: str, namespaces: Sequence[str]) -> list[Ask]:
    return [Ask(where, LEASES, "delete", ns) for ns in namespaces]


def _left(obj: Obj, member: str, at: str, api_version: str) -> Obj:
    """`obj` with Ready=False (MemberLeft); Valid kept as it is, Conflict dropped (there is
    no clusterset left to conflict with)."""
    gen = (obj.get("metadata") or {}).get("generation")
    ready: Obj = {"type": "Ready", "status": "False", "reason": LEFT, "lastTransitionTime": at,
                  "message": f"Member {member} left the clusterset at {at} (mcsdns leave): "
                             "this service is no longer exported."}
    if gen is not None:
        ready["observedGeneration"] = gen
    valid = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Valid"]
    want = {"apiVersion": api_version, "status": {"conditions": [*valid, ready]}}
    return ServiceExport().merge(obj, want)


def mark_exports(c: Client, member: str, say: Say) -> None:
    """Ready=False, reason MemberLeft, on each ServiceExport of the member."""
    version = c.preferred(MCS_GROUP, PREFERRED)
    if version is None:
        say("serviceexports: none (the MCS API is not served)")
        return
    at, n = now_rfc3339(), 0
    for obj in c.list(SERVICE_EXPORTS.path(version=version)):
        ns, name = key_of(obj)
        path = SERVICE_EXPORTS.path(ns, name, "status", version=version)
        for _ in range(TRIES):
            try:
                c.request("PUT", path, body=_left(obj, member, at, f"{MCS_GROUP}/{version}"))
                n += 1
                break
            except NotFound:
                break
            except Conflict:
                try:
                    obj = c.get(SERVICE_EXPORTS.path(ns, name, version=version))
                except NotFound:
                    break
        else:
            say(f"serviceexport {ns}/{name}: not marked (changed under each of {TRIES} writes)")
    say(f"serviceexports marked Ready=False ({LEFT}): {n}")


def drop_lease(c: Client, member: str, namespaces: Sequence[str], say: Say) -> None:
    """Delete the member's Lease in each of `namespaces` that holds it."""
    name, found = member_lease(member), False
    for ns in namespaces:
        try:
            c.request("DELETE", LEASES.path(ns, name))
        except NotFound:
            continue
        found = True
        say(f"lease {ns}/{name}: deleted")
    if not found:
        say(f"lease {name}: not found in namespace {' or '.join(namespaces)} (nothing to delete)")
