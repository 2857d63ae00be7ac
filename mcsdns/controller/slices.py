"""Imported EndpointSlices: one per source slice per exporting cluster, in every importing member."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from ..kube.keys import Key, key_of
from ..kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL
from .derived import derived_name
from .exports import CONTROLLER, MANAGED_BY, SERVICE_NAME, labels
from .member import MemberView
from .merge import PortSpec
from .views import SLICE_LABELS, endpoint_view, slice_ports, slice_view
from .writes import Result, create, delete, replace, write

log = logging.getLogger("mcsdns.controller")
BASE = "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices"


def slice_name(service: str, cluster: str, source_slice: str) -> str:
    digest = hashlib.sha256(f"{cluster}/{source_slice}".encode()).hexdigest()[:10]
    return f"{service[:200]}-{digest}"


def desired_slice(mc: MemberView, k: Key, cluster: str, src: dict[str, Any],
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
            "endpoints": [endpoint_view(e) for e in src.get("endpoints") or []],
            "ports": slice_ports(src.get("ports") or [], serving)}


def sync_slices(mc: MemberView, key: Key, want: dict[Key, dict[str, Any]], r: Result) -> None:
    m = mc.member
    have_all = {key_of(s): s for s in mc.our_slices(key) if labels(s).get(MANAGED_BY) == CONTROLLER}
    for sk, d in sorted(want.items()):
        have = have_all.get(sk)
        if have is None:
            log.info("cluster %s: create EndpointSlice %s/%s", m.name, *sk)
            write(mc, r, key, "EndpointSlice", create, mc, "endpointslices",
                        BASE.format(sk[0]), d)
        elif slice_view(have) != slice_view(d):
            log.info("cluster %s: update EndpointSlice %s/%s", m.name, *sk)
            body = dict(d, metadata=dict(have["metadata"], labels=dict(
                {k: v for k, v in labels(have).items() if k not in SLICE_LABELS}, **labels(d)),
                ownerReferences=d["metadata"]["ownerReferences"]))
            write(mc, r, key, "EndpointSlice", replace, mc, "endpointslices",
                        f"{BASE.format(sk[0])}/{sk[1]}", body)
    for sk in sorted(set(have_all) - set(want)):
        log.info("cluster %s: delete EndpointSlice %s/%s", m.name, *sk)
        write(mc, r, key, "delete EndpointSlice", delete, mc, "endpointslices",
                    f"{BASE.format(sk[0])}/{sk[1]}", sk)
