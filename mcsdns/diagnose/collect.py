"""Read one cluster for `mcsdns diagnose`: reachability, the permissions of the
identity that runs the component (`identity`), served API versions, the cluster ID and the MCS objects; then,
beyond the role checked (mcsdns.kube.permissions.DIAGNOSE), the controller's Leases and
pods, the CoreDNS / NodeLocal DNSCache ConfigMaps and (best effort) WriterConflict Events.
What could not be read is named in `unread` (`unread_kinds`: the collections), so the
checks that need it are skipped.
Only GET/LIST requests, and access review creates (which change nothing)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..controller.lease import LEASE_NAMESPACES
from ..controller.writers import REASON
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import ApiError, NotFound, Rejected, explain
from ..kube.apiclient.keys import Key, key_of
from ..kube.clusterid import find_cluster_id
from ..kube.names import ABOUT_GROUP, MCS_GROUP, PREFERRED
from ..kube.permissions import Rule, show
from ..kube.resources import (
    CONFIG_MAPS,
    ENDPOINT_SLICES,
    EVENTS,
    LEASES,
    NAMESPACES,
    PODS,
    SERVICE_EXPORTS,
    SERVICE_IMPORTS,
    SERVICES,
)
from .identity import Account, Reviewer, Subject, choose

Obj = dict[str, Any]

CONTROLLER_PODS = "app.kubernetes.io/name=mcsdns,app.kubernetes.io/component=controller"  # deploy/'s
SERVER_PODS = "app.kubernetes.io/name=mcsdns,app.kubernetes.io/component=dns"  # deploy/server's
DNS_NAMESPACE = "kube-system"
DNS_CONFIGMAPS = ("coredns", "coredns-custom", "node-local-dns")  # Corefiles; AKS: imported files


@dataclass
class Snapshot:
    """What one cluster's API said; `error` set when it could not be reached at all."""

    name: str
    error: str | None = None
    version: str = ""
    checked: int = 0  # permissions asked about
    subject: Subject = Subject(None, "")  # whose
    missing: list[str] = field(default_factory=list)  # permissions the identity lacks
    missing_rules: set[tuple[str, str]] = field(default_factory=set)  # (resource, verb) of those
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
    unread_kinds: set[str] = field(default_factory=set)  # the collections among them (plurals)
    forbidden: set[str] = field(default_factory=set)  # those refused with 403
    role_kinds: set[str] = field(default_factory=set)  # the resources the checked role uses
    leases: list[Obj] = field(default_factory=list)  # in LEASE_NAMESPACES
    pods: list[Obj] = field(default_factory=list)  # the controller's, in LEASE_NAMESPACES
    server_pods: list[Obj] = field(default_factory=list)  # mcsdns serve's, in LEASE_NAMESPACES
    configmaps: dict[str, Obj | None] = field(default_factory=dict)  # DNS_CONFIGMAPS read (None: absent)
    optional_unread: dict[str, str] = field(default_factory=dict)  # DIAGNOSE reads refused -> why
    writer_events: list[Obj] = field(default_factory=list)  # WriterConflict Events (diagnose.writers)

    def read(self, *kinds: str) -> bool:
        """Whether every one of these collections was read."""
        return not self.unread_kinds.intersection(kinds)


NETWORK = re.compile(r"Failed to establish a new connection: [^'\")]+|Read timed out|"
                     r"Connection refused|Name or service not known|certificate verify failed")


def why(e: Exception) -> str:
    """One line: an API error explained (with the RBAC rule for a 403), a network error by
    its cause, else its text."""
    if isinstance(e, Rejected):
        return explain(e)
    text = " ".join(str(e).split())
    m = NETWORK.search(text)
    return m.group(0).removeprefix("Failed to establish a new connection: ") if m else text


def collect(name: str, c: Client, needs: tuple[Rule, ...], accounts: tuple[Account, ...] = (),
            given: Account | None = None) -> Snapshot:
    """Everything the checks look at in cluster `name`, read through `c`; the permissions
    `needs` of the identity `identity.choose` picks from `accounts` and `given`."""
    snap = Snapshot(name, role_kinds={resource.split("/")[0] for _, resource, _ in needs})
    try:
        snap.version = str(c.get("/version").get("gitVersion") or "")
    except ApiError as e:
        snap.error = f"{c.host}: {why(e)}"
        return snap
    reviewer = Reviewer(c, choose(c, accounts, given) if needs else Subject(None, ""))
    for group, resource, verbs in needs:
        for verb in verbs:
            snap.checked += 1
            try:
                ok = reviewer.allowed(group, resource, verb)
            except ApiError as e:
                snap.unread.append(f"{reviewer.subject.text()}'s access review: {why(e)}")
                return snap
            snap.subject = reviewer.subject
            if not ok:
                snap.missing.append(show(group, resource, verb))
                snap.missing_rules.add((resource, verb))
    snap.mcs_versions = c.versions(MCS_GROUP)
    snap.about_versions = c.versions(ABOUT_GROUP)
    _read_cluster_id(c, snap)
    snap.namespaces = {key_of(o)[1] for o in _items(c, snap, NAMESPACES.path(), "namespaces")}
    snap.services = {key_of(o): o for o in _items(c, snap, SERVICES.path(), "services")}
    snap.slices = _items(c, snap, ENDPOINT_SLICES.path(), "endpointslices")
    if snap.mcs_versions:
        v = next((v for v in PREFERRED if v in snap.mcs_versions), snap.mcs_versions[0])
        for r, into in ((SERVICE_EXPORTS, snap.exports), (SERVICE_IMPORTS, snap.imports)):
            into.update((key_of(o), o) for o in _items(c, snap, r.path(version=v), r.plural))
    _extras(c, snap)
    return snap


def _extras(c: Client, snap: Snapshot) -> None:
    """The reads of permissions.DIAGNOSE: Leases, the controller's and server's pods, the DNS ConfigMaps."""
    for ns in LEASE_NAMESPACES:
        for r, into, selector in ((LEASES, snap.leases, None), (PODS, snap.pods, CONTROLLER_PODS),
                                  (PODS, snap.server_pods, SERVER_PODS)):
            try:
                into += c.list(r.path(ns), selector)
            except ApiError as e:
                snap.optional_unread.setdefault(r.plural, why(e))
    try:  # best effort: the controller's word that another controller writes here
        snap.writer_events = c.get(EVENTS.path(), {"fieldSelector": f"reason={REASON}",
                                                   "limit": 500}).get("items") or []
    except ApiError as e:
        snap.optional_unread.setdefault(EVENTS.plural, why(e))
    for name in DNS_CONFIGMAPS:
        try:
            snap.configmaps[name] = c.get(CONFIG_MAPS.path(DNS_NAMESPACE, name))
        except NotFound:
            snap.configmaps[name] = None
        except ApiError as e:
            snap.optional_unread.setdefault(f"configmaps/{name}", why(e))


def _read_cluster_id(c: Client, snap: Snapshot) -> None:
    if not snap.about_versions:
        return
    try:
        found = find_cluster_id(c, snap.about_versions[0])
    except ApiError as e:
        snap.unread.append(f"clusterproperties: {why(e)}")
        return
    if found is not None:
        snap.cluster_property, snap.cluster_id = found


def _items(c: Client, snap: Snapshot, path: str, what: str) -> list[Obj]:
    try:
        return c.list(path)
    except ApiError as e:
        snap.unread.append(f"{what}: {why(e)}")
        snap.unread_kinds.add(what)
        if e.status == 403:
            snap.forbidden.add(what)
        return []
