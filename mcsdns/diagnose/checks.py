"""The checks of `mcsdns diagnose`: pure functions from cluster snapshots to Results."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..controller.exports import is_ours, labels
from ..controller.informers import slice_index
from ..controller.kinds.derivedservice import DERIVED_ANNOTATION, cluster_ips, derived_name
from ..data.objects import EndpointSlice, Malformed, ServiceImport
from ..kube.apiclient.keys import Key
from ..kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, valid_cluster_id
from ..zone.leftout import LeftOut
from ..zone.records import service_records
from .collect import Snapshot

Obj = dict[str, Any]
OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Result:
    """One line of the report."""

    status: str  # OK, WARN or FAIL
    check: str
    cluster: str
    subject: str  # "" for the cluster itself, else namespace/name or a DNS name
    message: str


def cluster_checks(s: Snapshot, role: str, fix: str = "bind the ClusterRole of deploy/ to it"
                   ) -> Iterator[Result]:
    """API reachable, the identity's permissions (those of `role`; `fix` says how to grant
    them), CRDs, cluster ID."""
    if s.error is not None:
        yield Result(FAIL, "api", s.name, "", f"unreachable: {s.error}; check the kubeconfig's server "
                                               "address and credentials")
        return
    yield Result(OK, "api", s.name, "", f"reachable ({s.version})")
    refused = sorted(k for k in s.unread_kinds if (k, "list") in s.missing_rules)
    skipped = f"; skipped the checks that need {', '.join(refused)}" if refused else ""
    if s.missing:
        yield Result(FAIL, "permissions", s.name, "",
                     f"{s.subject.text()} lacks {len(s.missing)} of the {s.checked} permissions {role} "
                     f"needs: {', '.join(s.missing)}; {fix}{skipped}"
                     + ("" if s.subject.account else f" (checked for {s.subject.about()})"))
    elif s.checked:
        yield Result(OK, "permissions", s.name, "", f"all {s.checked} permissions {role} needs, checked for "
                     f"{s.subject.about()}")
    yield from _reads(s, role, refused)
    if not s.mcs_versions:
        yield Result(FAIL, "crds", s.name, "", "multicluster.x-k8s.io is not served: install the "
                                               "ServiceExport and ServiceImport CRDs (deploy/crds)")
    else:
        about = ", about.k8s.io " + "/".join(s.about_versions) if s.about_versions else ""
        yield Result(OK, "crds", s.name, "", f"multicluster.x-k8s.io {'/'.join(s.mcs_versions)}{about}")
    if not s.about_versions:
        yield Result(FAIL, "cluster-id", s.name, "", "about.k8s.io is not served: install the "
                                                     "ClusterProperty CRD (deploy/crds) and set the ID")
    elif s.cluster_id is None:
        yield Result(FAIL, "cluster-id", s.name, "", "no ClusterProperty cluster.clusterset.k8s.io or "
                                                     "id.k8s.io: create one naming this cluster")
    elif not valid_cluster_id(s.cluster_id):
        yield Result(FAIL, "cluster-id", s.name, "",
                     f"ClusterProperty {s.cluster_property} value {s.cluster_id!r} is not a valid cluster "
                     "ID (a DNS label, or two joined by a dot)")
    else:
        yield Result(OK, "cluster-id", s.name, "", f"{s.cluster_id} ({s.cluster_property})")


def _reads(s: Snapshot, role: str, explained: list[str]) -> Iterator[Result]:
    """A FAIL per read that failed, but those the permissions line `explained`; reads the
    role does not need, refused to this identity, are one WARN (it may lack them by design)."""
    beyond = sorted(k for k in s.forbidden if k not in s.role_kinds)
    for what in s.unread:
        kind = what.split(":")[0]
        if kind not in explained and kind not in beyond:
            yield Result(FAIL, "read", s.name, "", f"cannot read {what}; skipped the checks that need it")
    if beyond:
        yield Result(WARN, "read", s.name, "", f"this identity may not list {', '.join(beyond)} ({role} does "
                     "not need to): skipped the checks that need them")


def unique_ids(snaps: list[Snapshot]) -> Iterator[Result]:
    """Two members with one cluster ID would merge each other's endpoints."""
    by_id: dict[str, list[str]] = {}
    for s in snaps:
        if s.cluster_id:
            by_id.setdefault(s.cluster_id, []).append(s.name)
    for cid, names in sorted(by_id.items()):
        if len(names) > 1:
            for n in names:
                yield Result(FAIL, "cluster-id", n, "", f"{cid} is also the ID of "
                             f"{', '.join(x for x in names if x != n)}: each member needs its own")


