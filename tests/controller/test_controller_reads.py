"""The controller's informer trim derives from what its kinds declare they read: a trimmed
object of someone else's gives every reader the same result as the full one (over generated
objects), and each declared field is needed (dropping it changes what a reader sees)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.controller_fakes import FakeMember

from mcsdns.controller.contract import Target
from mcsdns.controller.exports import (
    APP_MANAGED_BY,
    CONTROLLER,
    MANAGED_BY,
    SERVICE_NAME,
    is_ours,
    labels,
    read_export,
)
from mcsdns.controller.kinds import ENDPOINT_SLICES
from mcsdns.controller.kinds.fields import CACHE_FIELDS, tree, trim
from mcsdns.controller.kinds.reads import OWNER_FIELDS, reads, trim_for
from mcsdns.controller.locality import Plan
from mcsdns.controller.merge import CLUSTERSET_IP, Merged, PortSpec
from mcsdns.kube.apiclient.keys import key_of

Obj = dict[str, Any]


SERVING: dict[str, PortSpec | None] = {"http": PortSpec("web", "TCP", 80), "gone": None}
TARGET = Target(Merged(CLUSTERSET_IP, [], "None", None, (), ["east"], "east"), [],
                service_import={"metadata": {"uid": "u1"}})
PLAN = Plan(own="east", extra=("z9",), nodes=True)  # locality hints: an own endpoint's zone and nodeName


# --- what each reader makes of an object -------------------------------------------------
def service_reads(svc: Obj) -> Any:
    ex = read_export("east", {"metadata": {"creationTimestamp": "t"}}, svc)
    return ex.export, ex.invalid, is_ours(svc), labels(svc), key_of(svc)


def slice_reads(s: Obj) -> Any:
    return (ENDPOINT_SLICES.desired_one(FakeMember("b", "west"), ("shop", "web"), TARGET, "east", s, SERVING,
                                        PLAN),
            is_ours(s), labels(s), key_of(s))


def import_reads(si: Obj) -> Any:
    return is_ours(si), labels(si), key_of(si)


def namespace_reads(ns: Obj) -> Any:
    return bool((ns.get("metadata") or {}).get("deletionTimestamp")), key_of(ns)


READERS: dict[str, Callable[[Obj], Any]] = {"services": service_reads, "endpointslices": slice_reads,
                                             "serviceimports": import_reads, "namespaces": namespace_reads}

# --- generated objects: the fields readers know, wrong types, and noise --------------------
scalar = st.one_of(st.none(), st.booleans(), st.integers(-1, 70000), st.sampled_from(
    ["", "TCP", "UDP", "SCTP", "http", "web", "gone", "None", "ClientIP", "IPv4", "IPv6", "10.0.0.1",
     "ClusterIP", "ExternalName", "NodePort", "h2c", "zone-a", "node-1"]))
anything = st.recursive(scalar, lambda c: st.one_of(st.lists(c, max_size=3),
                                                    st.dictionaries(st.sampled_from(["a", "b", "x"]), c,
                                                                    max_size=2)), max_leaves=6)


def maybe(fields: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


port = st.one_of(anything, maybe({"name": scalar, "protocol": scalar, "port": scalar, "appProtocol": scalar,
                                  "targetPort": scalar, "nodePort": scalar}))
metadata = maybe({
    "name": st.sampled_from(["web", "web-abc", "derived-x"]), "namespace": st.just("shop"),
    "resourceVersion": st.sampled_from(["1", "22"]), "uid": st.just("u-9"),
    "deletionTimestamp": st.sampled_from([None, "", "2026-01-01T00:00:00Z"]),
    "labels": st.dictionaries(st.sampled_from([MANAGED_BY, APP_MANAGED_BY, SERVICE_NAME, "app"]),
                              st.sampled_from([CONTROLLER, "other", "web"]), max_size=3),
    "annotations": st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=3), max_size=2),
    "ownerReferences": st.lists(anything, max_size=2), "managedFields": anything})
service = st.fixed_dictionaries({"metadata": metadata}, optional={
    "spec": maybe({"type": scalar, "clusterIP": scalar, "clusterIPs": anything,
                   "ports": st.lists(port, max_size=3), "sessionAffinity": scalar,
                   "sessionAffinityConfig": anything, "ipFamilies": anything, "selector": anything,
                   "externalIPs": anything}),
    "status": anything})
endpoint = st.one_of(anything, maybe({
    "addresses": st.lists(scalar, max_size=2), "hostname": scalar, "zone": scalar, "nodeName": scalar,
    "conditions": st.one_of(anything, maybe({"ready": scalar, "serving": scalar, "terminating": scalar,
                                             "other": scalar})),
    "targetRef": anything, "hints": anything}))
endpoint_slice = st.fixed_dictionaries({"metadata": metadata}, optional={
    "addressType": scalar, "endpoints": st.lists(endpoint, max_size=3), "ports": st.lists(port, max_size=3)})
plain = st.fixed_dictionaries({"metadata": metadata}, optional={"spec": anything, "status": anything})
OBJECTS = {"services": service, "endpointslices": endpoint_slice, "serviceimports": plain,
           "namespaces": plain}


def readable(resource: str, obj: Obj) -> bool:
    try:
        READERS[resource](copy.deepcopy(obj))
    except (TypeError, AttributeError, ValueError, KeyError):
        return False  # a reader that fails on the full object (the informer's own checks come first)
    return True


@pytest.mark.parametrize("resource", sorted(READERS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_trimmed_object_reads_as_the_full_one(resource: str, data: st.DataObject) -> None:
    obj = data.draw(OBJECTS[resource])
    transform = trim_for(resource)
    assert transform is not None
    trimmed = copy.deepcopy(obj)
    transform(trimmed)
    if not readable(resource, obj):
        return
    assert READERS[resource](trimmed) == READERS[resource](obj)
    if is_ours(obj):
        assert trimmed == obj  # ours are kept whole: an update's body starts from them


def test_exports_are_kept_whole() -> None:
    assert trim_for("serviceexports") is None and reads("serviceexports") is None


# --- every declared field is needed --------------------------------------------------------
FULL_SERVICE = {"metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"type": "ClusterIP", "clusterIP": "None", "sessionAffinity": "ClientIP",
                         "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}, "ipFamilies": ["IPv6"],
                         "trafficDistribution": "PreferClose",
                         "ports": [{"name": "web", "protocol": "UDP", "port": 53, "appProtocol": "dns"}]}}
EXAMPLES: dict[str, list[Obj]] = {
    "services": [FULL_SERVICE, {**FULL_SERVICE, "spec": {"type": "ExternalName"}}],
    "endpointslices": [{
        "metadata": {"name": "web-abc", "namespace": "shop", "labels": {SERVICE_NAME: "web"}},
        "addressType": "IPv6",
        "ports": [{"name": "other", "protocol": "UDP", "port": 53, "appProtocol": "dns"}],
        "endpoints": [{"addresses": ["fd00::1"], "hostname": "h", "zone": "z", "nodeName": "n1",
                       "conditions": {"ready": False, "serving": True, "terminating": True}}]}],
    "namespaces": [{"metadata": {"name": "shop", "deletionTimestamp": "2026-01-01T00:00:00Z"}}],
}


@pytest.mark.parametrize("resource", sorted(EXAMPLES))
def test_every_declared_field_is_read(resource: str) -> None:
    fields = reads(resource)
    assert fields is not None
    for f in set(fields) - set(CACHE_FIELDS) - set(OWNER_FIELDS):
        fewer = tree(x for x in fields if x != f)
        changed = False
        for obj in EXAMPLES[resource]:
            trimmed = copy.deepcopy(obj)
            trim(trimmed, fewer)
            changed = changed or READERS[resource](trimmed) != READERS[resource](obj)
        assert changed, f"{resource}: {f} is declared but no reader sees it go"
