"""ServiceImports: the merged service as each importing member gets it, and its status."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from ...kube.resources import SERVICE_IMPORTS
from ..contract import Contract, Kind, Obj, Reads, Target, port_view
from ..engine import Engine
from ..exports import APP_MANAGED_BY, CONTROLLER, labels
from ..member.client import MemberClient
from .derivedservice import DERIVED_ANNOTATION

log = logging.getLogger("mcsdns.controller")


class ServiceImport(Contract):
    """One ServiceImport per exported service in every member that has its namespace."""

    kind = Kind.SERVICE_IMPORT
    api = SERVICE_IMPORTS
    reads: ClassVar[Reads] = {"serviceimports": ()}  # of someone else's import: whose it is
    # The annotations we set: compared, and replaced (others' kept) on update.
    ANNOTATIONS: ClassVar[tuple[str, ...]] = (DERIVED_ANNOTATION,)
    unviewed = (*Contract.unviewed, "status")  # compared by `status_equal`

    def desired(self, m: MemberClient, key: tuple[str, str], t: Target) -> Obj:
        mg = t.merged
        spec: dict[str, Any] = {"type": mg.type, "ports": [p.to_dict() for p in mg.ports],
                                "sessionAffinity": mg.session_affinity}
        if mg.session_affinity_config:
            spec["sessionAffinityConfig"] = mg.session_affinity_config
        if t.ips is not None and t.ips[0]:
            spec["ips"], spec["ipFamilies"] = t.ips
        elif mg.ip_families:
            spec["ipFamilies"] = list(mg.ip_families)
        status: dict[str, Any] = {"clusters": [{"cluster": c} for c in mg.clusters]}
        if m.mcs_version == "v1beta1":
            status["endpointSliceObjects"] = "Present"
        meta: dict[str, Any] = {"name": key[1], "namespace": key[0], "labels": {APP_MANAGED_BY: CONTROLLER}}
        if t.annotations:
            meta["annotations"] = dict(t.annotations)
        return {"apiVersion": m.mcs_api_version(), "kind": "ServiceImport",
                "metadata": meta, "spec": spec, "status": status}

    def view(self, obj: Obj) -> dict[str, Any]:
        spec = obj.get("spec") or {}
        ann = (obj.get("metadata") or {}).get("annotations") or {}
        return {"type": spec.get("type"), "ports": [port_view(p) for p in spec.get("ports") or []],
                "ips": list(spec.get("ips") or []), "ipFamilies": list(spec.get("ipFamilies") or []),
                "sessionAffinity": spec.get("sessionAffinity") or "None",
                "sessionAffinityConfig": spec.get("sessionAffinityConfig") or None,
                "managed": labels(obj).get(APP_MANAGED_BY),
                "annotations": {a: ann.get(a) for a in self.ANNOTATIONS}}

    def merge(self, have: Obj, want: Obj) -> Obj:
        body = dict(have, apiVersion=want["apiVersion"], kind="ServiceImport", spec=want["spec"])
        md = dict(have["metadata"], labels=dict(labels(have), **want["metadata"]["labels"]))
        ann = {a: v for a, v in (md.get("annotations") or {}).items() if a not in self.ANNOTATIONS}
        ann.update(want["metadata"].get("annotations") or {})
        md["annotations"] = ann
        body["metadata"] = md
        return body

    def status_equal(self, have: Obj, want: Obj) -> bool:
        h, w = have.get("status") or {}, want.get("status") or {}
        clusters = sorted(str(c.get("cluster")) for c in h.get("clusters") or [])
        # A server whose schema lacks endpointSliceObjects prunes it: absent counts as equal.
        eso = h.get("endpointSliceObjects")
        return clusters == [c["cluster"] for c in w.get("clusters") or []] and (
            eso is None or eso == w.get("endpointSliceObjects"))

    # --- steps of a member's sync ------------------------------------------------------
    def claim(self, eng: Engine, t: Target) -> bool:
        """Read ours; stop when someone else's import has the name."""
        have = eng.mc.service_import(eng.key)
        if have is not None and not self.ours(have):
            eng.foreign(f"ServiceImport in cluster {eng.mc.member.cluster_id} is managed by someone else",
                        "ServiceImport %s/%s is not managed by %s; leaving it alone", *eng.key, CONTROLLER)
            return False
        t.service_import = have
        return True

    def sync(self, eng: Engine, t: Target) -> bool:
        """Create or update it; stop when that fails (the rest is owned by it)."""
        t.service_import = eng.apply(self, self.desired(eng.mc.member, eng.key, t), t.service_import)
        return t.service_import is not None

    def resync(self, eng: Engine, t: Target) -> bool:
        """Again, once the other kinds have contributed (a derived Service's ClusterIPs)."""
        t.service_import = eng.apply(self, self.desired(eng.mc.member, eng.key, t),
                                     t.service_import) or t.service_import
        return True

    def sync_status(self, eng: Engine, t: Target) -> bool:
        have, want = t.service_import, self.desired(eng.mc.member, eng.key, t)
        if have is None or self.status_equal(have, want):
            return True
        log.info("cluster %s: update ServiceImport %s/%s status", eng.mc.member.name, *eng.key)
        eng.status(self, eng.key, dict(have, apiVersion=want["apiVersion"], kind="ServiceImport",
                                       status=want["status"]))
        return True

    def remove(self, eng: Engine) -> None:
        have = eng.mc.service_import(eng.key)
        if have is not None and self.ours(have):
            eng.delete(self, eng.key)