def _ready_addresses(slices: Iterable[Obj]) -> set[str]:
    return {a for s in slices for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready") is not False for a in e.get("addresses") or []}


def _conditions(se: Obj) -> dict[str, Obj]:
    return {str(c.get("type")): c for c in (se.get("status") or {}).get("conditions") or []}


def _show(addrs: Iterable[str]) -> str:
    return ", ".join(sorted(addrs)) or "none"


def keys(snaps: list[Snapshot], only: Key | None) -> list[Key]:
    """The services to check: every exported or imported one, or just `only`."""
    if only is not None:
        return [only]
    return sorted({k for s in snaps for k in (*s.exports, *s.imports)})


def export_checks(snaps: list[Snapshot], key: Key) -> Iterator[Result]:
    """Each ServiceExport's conditions (written by the controller)."""
    subject = f"{key[0]}/{key[1]}"
    for s in snaps:
        se = s.exports.get(key)
        if se is None:
            continue
        conds = _conditions(se)
        if not conds:
            yield Result(WARN, "export", s.name, subject, "no conditions yet: the controller has not "
                         "processed it (is it running, with this cluster as a member?)")
            continue
        bad = [(t, c) for t, c in conds.items() if t in ("Valid", "Ready") and c.get("status") != "True"]
        bad = bad[:1] if bad and bad[0][0] == "Valid" else bad  # not Ready because not Valid: one line
        for t, c in bad:
            yield Result(FAIL, "export", s.name, subject,
                         f"{t}={c.get('status')} ({c.get('reason')}): {c.get('message')}")
        conflict = conds.get("Conflict")
        if conflict is not None and conflict.get("status") == "True":
            yield Result(WARN, "export", s.name, subject,
                         f"Conflict=True ({conflict.get('reason')}): {conflict.get('message')}")
        elif not bad:
            yield Result(OK, "export", s.name, subject, "Valid, Ready, no conflict")


def _exporters(snaps: list[Snapshot], key: Key) -> dict[str, Snapshot]:
    """Cluster ID -> member, for the members whose export of `key` is valid."""
    out = {}
    for s in snaps:
        se = s.exports.get(key)
        if se is not None and s.cluster_id and _conditions(se).get("Valid", {}).get("status") == "True":
            out[s.cluster_id] = s
    return out


def import_checks(snaps: list[Snapshot], key: Key) -> Iterator[Result]:
    """The ServiceImport in every member that has the namespace, its ips, its derived
    Service, and its EndpointSlices against the exporters' ready endpoints."""
    subject = f"{key[0]}/{key[1]}"
    nowhere = list(_imported_nowhere(snaps, key))
    if nowhere:
        yield from nowhere
        return
    exporters = _exporters(snaps, key)
    for s in snaps:
        if s.error is not None or not s.mcs_versions or not s.read("serviceimports", "namespaces") \
                or key[0] not in s.namespaces:
            continue  # no MCS API: the crds check says so; a refused read: its own line says so
        si = s.imports.get(key)
        if si is None:
            if exporters:
                yield Result(FAIL, "import", s.name, subject,
                             f"no ServiceImport, though {', '.join(sorted(exporters))} export it and the "
                             "namespace exists here: is the controller reaching this cluster?")
            continue
        spec, status = si.get("spec") or {}, si.get("status") or {}
        clusters = sorted(str(c.get("cluster")) for c in status.get("clusters") or [])
        missing = sorted(set(exporters) - set(clusters))
        if missing:
            yield Result(FAIL, "import", s.name, subject, f"status.clusters {clusters} lacks the exporting "
                         f"clusters {missing}")
        else:
            yield Result(OK, "import", s.name, subject, f"{spec.get('type')} from {', '.join(clusters)}")
        yield from _ips(s, key, si)
        yield from _endpoints(s, key, exporters)


def _imported_nowhere(snaps: list[Snapshot], key: Key) -> Iterator[Result]:
    """An export (not refused as invalid) with no ServiceImport in any member: nothing
    anywhere answers its name (no controller, or none with these members)."""
    if any(key in s.imports for s in snaps) or not all(
            s.read("serviceimports") for s in snaps if s.error is None and s.mcs_versions):
        return
    for s in snaps:
        se = s.exports.get(key)
        if se is not None and _conditions(se).get("Valid", {}).get("status") != "False":
            yield Result(FAIL, "import", s.name, f"{key[0]}/{key[1]}",
                         "exported here but imported nowhere: no member has its ServiceImport, so its "
                         "name does not resolve (is the controller running, with this cluster a member?)")


def _ips(s: Snapshot, key: Key, si: Obj) -> Iterator[Result]:
    subject = f"{key[0]}/{key[1]}"
    spec = si.get("spec") or {}
    if spec.get("type") != "ClusterSetIP":
        return
    ips = list(spec.get("ips") or [])
    if not ips:
        yield Result(FAIL, "ips", s.name, subject, "ClusterSetIP ServiceImport without ips: nothing to "
                     "answer (derived mode: its derived Service has no ClusterIP yet)")
        return
    derived = ((si.get("metadata") or {}).get("annotations") or {}).get(DERIVED_ANNOTATION)
    if derived and not s.read("services"):
        return
        yield Result(OK, "ips", s.name, subject, ", ".join(ips))
        return
    svc = s.services.get((key[0], derived_name(key)))
    if svc is None:
        yield Result(FAIL, "derived-service", s.name, subject,
                     f"ips {', '.join(ips)} but no derived Service {derived_name(key)}: kube-proxy has "
                     "nothing to route them")
    elif cluster_ips(svc)[0] != ips:
        yield Result(FAIL, "derived-service", s.name, subject,
                     f"ips {', '.join(ips)} but the derived Service {derived_name(key)} has "
                     f"{_show(cluster_ips(svc)[0])}")
    else:
        yield Result(OK, "ips", s.name, subject, f"{', '.join(ips)} (derived Service {derived_name(key)})")


def _endpoints(s: Snapshot, key: Key, exporters: dict[str, Snapshot]) -> Iterator[Result]:
    subject = f"{key[0]}/{key[1]}"
    if not s.read("endpointslices"):
        return
    ours = [sl for sl in s.slices if slice_index(sl) == ("ours", *key)]
    for cid, src in sorted(exporters.items()):
        if not src.read("endpointslices"):
            continue
        want = _ready_addresses(sl for sl in src.slices if slice_index(sl) == ("src", *key))
        have = _ready_addresses(sl for sl in ours if labels(sl).get(SOURCE_CLUSTER_LABEL) == cid)
        if want == have:
            yield Result(OK, "endpoints", s.name, subject, f"from {cid}: {_show(have)}")
        else:
            yield Result(FAIL, "endpoints", s.name, subject,
                         f"from {cid}: imported {_show(have)}, but {src.name} has ready {_show(want)}"
                         + (f" (missing {_show(want - have)})" if want - have else "")
                         + (f" (not ready or gone {_show(have - want)})" if have - want else ""))


def _served_slices(s: Snapshot, key: Key) -> Iterator[EndpointSlice]:
    """The EndpointSlices `mcsdns serve` answers `key` from (parsed; malformed ones it skips)."""
    for sl in s.slices:
        ns = (sl.get("metadata") or {}).get("namespace")
        if ns != key[0] or labels(sl).get(SERVICE_NAME_LABEL) != key[1]:
            continue
        try:
            yield EndpointSlice.parse(sl)
        except Malformed:
            continue


def name_checks(snaps: list[Snapshot], key: Key, zone: bytes) -> Iterator[Result]:
    """The names of this service `mcsdns serve` would leave out of `zone` (a label over 63
    octets or a name over 255), and its RRsets it would cut to what one DNS message holds,
    found by building its records as the server does."""
    subject = f"{key[0]}/{key[1]}"
    for s in snaps:
        si = s.imports.get(key)
        if si is None or not s.read("endpointslices"):
            continue
        try:
            parsed = ServiceImport.parse(si)
        except Malformed:
            continue  # `mcsdns serve` skips it and says why
        left = LeftOut()
        service_records(parsed, list(_served_slices(s, key)), zone, left=left)
        for kind, obj, message in left.lines():
            yield Result(FAIL, "names", s.name, subject,
                         f"{kind} {obj}: {message}; shorten the namespace, service, hostname, port name "
                         "or cluster ID")
        if left.cuts:
            yield Result(WARN, "names", s.name, subject,
                         f"{left.cut_text()}; every client and secondary gets only these first records "
                         "(nearest locality tier first): split the service or use fewer named ports if "
                         "clients need every endpoint")


def stale_slices(snaps: list[Snapshot], only: Key | None, complete: bool = False) -> Iterator[Result]:
    """Imported slices whose source cluster no longer exports the service, or (when `snaps`
    are every member: `complete`) is no member; a subset named by hand is not the clusterset."""
    ids = {s.cluster_id for s in snaps if s.cluster_id}
    for s in snaps:
        if not s.mcs_versions or not s.read("endpointslices", "serviceimports"):
            continue  # no ServiceImports to hold the slices against: the crds or read check says so
        for sl in s.slices:
            idx = slice_index(sl)
            if not is_ours(sl) or not isinstance(idx, tuple) or idx[0] != "ours":
                continue
            key: Key = (str(idx[1]), str(idx[2]))
            if only is not None and key != only:
                continue
            src = labels(sl).get(SOURCE_CLUSTER_LABEL, "")
            si = s.imports.get(key)
            listed = {str(c.get("cluster")) for c in ((si or {}).get("status") or {}).get("clusters") or []}
            name = (sl.get("metadata") or {}).get("name")
            if si is None or src not in listed:
                yield Result(FAIL, "stale-slices", s.name, f"{key[0]}/{key[1]}",
                             f"EndpointSlice {name} from {src or '?'} is left over: its cluster no longer "
                             "exports the service; the controller removes it when it runs (or delete it)")
            elif complete and src not in ids:
                yield Result(FAIL, "stale-slices", s.name, f"{key[0]}/{key[1]}",
                             f"EndpointSlice {name} comes from {src}, which is no member of the clusterset "
                             "(its members Secret or directory): the controller removes it when it runs")
