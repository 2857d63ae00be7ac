"""Hostile ServiceImports and EndpointSlices: the store never crashes, and no object
creates a name outside its own service's subtree."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcsdns.data.objects import ENDPOINT_SLICE, SERVICE_IMPORT
from mcsdns.dns.names import decode_name
from mcsdns.publish.pipeline import Pipeline

ZONE = "clusterset.local."
STATIC = {ZONE, "dns-version." + ZONE, "svc." + ZONE, "dns." + ZONE, "ns.dns." + ZONE}

label_chars = string.ascii_letters + string.digits + "-._ *\x00é/"
hostile_text = st.one_of(
    st.sampled_from(["web", "db", "shop", "a.b", "evil.shop.svc", "x" * 64, "", "-", "Web",
                     "cluster-a", "a.b.c", "..", "\u00e9", "svc", "1.2.3.4"]),
    st.text(alphabet=label_chars, max_size=70),
)
anything = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 70000), hostile_text),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(hostile_text, c, max_size=3)),
    max_leaves=8,
)
ip = st.one_of(st.sampled_from(["10.0.0.1", "10.0.0.1", "fd00::1", "999.1.1.1", "10.0.0",
                                "::ffff:10.0.0.1", "", "localhost", " 10.0.0.2"]), hostile_text)


@st.composite
def service_import(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "kind": SERVICE_IMPORT,
        "metadata": draw(st.one_of(anything, st.fixed_dictionaries(
            {"name": hostile_text, "namespace": hostile_text}))),
        "spec": draw(st.one_of(anything, st.fixed_dictionaries({
            "type": st.sampled_from(["ClusterSetIP", "Headless", "headless", None, 3]),
            "ips": st.one_of(st.lists(ip, max_size=3), anything),
            "ports": st.one_of(st.lists(st.fixed_dictionaries({
                "name": hostile_text, "port": st.one_of(st.integers(-1, 70000), hostile_text),
                "protocol": st.sampled_from(["TCP", "UDP", "SCTP", "tcp", None])}), max_size=3),
                anything),
        }))),
    }


@st.composite
def endpoint_slice(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "kind": ENDPOINT_SLICE,
        "metadata": {
            "name": draw(hostile_text), "namespace": draw(hostile_text),
            "labels": draw(st.one_of(anything, st.fixed_dictionaries({
                "multicluster.kubernetes.io/service-name": hostile_text,
                "multicluster.kubernetes.io/source-cluster": hostile_text}))),
        },
        "addressType": draw(st.sampled_from(["IPv4", "IPv6", "FQDN", None, 7])),
        "endpoints": draw(st.one_of(anything, st.lists(st.fixed_dictionaries({
            "addresses": st.one_of(st.lists(ip, max_size=3), anything),
            "hostname": st.one_of(st.none(), hostile_text),
            "conditions": st.one_of(anything, st.fixed_dictionaries(
                {"ready": st.one_of(st.booleans(), st.none(), hostile_text)})),
            "zone": st.one_of(st.none(), hostile_text),
        }), max_size=4))),
        "ports": draw(st.one_of(anything, st.lists(st.fixed_dictionaries(
            {"name": hostile_text, "port": st.integers(-1, 70000)}), max_size=2))),
    }


def loaded() -> Pipeline:
    """A pipeline answering from data (without a loop: every change is built at once)."""
    app = Pipeline()
    app.load()
    return app


def _owned(app: Pipeline) -> None:
    """Every zone name is static, a namespace node, or inside its own service's subtree."""
    owner: dict[str, tuple[str, str]] = {}
    for key, names in app.zone.svc_names.items():
        assert key in app.store.imports
        svc = f"{key[1]}.{key[0]}.svc.{ZONE}"
        for n in names:
            text = decode_name(n)
            assert text == svc or text.endswith("." + svc), (text, svc)
            assert owner.setdefault(text, key) == key
    namespaces = {f"{ns}.svc.{ZONE}" for ns, _ in app.store.imports}
    for n in app.zone.names:
        text = decode_name(n)
        assert text in owner or text in STATIC or text in namespaces, text
        assert all(c in string.ascii_lowercase + string.digits + "-._" for c in text), text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(service_import(), endpoint_slice()), max_size=12))
def test_hostile_objects_never_crash_or_leak(objs: list[dict[str, Any]]) -> None:
    app = loaded()
    for o in objs:
        app.store.upsert(o)
    _owned(app)
    for o in objs[::2]:
        app.store.delete(o)
    _owned(app)


def test_huge_object_is_handled() -> None:
    app = loaded()
    eps = [{"addresses": [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"], "hostname": f"p{i}"}
           for i in range(60_000)]
    app.store.upsert({"kind": SERVICE_IMPORT, "metadata": {"name": "big", "namespace": "ns"},
                      "spec": {"type": "Headless"}})
    app.store.upsert({"kind": ENDPOINT_SLICE, "metadata": {"name": "big-a", "namespace": "ns", "labels": {
        "multicluster.kubernetes.io/service-name": "big",
        "multicluster.kubernetes.io/source-cluster": "a"}}, "addressType": "IPv4", "endpoints": eps})
    assert len(app.zone.names) > 60_000
    _owned(app)


def test_dotted_hostname_cannot_reach_another_service() -> None:
    app = loaded()
    for name in ("victim", "attacker"):
        app.store.upsert({"kind": SERVICE_IMPORT, "metadata": {"name": name, "namespace": "ns"},
                          "spec": {"type": "Headless"}})
    app.store.upsert({"kind": ENDPOINT_SLICE, "metadata": {"name": "x", "namespace": "ns", "labels": {
        "multicluster.kubernetes.io/service-name": "attacker",
        "multicluster.kubernetes.io/source-cluster": "a"}}, "addressType": "IPv4", "endpoints": [
        {"addresses": ["10.0.0.1"], "hostname": "h.a.victim.ns.svc.clusterset.local"},
        {"addresses": ["10.0.0.2"], "hostname": "ok"}]})
    _owned(app)
    names = {decode_name(n) for n in app.zone.names}
    assert "ok.a.attacker.ns.svc.clusterset.local." in names
    assert not any("victim" in n for n in names)
    assert app.store.skipped[ENDPOINT_SLICE] == 1
