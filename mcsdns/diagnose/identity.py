"""Whose permissions `mcsdns diagnose` checks in a cluster: the identity that runs the
component there, not the person running diagnose. `--service-account NS/NAME` names it;
else the first ServiceAccount of deploy/ (or `mcsdns join`) that exists in the cluster:
`mcsdns serve`'s, or the controller's (its own in its cluster, the joined one in a member).
It is asked with SubjectAccessReviews (user system:serviceaccount:NS:NAME and its groups,
as the API server authenticates its tokens). A member read through its member file (the
members Secret or directory) is read with the controller's own credential: that caller is
asked, with SelfSubjectAccessReviews, as is the caller when no such ServiceAccount exists
or when the caller may not create SubjectAccessReviews (the report says which)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import ApiError, NotFound, Rejected
from ..kube.resources import ACCESS_REVIEWS, SERVICE_ACCOUNTS, SUBJECT_ACCESS_REVIEWS
from ..members import layout

Account = tuple[str, str]  # (namespace, name)

SERVER: tuple[Account, ...] = (("mcsdns-system", "mcsdns"),)  # deploy/server/rbac.yaml
CONTROLLER: tuple[Account, ...] = (
    ("mcsdns-system", "mcsdns-controller"),  # deploy/controller/rbac.yaml: the controller's own cluster
    (layout.NAMESPACE, layout.SERVICE_ACCOUNT),  # `mcsdns join`'s, in a member
)


@dataclass(frozen=True)
class Subject:
    """Whom the reviews ask about: a ServiceAccount, or the caller (None); `how` it was chosen."""

    account: Account | None
    how: str

    def text(self) -> str:
        return f"ServiceAccount {self.account[0]}/{self.account[1]}" if self.account else "this identity"

    def about(self) -> str:
        """Whose permissions were checked, and why them."""
        return f"{self.text()} ({self.how})" if self.account else self.how


def choose(c: Client, candidates: tuple[Account, ...], given: Account | None) -> Subject:
    """`given` (--service-account) as is; else the first of `candidates` that exists in the
    cluster; else the caller."""
    if given is not None:
        return Subject(given, "--service-account")
    for ns, name in candidates:
        try:
            c.get(SERVICE_ACCOUNTS.path(ns, name))
            return Subject((ns, name), "deploy/'s")
        except NotFound:
            continue
        except ApiError:
            break  # may not read ServiceAccounts: the caller it is
    if not candidates:
        return Subject(None, "the controller's own credential for this member")
    names = " or ".join(f"{ns}/{name}" for ns, name in candidates)
    return Subject(None, f"the caller: no ServiceAccount {names} here; --service-account names one")


class Reviewer:
    """Asks the API server whether the subject may do something; falls back to the caller
    (`subject` then says so) when the caller may not create SubjectAccessReviews."""

    def __init__(self, c: Client, subject: Subject) -> None:
        self.c, self.subject = c, subject

    def allowed(self, group: str, resource: str, verb: str) -> bool:
        res, _, sub = resource.partition("/")
        attrs = {"group": group, "resource": res, "verb": verb}
        if sub:
            attrs["subresource"] = sub
        account = self.subject.account
        if account is not None:
            ns, name = account
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
            user = f"system:serviceaccount:{ns}:{name}"
            spec = {"resourceAttributes": attrs, "user": user, "groups": groups}
            try:
                return self._post(SUBJECT_ACCESS_REVIEWS.path(), SUBJECT_ACCESS_REVIEWS.kind, spec)
            except Rejected as e:
                if e.status != 403:
                    raise
                self.subject = Subject(None, f"the caller: it may not create subjectaccessreviews, so "
                                             f"{self.subject.text()} is not checked")
        return self._post(ACCESS_REVIEWS.path(), ACCESS_REVIEWS.kind, {"resourceAttributes": attrs})

    def _post(self, path: str, kind: str, spec: Mapping[str, object]) -> bool:
        review = {"apiVersion": ACCESS_REVIEWS.api_version(), "kind": kind, "spec": spec}
        out = self.c.request("POST", path, body=review)
        return bool(((out or {}).get("status") or {}).get("allowed"))
