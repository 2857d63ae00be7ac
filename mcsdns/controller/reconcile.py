"""reconcile(key): one service's desired state in every member, from the informer caches.

For one (namespace, name) the caches of every live member give its
ServiceExports, Services and source EndpointSlices; the pure merge derives
the ServiceImport; every reachable member that has the namespace gets the
ServiceImport, its EndpointSlices (one per source slice, per source cluster)
and, in `derived` mode, the derived Service whose ClusterIPs become the
import's `ips`. Only differences from the cached objects are written (create,
update with the cached resourceVersion, delete), and each write's result goes
back into the cache. Objects without our managed-by label are never updated or
deleted.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from ..kube.errors import explain
from ..kube.keys import Key, key_of
from ..kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL
from .clusters import Conflict, Member, NotFound, Unreachable
from .derived import DERIVED_ANNOTATION, cluster_ips, derived_name, desired_service, service_view
from .exports import (
    APP_MANAGED_BY,
    CONTROLLER,
    MANAGED_BY,
    SERVICE_NAME,
    ExportState,
    is_ours,
    labels,
    read_export,
)
from .informers import MemberCaches
from .ipam import Allocator, Exhausted
from .merge import CLUSTERSET_IP, Merged, PortSpec, merge, serving_ports, unserved_message

log = logging.getLogger("mcsdns.controller")

SLICE_LABELS = (MANAGED_BY, SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL, SERVICE_NAME)
DERIVED, CIDR = "derived", "cidr"


# --- normalised views: what we compare between desired and existing ----------------
def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _port(p: dict[str, Any]) -> dict[str, Any]:
    return _drop_none({"name": p.get("name") or "", "protocol": p.get("protocol") or "TCP",
                       "port": p.get("port"), "appProtocol": p.get("appProtocol") or None})


def _endpoint(e: dict[str, Any]) -> dict[str, Any]:
    cond = _drop_none({k: (e.get("conditions") or {}).get(k) for k in ("ready", "serving", "terminating")})
    return _drop_none({"addresses": list(e.get("addresses") or []), "conditions": cond,
                       "hostname": e.get("hostname") or None, "zone": e.get("zone") or None})


def slice_ports(ports: list[dict[str, Any]], serving: dict[str, PortSpec | None]) -> list[dict[str, Any]]:
    """A source slice's ports named as the merged ports that serve them (kube-proxy matches a slice's
    ports to its Service's by name and protocol); ports none serves are left out."""
    out: list[dict[str, Any]] = []
    for x in ports:
        p = _port(x)
        if p["name"] in serving:
            m = serving[p["name"]]
            if m is None:
                continue
            p = _drop_none({"name": m.name, "protocol": m.protocol, "port": p.get("port"),
                            "appProtocol": m.app_protocol})
        if all(o["name"] != p["name"] for o in out):
            out.append(p)
    return out


def slice_view(s: dict[str, Any]) -> dict[str, Any]:
    lb = labels(s)
    refs = [(r.get("apiVersion"), r.get("kind"), r.get("name"), r.get("uid"))
            for r in (s.get("metadata") or {}).get("ownerReferences") or []]
    return {"labels": {k: lb.get(k) for k in SLICE_LABELS}, "owners": refs,
            "addressType": s.get("addressType"),
            "endpoints": [_endpoint(e) for e in s.get("endpoints") or []],
            "ports": [_port(p) for p in s.get("ports") or []]}


def import_spec_view(si: dict[str, Any]) -> dict[str, Any]:
    spec = si.get("spec") or {}
    return {"type": spec.get("type"), "ports": [_port(p) for p in spec.get("ports") or []],
            "ips": list(spec.get("ips") or []), "ipFamilies": list(spec.get("ipFamilies") or []),
            "sessionAffinity": spec.get("sessionAffinity") or "None",
            "sessionAffinityConfig": spec.get("sessionAffinityConfig") or None,
            "managed": labels(si).get(APP_MANAGED_BY)}


def import_status_equal(have: dict[str, Any], want: dict[str, Any]) -> bool:
    h, w = have.get("status") or {}, want.get("status") or {}
    clusters = sorted(str(c.get("cluster")) for c in h.get("clusters") or [])
    # A server whose schema lacks endpointSliceObjects prunes it: absent counts as equal.
    eso = h.get("endpointSliceObjects")
    return clusters == [c["cluster"] for c in w.get("clusters") or []] and (
        eso is None or eso == w.get("endpointSliceObjects"))


