"""Read one cluster for `mcsdns diagnose`: reachability, the identity's permissions
(SelfSubjectAccessReview), served API versions, the cluster ID and the MCS objects.
Only GET/LIST requests, and SelfSubjectAccessReview creates (which change nothing)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..controller.clusters import Member, NotFound, Unreachable
from ..kube.errors import RequestError, explain
from ..kube.keys import Key, key_of
from ..kube.names import ABOUT_GROUP, MCS_GROUP
from ..kube.permissions import Rule, show

Obj = dict[str, Any]
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"


@dataclass
class Snapshot:
    """What one cluster's API said; `error` set when it could not be reached at all."""

    name: str
    error: str | None = None
    version: str = ""
    checked: int = 0  # permissions asked about
    missing: list[str] = field(default_factory=list)  # permissions the identity lacks
    mcs_versions: list[str] = field(default_factory=list)
    about_versions: list[str] = field(default_factory=list)
    cluster_id: str | None = None
    cluster_property: str | None = None  # the ClusterProperty the ID came from
    namespaces: set[str] = field(default_factory=set)
    exports: dict[Key, Obj] = field(default_factory=dict)
    services: dict[Key, Obj] = field(default_factory=dict)
    imports: dict[Key, Obj] = field(default_factory=dict)
    slices: list[Obj] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # what could not be read, and why


NETWORK = re.compile(r"Failed to establish a new connection: [^'\")]+|Read timed out|"
                     r"Connection refused|Name or service not known|certificate verify failed")


def why(e: Exception) -> str:
    """One line: an API error explained (with the RBAC rule for a 403), a network error by
    its cause, else its text."""
    if isinstance(e, RequestError):
        return explain(e)
    text = " ".join(str(e).split())
    m = NETWORK.search(text)
    return m.group(0).removeprefix("Failed to establish a new connection: ") if m else text


def served_versions(m: Member, group: str) -> list[str]:
    try:
        data = m.get(f"/apis/{group}")
    except NotFound:
        return []
    return [str(v.get("version")) for v in data.get("versions") or []]


def allowed(m: Member, group: str, resource: str, verb: str) -> bool:
    """SelfSubjectAccessReview: may this kubeconfig's identity do `verb` on `resource`?"""
    res, _, sub = resource.partition("/")
    attrs = {"group": group, "resource": res, "verb": verb}
    if sub:
        attrs["subresource"] = sub
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attrs}}
    out = m.request("POST", SSAR, body=review)
    return bool((out.get("status") or {}).get("allowed"))


def collect(m: Member, needs: tuple[Rule, ...]) -> Snapshot:
    """Everything the checks look at in one cluster (`m` connected)."""
    snap = Snapshot(m.name)
    try:
        snap.version = str(m.get("/version").get("gitVersion") or "")
    except (Unreachable, RequestError) as e:
        snap.error = f"{m.api.configuration.host}: {why(e)}"
        return snap
    for group, resource, verbs in needs:
        for verb in verbs:
            snap.checked += 1
            try:
                ok = allowed(m, group, resource, verb)
            except (Unreachable, RequestError, NotFound) as e:
                snap.unread.append(f"SelfSubjectAccessReview: {why(e)}")
                return snap
            if not ok:
                snap.missing.append(show(group, resource, verb))
    snap.mcs_versions = served_versions(m, MCS_GROUP)
    snap.about_versions = served_versions(m, ABOUT_GROUP)
    _read_cluster_id(m, snap)
    snap.namespaces = {key_of(o)[1] for o in _items(m, snap, "/api/v1/namespaces", "namespaces")}
    snap.services = {key_of(o): o for o in _items(m, snap, "/api/v1/services", "services")}
    snap.slices = _items(m, snap, SLICES, "endpointslices")
    if snap.mcs_versions:
        m.mcs_version = "v1beta1" if "v1beta1" in snap.mcs_versions else snap.mcs_versions[0]
        snap.exports = {key_of(o): o for o in _items(m, snap, m.mcs_path("serviceexports"),
                                                        "serviceexports")}
        snap.imports = {key_of(o): o for o in _items(m, snap, m.mcs_path("serviceimports"),
                                                        "serviceimports")}
    return snap


def _read_cluster_id(m: Member, snap: Snapshot) -> None:
    if not snap.about_versions:
        return
    try:
        found = m.find_cluster_id(snap.about_versions[0])
    except (Unreachable, RequestError) as e:
        snap.unread.append(f"clusterproperties: {why(e)}")
        return
    if found is not None:
        snap.cluster_property, snap.cluster_id = found


def _items(m: Member, snap: Snapshot, path: str, what: str) -> list[Obj]:
    try:
        return m.items(path)
    except (Unreachable, RequestError, NotFound) as e:
        snap.unread.append(f"{what}: {why(e)}")
        return []
