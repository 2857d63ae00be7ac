"""reconcile(key): one service's desired state in every member, from the informer caches.

Each kind has its module: `imports` (ServiceImports and their status), `derived`
(derived Services), `slices` (imported EndpointSlices), `status` (the export's
conditions); `views` holds what is compared, `writes` the one write and error policy.
This module decides which members get what, and in which order.

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

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..kube.keys import Key, key_of
from .derived import cluster_ips, derived_name, put_derived
from .exports import (
    CONTROLLER,
    ExportState,
    is_ours,
    read_export,
)
from .imports import desired_import, put_import, put_import_status
from .ipam import Allocator, Exhausted
from .member import MemberView
from .merge import CLUSTERSET_IP, Merged, PortSpec, merge, serving_ports, unserved_message
from .slices import desired_slice, sync_slices
from .status import sync_status
from .writes import Result, delete, write

log = logging.getLogger("mcsdns.controller")

DERIVED, CIDR = "derived", "cidr"


Exports = list[tuple[MemberView, ExportState]]


class Reconciler:
    """Brings one service key to its desired state in every reachable member.

    Invariants: it writes only differences from the informer caches, and updates with the
    cached resourceVersion; it never updates or deletes an object without our managed-by
    label; every write's result goes back into the cache; a failed write marks the key
    for a retry and is named in the export's Ready condition.
    """

    def __init__(self, members: Sequence[MemberView], mode: str, allocator: Allocator | None,
                 endpoint_ttl: float, clock: Callable[[], float] = time.monotonic, workers: int = 16) -> None:
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
    def live(self, mc: MemberView) -> bool:
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
                for k, si in mc.imports():
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
                sync_status(mc, key, ex, merged, r)
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

    # --- one member ---------------------------------------------------------------
    def _sync_member(self, mc: MemberView, key: Key, merged: Merged | None, exports: Exports,
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
        want = desired_import(mc, key, merged, ips, derived)
        si = write(mc, r, key, "ServiceImport", put_import, mc, key, want, have)
        if si is None:
            return
        uid = (si.get("metadata") or {}).get("uid")
        if derived:
            svc = write(mc, r, key, "Service", put_derived, mc, key, merged, si, svc)
            if svc is not None and cluster_ips(svc)[0] and cluster_ips(svc) != ips:
                want = desired_import(mc, key, merged, cluster_ips(svc), True)
                si = write(mc, r, key, "ServiceImport", put_import, mc, key, want, si) or si
        for extra in mc.our_services(key):
            if not derived or key_of(extra)[1] != derived_name(key):
                self._delete_derived(mc, key, extra, r)
        write(mc, r, key, "ServiceImport status", put_import_status, mc, key, want, si)
        want_slices: dict[Key, dict[str, Any]] = {}
        for _src, ex in exports:
            if ex.export is None:
                continue
            for s in ex.slices:
                d = desired_slice(mc, key, ex.export.cluster, s, uid, derived, ex.serving)
                want_slices[key_of(d)] = d
        sync_slices(mc, key, want_slices, r)

    def _remove(self, mc: MemberView, key: Key, have: dict[str, Any] | None, r: Result) -> None:
        """Nothing of this service belongs in this member: delete what of ours is there."""
        sync_slices(mc, key, {}, r)
        for svc in mc.our_services(key):
            self._delete_derived(mc, key, svc, r)
        if have is not None and is_ours(have):
            log.info("cluster %s: delete ServiceImport %s/%s", mc.member.name, *key)
            write(mc, r, key, "delete ServiceImport", delete, mc, "serviceimports",
                        mc.member.mcs_path("serviceimports", key[0], key[1]), key)

    def _delete_derived(self, mc: MemberView, key: Key, svc: dict[str, Any], r: Result) -> None:
        sk = key_of(svc)
        log.info("cluster %s: delete Service %s/%s", mc.member.name, *sk)
        write(mc, r, key, "delete Service", delete, mc, "services",
                    f"/api/v1/namespaces/{sk[0]}/services/{sk[1]}", sk)

    # --- ServiceImport ------------------------------------------------------------
    # --- derived Service ----------------------------------------------------------
    # --- EndpointSlices -----------------------------------------------------------

__all__ = ["Reconciler", "DERIVED", "CIDR"]
