"""ServiceImports: the merged service as each importing member gets it, and its status."""

from __future__ import annotations

import logging
from typing import Any

from ..kube.keys import Key
from .derived import DERIVED_ANNOTATION, derived_name
from .exports import APP_MANAGED_BY, CONTROLLER, labels
from .member import MemberView
from .merge import Merged
from .views import import_spec_view, import_status_equal
from .writes import create, put_status, replace

log = logging.getLogger("mcsdns.controller")


def desired_import(mc: MemberView, k: Key, m: Merged,
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


def put_import(mc: MemberView, k: Key, want: dict[str, Any],
                have: dict[str, Any] | None) -> dict[str, Any]:
    m = mc.member
    if have is None:
        log.info("cluster %s: create ServiceImport %s/%s", m.name, *k)
        return create(mc, "serviceimports", m.mcs_path("serviceimports", k[0]), want)
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
    return replace(mc, "serviceimports", m.mcs_path("serviceimports", k[0], k[1]), body)


def put_import_status(mc: MemberView, k: Key, want: dict[str, Any],
                       have: dict[str, Any]) -> dict[str, Any]:
    if import_status_equal(have, want):
        return have
    m = mc.member
    log.info("cluster %s: update ServiceImport %s/%s status", m.name, *k)
    obj = put_status(m, m.mcs_path("serviceimports", k[0], k[1]),
                           dict(have, apiVersion=want["apiVersion"], kind="ServiceImport",
                                status=want["status"]))
    mc.note_written("serviceimports", obj)
    return obj
