"""Desired state from every member's exports → ServiceImports, EndpointSlices and export status.

One pass reads every member, merges the exports of each service, and writes
only the differences between desired and existing objects, so a pass over an
unchanged clusterset makes no write at all. Only objects labelled as managed
by mcsdns-controller are ever updated or deleted.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from .clusters import ConfigError, Conflict, Member, NotFound, Unreachable
from .exports import (
    APP_MANAGED_BY,
    CONTROLLER,
    MANAGED_BY,
    MCS_SERVICE_NAME,
    SOURCE_CLUSTER,
    ExportState,
    Key,
    Snapshot,
    is_ours,
    key_of,
    labels,
    read,
)
from .ipam import Allocator, Exhausted
from .merge import CLUSTERSET_IP, Merged, merge

log = logging.getLogger("mcsdns.controller")

SLICE_LABELS = (MANAGED_BY, MCS_SERVICE_NAME, SOURCE_CLUSTER)


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


# --- state per member ---------------------------------------------------------------
@dataclass
class MemberState:
    member: Member
    snapshot: Snapshot | None = None
    last_ok: float | None = None
    reachable: bool = False
    error: str = ""


@dataclass
class Pass:
    """Bookkeeping of one reconcile pass."""

    failed: dict[Key, list[str]] = field(default_factory=dict)  # service -> why not imported
    retry: bool = False

    def fail(self, key: Key, why: str) -> None:
        self.failed.setdefault(key, []).append(why)


class Reconciler:
    def __init__(self, members: list[Member], allocator: Allocator, endpoint_ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.states = [MemberState(m) for m in members]
        self.alloc = allocator
        self.ttl = endpoint_ttl
        self.clock = clock
        self.started = clock()
        self.synced = False
        self._waited = False
        self.passes = 0

    # --- reading ----------------------------------------------------------------
    def _read_one(self, st: MemberState) -> None:
        m = st.member
        try:
            if m.cluster_id is None:
                m.cluster_id = m.read_cluster_id()
                log.info("cluster %s has cluster ID %s", m.name, m.cluster_id)
            st.snapshot = read(m)
        except (Unreachable, ApiException, ConfigError) as e:
            if st.reachable or st.error != str(e):
                log.warning("cluster %s unreachable: %s", m.name, e)
            st.reachable, st.error = False, str(e)
            return
        if not st.reachable:
            log.info("cluster %s (%s) reachable", m.name, m.cluster_id)
        st.reachable, st.last_ok, st.error = True, self.clock(), ""

    def read_all(self) -> None:
        with ThreadPoolExecutor(max_workers=len(self.states)) as pool:
            list(pool.map(self._read_one, self.states))

    def live(self, st: MemberState) -> bool:
        """Whether this member's exports count: reachable, or lost less than the TTL ago."""
        if st.snapshot is None or st.last_ok is None:
            return False
        return st.reachable or self.clock() - st.last_ok < self.ttl

    # --- one pass ----------------------------------------------------------------
    def reconcile(self) -> bool:
        """Read everything, write the differences. False when something should be retried soon."""
        self.read_all()
        if not self.synced:
            waiting = [s.member.name for s in self.states if s.last_ok is None]
            if waiting and self.clock() - self.started < self.ttl:
                if not self._waited:
                    log.info("waiting up to %gs for first contact with %s before writing", self.ttl,
                             ", ".join(waiting))
                    self._waited = True
                return False
            self.synced = True
        self.passes += 1
        exports: dict[Key, list[tuple[MemberState, ExportState]]] = {}
        for st in self.states:
            if self.live(st):
                assert st.snapshot is not None
                for k, ex in st.snapshot.exports.items():
                    exports.setdefault(k, []).append((st, ex))
        merged: dict[Key, Merged] = {}
        for k, lst in exports.items():
            valid = [ex.export for _, ex in lst if ex.export is not None]
            if valid:
                merged[k] = merge(valid)
        ips = self._allocate(merged)
        p = Pass()
        targets = [st for st in self.states if st.reachable and st.member.mcs_version is not None]
        with ThreadPoolExecutor(max_workers=len(self.states)) as pool:  # members in parallel
            list(pool.map(lambda st: self._sync_member(st, merged, ips, exports, p), targets))
            # status last: Ready needs every member's import result
            list(pool.map(lambda st: self._sync_status(st, merged, p), targets))
        return not p.retry

    def degraded(self) -> bool:
        """Some member could not be read or written in the last pass."""
        return not all(st.reachable for st in self.states)

    def _allocate(self, merged: dict[Key, Merged]) -> dict[Key, tuple[list[str], list[str]]]:
        """(ips, ipFamilies) of every ClusterSetIP service; releases the rest."""
        for k in self.alloc.keys():
            if k not in merged or merged[k].type != CLUSTERSET_IP:
                self.alloc.release(k)
        have = set(self.alloc.keys())
        for st in self.states:
            if st.reachable and st.snapshot is not None:
                for k, si in st.snapshot.imports.items():
                    if k in merged and k not in have and is_ours(si):
                        self.alloc.adopt(k, (si.get("spec") or {}).get("ips") or [])
        out: dict[Key, tuple[list[str], list[str]]] = {}
        cidr_fams = self.alloc.families()
        for k in sorted(merged):
            m = merged[k]
            if m.type != CLUSTERSET_IP:
                continue
            fams = [f for f in m.ip_families if f in cidr_fams] or cidr_fams
            try:
                out[k] = (self.alloc.get(k, fams), fams)
            except Exhausted as e:
                log.error("%s/%s: %s", k[0], k[1], e)
                out[k] = ([], [])
        return out

    # --- imports --------------------------------------------------------------------
    def _desired_import(self, st: MemberState, k: Key, m: Merged,
                        ips: dict[Key, tuple[list[str], list[str]]]) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": m.type, "ports": [p.to_dict() for p in m.ports],
                                "sessionAffinity": m.session_affinity}
        if m.session_affinity_config:
            spec["sessionAffinityConfig"] = m.session_affinity_config
        if k in ips:
            addrs, fams = ips[k]
            if addrs:
                spec["ips"], spec["ipFamilies"] = addrs, fams
        elif m.ip_families:
            spec["ipFamilies"] = list(m.ip_families)
        status: dict[str, Any] = {"clusters": [{"cluster": c} for c in m.clusters]}
        if st.member.mcs_version == "v1beta1":
            status["endpointSliceObjects"] = "Present"
        return {"apiVersion": st.member.mcs_api_version(), "kind": "ServiceImport",
                "metadata": {"name": k[1], "namespace": k[0], "labels": {APP_MANAGED_BY: CONTROLLER}},
                "spec": spec, "status": status}

    def _write(self, st: MemberState, p: Pass, k: Key, what: str,
               fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except Conflict as e:
            log.info("cluster %s: %s %s/%s changed meanwhile, retrying: %s", st.member.name, what,
                     k[0], k[1], e)
            p.retry = True
        except NotFound as e:
            if what.startswith("delete"):
                return None  # already gone (e.g. garbage-collected with its ServiceImport)
            log.info("cluster %s: %s %s/%s: not found (%s), retrying", st.member.name, what, k[0], k[1], e)
            p.retry = True
        except Unreachable as e:
            log.warning("cluster %s: %s: %s", st.member.name, what, e)
            st.reachable = False
        except ApiException as e:
            log.error("cluster %s: %s %s/%s rejected: %s %s", st.member.name, what, k[0], k[1],
                      e.status, (e.body or b"")[:300] if isinstance(e.body, bytes) else e.body)
        if not what.startswith("ServiceExport"):  # status writes do not make an import fail
            p.fail(k, f"{what} failed in cluster {st.member.cluster_id}")
        return None

    def _put_import(self, st: MemberState, k: Key, want: dict[str, Any],
                    have: dict[str, Any] | None) -> dict[str, Any]:
        m = st.member
        if have is None:
            log.info("cluster %s: create ServiceImport %s/%s", m.name, *k)
            obj: dict[str, Any] = m.request("POST", m.mcs_path("serviceimports", k[0]), body=want)
        elif import_spec_view(have) != import_spec_view(want):
            log.info("cluster %s: update ServiceImport %s/%s", m.name, *k)
            body = dict(have, apiVersion=want["apiVersion"], kind="ServiceImport", spec=want["spec"],
                        status=want["status"])
            body["metadata"] = dict(have["metadata"], labels=dict(labels(have), **want["metadata"]["labels"]))
            obj = m.request("PUT", m.mcs_path("serviceimports", k[0], k[1]), body=body)
        else:
            obj = have
        if not import_status_equal(obj, want):
            log.info("cluster %s: update ServiceImport %s/%s status", m.name, *k)
            obj = self._put_status(m, m.mcs_path("serviceimports", k[0], k[1]),
                                   dict(obj, apiVersion=want["apiVersion"], kind="ServiceImport",
                                        status=want["status"]))
        return obj

    @staticmethod
    def _put_status(m: Member, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            out: dict[str, Any] = m.request("PUT", path + "/status", body=body)
        except NotFound:  # no status subresource: the whole object carries it
            out = m.request("PUT", path, body=body)
        return out

    def _sync_member(self, st: MemberState, merged: dict[Key, Merged],
                     ips: dict[Key, tuple[list[str], list[str]]],
                     exports: dict[Key, list[tuple[MemberState, ExportState]]], p: Pass) -> None:
        m, snap = st.member, st.snapshot
        assert snap is not None
        want_slices: dict[Key, dict[str, Any]] = {}
        for k in sorted(merged):
            if k[0] not in snap.namespaces:
                continue
            have = snap.imports.get(k)
            if have is not None and not is_ours(have):
                log.warning("cluster %s: ServiceImport %s/%s is not managed by %s; leaving it alone",
                            m.name, k[0], k[1], CONTROLLER)
                p.fail(k, f"ServiceImport in cluster {m.cluster_id} is managed by someone else")
                continue
            si = self._write(st, p, k, "ServiceImport", self._put_import,
                             st, k, self._desired_import(st, k, merged[k], ips), have)
            if not st.reachable:
                return
            if si is None:
                continue
            uid = (si.get("metadata") or {}).get("uid")
            for _src, ex in exports.get(k, []):
                if ex.export is None:
                    continue
                for s in ex.slices:
                    d = self._desired_slice(st, k, ex.export.cluster, s, uid)
                    want_slices[key_of(d)] = d
        self._sync_slices(st, want_slices, p)
        if not st.reachable:
            return
        for k, si in sorted(snap.imports.items()):
            if is_ours(si) and (k not in merged or k[0] not in snap.namespaces):
                log.info("cluster %s: delete ServiceImport %s/%s", m.name, *k)
                self._write(st, p, k, "delete ServiceImport", m.request,
                            "DELETE", m.mcs_path("serviceimports", k[0], k[1]))
                if not st.reachable:
                    return

    def _desired_slice(self, st: MemberState, k: Key, cluster: str, src: dict[str, Any],
                       uid: str | None) -> dict[str, Any]:
        name = slice_name(k[1], cluster, key_of(src)[1])
        owner = {"apiVersion": st.member.mcs_api_version(), "kind": "ServiceImport", "name": k[1],
                 "uid": uid, "controller": False}
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": k[0],
                             "labels": {MANAGED_BY: CONTROLLER, MCS_SERVICE_NAME: k[1],
                                        SOURCE_CLUSTER: cluster},
                             "ownerReferences": [owner]},
                "addressType": src.get("addressType") or "IPv4",
                "endpoints": [_endpoint(e) for e in src.get("endpoints") or []],
                "ports": [_port(x) for x in src.get("ports") or []]}

    def _sync_slices(self, st: MemberState, want: dict[Key, dict[str, Any]], p: Pass) -> None:
        m, snap = st.member, st.snapshot
        assert snap is not None
        base = "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices"
        for sk, d in sorted(want.items()):
            svc = (sk[0], labels(d)[MCS_SERVICE_NAME])
            have = snap.our_slices.get(sk)
            if have is None:
                log.info("cluster %s: create EndpointSlice %s/%s", m.name, *sk)
                self._write(st, p, svc, "EndpointSlice", m.request, "POST", base.format(sk[0]), body=d)
            elif slice_view(have) != slice_view(d):
                log.info("cluster %s: update EndpointSlice %s/%s", m.name, *sk)
                body = dict(d, metadata=dict(have["metadata"], labels=dict(labels(have), **labels(d)),
                                             ownerReferences=d["metadata"]["ownerReferences"]))
                self._write(st, p, svc, "EndpointSlice", m.request,
                            "PUT", f"{base.format(sk[0])}/{sk[1]}", body=body)
            if not st.reachable:
                return
        for sk, have in sorted(snap.our_slices.items()):
            if sk not in want and labels(have).get(MANAGED_BY) == CONTROLLER:
                log.info("cluster %s: delete EndpointSlice %s/%s", m.name, *sk)
                svc = (sk[0], labels(have).get(MCS_SERVICE_NAME, ""))
                self._write(st, p, svc, "delete EndpointSlice", m.request,
                            "DELETE", f"{base.format(sk[0])}/{sk[1]}")
                if not st.reachable:
                    return

    # --- export status -----------------------------------------------------------------
    def _conditions(self, ex: ExportState, m: Merged | None, failed: list[str] | None,
                    ) -> list[tuple[str, str, str, str]]:
        if ex.invalid is not None or m is None:
            reason, msg = ex.invalid or ("Pending", "Not merged yet.")
            return [("Valid", "False", reason, msg),
                    ("Ready", "False", "Pending", "The ServiceExport is not valid.")]
        out = [("Valid", "True", "Valid", "The ServiceExport and its Service are exportable.")]
        if failed:
            out.append(("Ready", "False", "Pending", "; ".join(sorted(set(failed)))))
        else:
            out.append(("Ready", "True", "Exported", "The service has been exported."))
        c = m.conflict_condition()
        if c is None:
            out.append(("Conflict", "False", "NoConflicts", "No conflicts."))
        else:
            out.append(("Conflict", "True", c[0], c[1]))
        return out

    def _sync_status(self, st: MemberState, merged: dict[Key, Merged], p: Pass) -> None:
        m, snap = st.member, st.snapshot
        assert snap is not None
        for k, ex in sorted(snap.exports.items()):
            want = self._conditions(ex, merged.get(k), p.failed.get(k))
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
                continue
            log.info("cluster %s: ServiceExport %s/%s status: %s", m.name, k[0], k[1],
                     ", ".join(f"{t}={s}({r})" for t, s, r, _ in want))
            # list items carry no apiVersion/kind; a real API server wants them in a PUT body
            body = dict(ex.obj, apiVersion=m.mcs_api_version(), kind="ServiceExport",
                        status=dict(ex.obj.get("status") or {}, conditions=new))
            self._write(st, p, k, "ServiceExport status", self._put_status,
                        m, m.mcs_path("serviceexports", k[0], k[1]), body)
            if not st.reachable:
                return


__all__ = ["Reconciler", "MemberState"]