def slice_name(service: str, cluster: str, source_slice: str) -> str:
    digest = hashlib.sha256(f"{cluster}/{source_slice}".encode()).hexdigest()[:10]
    return f"{service[:200]}-{digest}"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Result:
    """Bookkeeping of one reconcile of one key."""

    failed: list[str] = field(default_factory=list)  # why the service is not imported everywhere
    retry: bool = False
    writes: int = 0


Exports = list[tuple[MemberCaches, ExportState]]


class Reconciler:
    """Brings one service key to its desired state in every reachable member.

    Invariants: it writes only differences from the informer caches, and updates with the
    cached resourceVersion; it never updates or deletes an object without our managed-by
    label; every write's result goes back into the cache; a failed write marks the key
    for a retry and is named in the export's Ready condition.
    """

    def __init__(self, members: list[MemberCaches], mode: str, allocator: Allocator | None,
                 endpoint_ttl: float, clock: Callable[[], float] = time.monotonic, workers: int = 4) -> None:
        self.members = members
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers) * max(1, len(members)),
                                       thread_name_prefix="member-write")
        self.mode = mode
        self.alloc = allocator
        self.alloc_lock = threading.Lock()
        self.ttl = endpoint_ttl
        self.clock = clock
        self.derived_keys: dict[Key, Key] = {}  # (ns, derived Service name) -> service key
        self.unserved: dict[Key, dict[str, list[PortSpec]]] = {}  # key -> member name -> ports
        self.unserved_lock = threading.Lock()

    # --- which members count ------------------------------------------------------
    def live(self, mc: MemberCaches) -> bool:
        """Whether this member's exports count: read once, and reachable or lost less than the TTL ago."""
        if not mc.synced:
            return False
        return mc.reachable or (mc.last_ok is not None and self.clock() - mc.last_ok < self.ttl)

    def all_keys(self) -> set[Key]:
        out: set[Key] = set()
        for mc in self.members:
            out |= mc.keys()
        return out

    def adopt(self) -> None:
        """cidr mode: keep the ClusterSetIPs our existing ServiceImports have (after a restart)."""
        if self.alloc is None:
            return
        with self.alloc_lock:
            for mc in self.members:
                if not mc.synced:
                    continue
                for k, si in list(mc.caches["serviceimports"].objs.items()):
                    if is_ours(si) and not self.alloc.by_key.get(k):
                        self.alloc.adopt(k, (si.get("spec") or {}).get("ips") or [])

    # --- one key ------------------------------------------------------------------
    def reconcile(self, key: Key) -> Result:
        """Bring one service to its desired state in every reachable member."""
        exports: Exports = []
        for mc in self.members:
            if not self.live(mc):
                continue
            se = mc.export(key)
            if se is None:
                continue
            assert mc.member.cluster_id is not None
            ex = read_export(mc.member.cluster_id, se, mc.service(key))
            if ex.export is not None:
                ex.slices = mc.source_slices(key)
            exports.append((mc, ex))
        valid = [ex.export for _, ex in exports if ex.export is not None]
        merged = merge(valid) if valid else None
        for _, ex in exports:
            if merged is not None and ex.export is not None:
                ex.serving = serving_ports(merged.ports, ex.export.ports)
        self._note_unserved(key, exports, merged)
        if merged is not None and self.mode == DERIVED:
            self.derived_keys[(key[0], derived_name(key))] = key
        ips = self._cidr_ips(key, merged)
        r = Result()
        targets = [mc for mc in self.members if mc.synced and mc.reachable]
        if len(targets) > 1:  # members in parallel
            list(self.pool.map(lambda mc: self._sync_member(mc, key, merged, exports, ips, r), targets))
        else:
            for mc in targets:
                self._sync_member(mc, key, merged, exports, ips, r)
        for mc, ex in exports:
            if mc in targets:
                self._sync_status(mc, key, ex, merged, r)
        return r

    def _note_unserved(self, key: Key, exports: Exports, m: Merged | None) -> None:
        """Keep the count of each member's unserved ports; log when they change."""
        now = {mc.member.name: ex.unserved() for mc, ex in exports if ex.unserved()}
        with self.unserved_lock:
            before = self.unserved.pop(key, {})
            if now:
                self.unserved[key] = now
        for name, ports in sorted(now.items()):
            if m is not None and before.get(name) != ports:
                log.warning("cluster %s: ServiceExport %s/%s: %s", name, *key,
                            unserved_message(ports, m.ports))
        present = {mc.member.name for mc, ex in exports if ex.export is not None}
        for name in sorted((before.keys() - now.keys()) & present):
            log.info("cluster %s: ServiceExport %s/%s: every port is served now", name, *key)

    def _cidr_ips(self, key: Key, m: Merged | None) -> tuple[list[str], list[str]] | None:
        if self.alloc is None:
            return None
        with self.alloc_lock:
            if m is None or m.type != CLUSTERSET_IP:
                self.alloc.release(key)
                return None
            cidr_fams = self.alloc.families()
            fams = [f for f in m.ip_families if f in cidr_fams] or cidr_fams
            try:
                return self.alloc.get(key, fams), fams
            except Exhausted as e:
                log.error("%s/%s: %s", key[0], key[1], e)
                return [], []

    # --- writes -------------------------------------------------------------------
    def _write(self, mc: MemberCaches, r: Result, key: Key, what: str,
               fn: Callable[..., Any], *args: Any) -> Any:
        """One write; on failure log it, note why, and ask for a retry where one can help."""
        name = mc.member.name
        try:
            out = fn(*args)
            r.writes += 1
            return out
        except Conflict as e:
            log.info("cluster %s: %s %s/%s changed meanwhile, retrying: %s", name, what, *key, e)
            r.retry = True
        except NotFound as e:
            if what.startswith("delete"):
                return None  # already gone (e.g. garbage-collected with its ServiceImport)
            log.info("cluster %s: %s %s/%s: not found (deleted meanwhile?), retrying: %s", name, what,
                     *key, e)
            r.retry = True
        except Unreachable as e:
            log.warning("cluster %s: %s %s/%s: %s", name, what, *key, e)
            r.retry = True
        except ApiException as e:
            log.error("cluster %s: %s %s/%s rejected: %s", name, what, *key, explain(e))
            r.retry = True
        if not what.startswith("ServiceExport"):  # status writes do not make an import fail
            r.failed.append(f"{what} failed in cluster {mc.member.cluster_id}")
        return None

    @staticmethod
    def _put_status(m: Member, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            out: dict[str, Any] = m.request("PUT", path + "/status", body=body)
        except NotFound:  # no status subresource: the whole object carries it
            out = m.request("PUT", path, body=body)
        return out

    def _create(self, mc: MemberCaches, cache: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = mc.member.request("POST", path, body=body)
        mc.caches[cache].note_written(obj)
        return obj

    def _replace(self, mc: MemberCaches, cache: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = mc.member.request("PUT", path, body=body)
        mc.caches[cache].note_written(obj)
        return obj

    def _delete(self, mc: MemberCaches, cache: str, path: str, k: Key) -> None:
        try:
            mc.member.request("DELETE", path)
        finally:
            mc.caches[cache].note_written(None, k)

    # --- one member ---------------------------------------------------------------
    def _sync_member(self, mc: MemberCaches, key: Key, merged: Merged | None, exports: Exports,
                     ips: tuple[list[str], list[str]] | None, r: Result) -> None:
        m = mc.member
        have = mc.service_import(key)
        derived = self.mode == DERIVED and merged is not None and merged.type == CLUSTERSET_IP
        if merged is None or not mc.has_namespace(key[0]):
            self._remove(mc, key, have, r)
            return
        if have is not None and not is_ours(have):
            log.warning("cluster %s: ServiceImport %s/%s is not managed by %s; leaving it alone",
                        m.name, key[0], key[1], CONTROLLER)
            r.failed.append(f"ServiceImport in cluster {m.cluster_id} is managed by someone else")
            return
        svc = mc.service((key[0], derived_name(key))) if derived else None
        if svc is not None and not is_ours(svc):
            log.warning("cluster %s: Service %s/%s exists and is not managed by %s; no ClusterSetIP "
                        "for %s there", m.name, key[0], derived_name(key), CONTROLLER, key[1])
            r.failed.append(f"Service {derived_name(key)} in cluster {m.cluster_id} exists and is not "
                            f"managed by {CONTROLLER}")
            svc, derived = None, False
        if derived and svc is not None:
            ips = cluster_ips(svc)
        want = self._desired_import(mc, key, merged, ips, derived)
        si = self._write(mc, r, key, "ServiceImport", self._put_import, mc, key, want, have)
        if si is None:
            return
        uid = (si.get("metadata") or {}).get("uid")
        if derived:
            svc = self._write(mc, r, key, "Service", self._put_derived, mc, key, merged, si, svc)
            if svc is not None and cluster_ips(svc)[0] and cluster_ips(svc) != ips:
                want = self._desired_import(mc, key, merged, cluster_ips(svc), True)
                si = self._write(mc, r, key, "ServiceImport", self._put_import, mc, key, want, si) or si
        for extra in mc.our_services(key):
            if not derived or key_of(extra)[1] != derived_name(key):
                self._delete_derived(mc, key, extra, r)
        self._write(mc, r, key, "ServiceImport status", self._put_import_status, mc, key, want, si)
        want_slices: dict[Key, dict[str, Any]] = {}
        for _src, ex in exports:
            if ex.export is None:
                continue
            for s in ex.slices:
                d = self._desired_slice(mc, key, ex.export.cluster, s, uid, derived, ex.serving)
                want_slices[key_of(d)] = d
        self._sync_slices(mc, key, want_slices, r)

    def _remove(self, mc: MemberCaches, key: Key, have: dict[str, Any] | None, r: Result) -> None:
        """Nothing of this service belongs in this member: delete what of ours is there."""
        self._sync_slices(mc, key, {}, r)
        for svc in mc.our_services(key):
            self._delete_derived(mc, key, svc, r)
        if have is not None and is_ours(have):
            log.info("cluster %s: delete ServiceImport %s/%s", mc.member.name, *key)
            self._write(mc, r, key, "delete ServiceImport", self._delete, mc, "serviceimports",
                        mc.member.mcs_path("serviceimports", key[0], key[1]), key)

    def _delete_derived(self, mc: MemberCaches, key: Key, svc: dict[str, Any], r: Result) -> None:
        sk = key_of(svc)
        log.info("cluster %s: delete Service %s/%s", mc.member.name, *sk)
        self._write(mc, r, key, "delete Service", self._delete, mc, "services",
                    f"/api/v1/namespaces/{sk[0]}/services/{sk[1]}", sk)

    # --- ServiceImport ------------------------------------------------------------
    def _desired_import(self, mc: MemberCaches, k: Key, m: Merged,
                        ips: tuple[list[str], list[str]] | None, derived: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": m.type, "ports": [p.to_dict() for p in m.ports],
                                "sessionAffinity": m.session_affinity}
        if m.session_affinity_config:
            spec["sessionAffinityConfig"] = m.session_affinity_config
        if ips is not None and ips[0]:
            spec["ips"], spec["ipFamilies"] = ips
        elif m.ip_families:
            spec["ipFamilies"] = list(m.ip_families)
        status: dict[str, Any] = {"clusters": [{"cluster": c} for c in m.clusters]}
        if mc.member.mcs_version == "v1beta1":
            status["endpointSliceObjects"] = "Present"
        meta: dict[str, Any] = {"name": k[1], "namespace": k[0], "labels": {APP_MANAGED_BY: CONTROLLER}}
        if derived:
            meta["annotations"] = {DERIVED_ANNOTATION: derived_name(k)}
        return {"apiVersion": mc.member.mcs_api_version(), "kind": "ServiceImport",
                "metadata": meta, "spec": spec, "status": status}

    def _put_import(self, mc: MemberCaches, k: Key, want: dict[str, Any],
                    have: dict[str, Any] | None) -> dict[str, Any]:
        m = mc.member
        if have is None:
            log.info("cluster %s: create ServiceImport %s/%s", m.name, *k)
            return self._create(mc, "serviceimports", m.mcs_path("serviceimports", k[0]), want)
        if import_spec_view(have) == import_spec_view(want):
            return have
        log.info("cluster %s: update ServiceImport %s/%s", m.name, *k)
        body = dict(have, apiVersion=want["apiVersion"], kind="ServiceImport", spec=want["spec"])
        md = dict(have["metadata"], labels=dict(labels(have), **want["metadata"]["labels"]))
        ann = dict(md.get("annotations") or {})
        ann.pop(DERIVED_ANNOTATION, None)
        ann.update(want["metadata"].get("annotations") or {})
        md["annotations"] = ann
        body["metadata"] = md
        return self._replace(mc, "serviceimports", m.mcs_path("serviceimports", k[0], k[1]), body)

    def _put_import_status(self, mc: MemberCaches, k: Key, want: dict[str, Any],
                           have: dict[str, Any]) -> dict[str, Any]:
        if import_status_equal(have, want):
            return have
        m = mc.member
        log.info("cluster %s: update ServiceImport %s/%s status", m.name, *k)
        obj = self._put_status(m, m.mcs_path("serviceimports", k[0], k[1]),
                               dict(have, apiVersion=want["apiVersion"], kind="ServiceImport",
                                    status=want["status"]))
        mc.caches["serviceimports"].note_written(obj)
        return obj

    # --- derived Service ----------------------------------------------------------
    def _put_derived(self, mc: MemberCaches, k: Key, m: Merged, si: dict[str, Any],
                     have: dict[str, Any] | None) -> dict[str, Any]:
        owner = {"apiVersion": mc.member.mcs_api_version(), "kind": "ServiceImport", "name": k[1],
                 "uid": (si.get("metadata") or {}).get("uid"), "controller": True,
                 "blockOwnerDeletion": False}
        want = desired_service(k, m, owner)
        name, path = derived_name(k), f"/api/v1/namespaces/{k[0]}/services"
        if have is None:
            log.info("cluster %s: create Service %s/%s for ServiceImport %s", mc.member.name, k[0], name,
                     k[1])
            try:
                return self._create(mc, "services", path, want)
            except ApiException as e:
                if e.status != 422 or "ipFamilies" not in want["spec"]:
                    raise
                # the exporters' IP family is not configured here: take this cluster's default
                log.warning("cluster %s: Service %s/%s with ipFamilies %s rejected (%s); creating it with "
                            "the cluster's default IP family", mc.member.name, k[0], name,
                            want["spec"]["ipFamilies"], e.reason)
                want["spec"].pop("ipFamilies")
                want["spec"].pop("ipFamilyPolicy", None)
                return self._create(mc, "services", path, want)
        if service_view(have) == service_view(want):
            return have
        log.info("cluster %s: update Service %s/%s", mc.member.name, k[0], name)
        spec = dict(have.get("spec") or {})
        spec.pop("selector", None)
        spec.pop("sessionAffinityConfig", None)
        spec.update({f: v for f, v in want["spec"].items() if f not in ("ipFamilies", "ipFamilyPolicy")})
        md = dict(have["metadata"], labels=dict(labels(have), **want["metadata"]["labels"]),
                  ownerReferences=want["metadata"]["ownerReferences"])
        body = dict(have, apiVersion="v1", kind="Service", metadata=md, spec=spec)
        return self._replace(mc, "services", f"{path}/{name}", body)

    # --- EndpointSlices -----------------------------------------------------------
    def _desired_slice(self, mc: MemberCaches, k: Key, cluster: str, src: dict[str, Any],
                       uid: str | None, derived: bool, serving: dict[str, PortSpec | None],
                       ) -> dict[str, Any]:
        name = slice_name(k[1], cluster, key_of(src)[1])
        owner = {"apiVersion": mc.member.mcs_api_version(), "kind": "ServiceImport", "name": k[1],
                 "uid": uid, "controller": False}
        lb = {MANAGED_BY: CONTROLLER, SERVICE_NAME_LABEL: k[1], SOURCE_CLUSTER_LABEL: cluster}
        if derived:
            lb[SERVICE_NAME] = derived_name(k)
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": k[0], "labels": lb, "ownerReferences": [owner]},
                "addressType": src.get("addressType") or "IPv4",
                "endpoints": [_endpoint(e) for e in src.get("endpoints") or []],
                "ports": slice_ports(src.get("ports") or [], serving)}

    def _sync_slices(self, mc: MemberCaches, key: Key, want: dict[Key, dict[str, Any]], r: Result) -> None:
        m = mc.member
        base = "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices"
        have_all = {key_of(s): s for s in mc.our_slices(key) if labels(s).get(MANAGED_BY) == CONTROLLER}
        for sk, d in sorted(want.items()):
            have = have_all.get(sk)
            if have is None:
                log.info("cluster %s: create EndpointSlice %s/%s", m.name, *sk)
                self._write(mc, r, key, "EndpointSlice", self._create, mc, "endpointslices",
                            base.format(sk[0]), d)
            elif slice_view(have) != slice_view(d):
                log.info("cluster %s: update EndpointSlice %s/%s", m.name, *sk)
                body = dict(d, metadata=dict(have["metadata"], labels=dict(
                    {k: v for k, v in labels(have).items() if k not in SLICE_LABELS}, **labels(d)),
                    ownerReferences=d["metadata"]["ownerReferences"]))
                self._write(mc, r, key, "EndpointSlice", self._replace, mc, "endpointslices",
                            f"{base.format(sk[0])}/{sk[1]}", body)
        for sk in sorted(set(have_all) - set(want)):
            log.info("cluster %s: delete EndpointSlice %s/%s", m.name, *sk)
            self._write(mc, r, key, "delete EndpointSlice", self._delete, mc, "endpointslices",
                        f"{base.format(sk[0])}/{sk[1]}", sk)

    # --- export status -----------------------------------------------------------------
    def _conditions(self, ex: ExportState, m: Merged | None, failed: list[str] | None,
                    ) -> list[tuple[str, str, str, str]]:
        if ex.invalid is not None or m is None:
            reason, msg = ex.invalid or ("Pending", "Not merged yet.")
            return [("Valid", "False", reason, msg),
                    ("Ready", "False", "Pending", "The ServiceExport is not valid.")]
        out = [("Valid", "True", "Valid", "The ServiceExport and its Service are exportable.")]
        if ex.unserved():
            msg = unserved_message(ex.unserved(), m.ports)
            if failed:
                msg += " " + "; ".join(sorted(set(failed)))
            out.append(("Ready", "False", "PortConflict", msg))
        elif failed:
            out.append(("Ready", "False", "Pending", "; ".join(sorted(set(failed)))))
        else:
            out.append(("Ready", "True", "Exported", "The service has been exported."))
        c = m.conflict_condition()
        if c is None:
            out.append(("Conflict", "False", "NoConflicts", "No conflicts."))
        else:
            out.append(("Conflict", "True", c[0], c[1]))
        return out

    def _sync_status(self, mc: MemberCaches, k: Key, ex: ExportState, merged: Merged | None,
                     r: Result) -> None:
        m = mc.member
        want = self._conditions(ex, merged, r.failed)
        gen = (ex.obj.get("metadata") or {}).get("generation")
        have = list((ex.obj.get("status") or {}).get("conditions") or [])
        by_type = {c.get("type"): c for c in have}
        new, changed = [], False
        for typ, status, reason, msg in want:
            old = by_type.pop(typ, None)
            c = {"type": typ, "status": status, "reason": reason, "message": msg,
                 "lastTransitionTime": now_rfc3339()}
            if gen is not None:
                c["observedGeneration"] = gen
            if old is not None and old.get("status") == status:
                c["lastTransitionTime"] = old.get("lastTransitionTime") or c["lastTransitionTime"]
            if old is None or any(old.get(f) != c.get(f) for f in
                                  ("status", "reason", "message", "observedGeneration")):
                changed = True
            new.append(c)
        if by_type:  # conditions of ours that no longer apply (Conflict on an invalid export)
            changed = changed or any(t in ("Valid", "Ready", "Conflict") for t in by_type)
            new.extend(c for t, c in by_type.items() if t not in ("Valid", "Ready", "Conflict"))
        if not changed:
            return
        log.info("cluster %s: ServiceExport %s/%s status: %s", m.name, k[0], k[1],
                 ", ".join(f"{t}={s}({r})" for t, s, r, _ in want))
        # list items carry no apiVersion/kind; a real API server wants them in a PUT body
        body = dict(ex.obj, apiVersion=m.mcs_api_version(), kind="ServiceExport",
                    status=dict(ex.obj.get("status") or {}, conditions=new))

        def put() -> None:
            out = self._put_status(m, m.mcs_path("serviceexports", k[0], k[1]), body)
            mc.caches["serviceexports"].note_written(out)

        self._write(mc, r, k, "ServiceExport status", put)


__all__ = ["Reconciler", "Result", "DERIVED", "CIDR"]
