"""`Reconciler` on plain dicts (tests/support/controller_fakes.py): no API server, no process. What
one reconcile of one service writes into every member, and what it leaves alone."""

from __future__ import annotations

from collections.abc import Sequence

from support.controller_fakes import MCS, FakeView, export_service, member

from mcsdns.controller.ipam import Allocator
from mcsdns.controller.kinds.derivedservice import derived_name
from mcsdns.controller.reconcile import Reconciler
from mcsdns.flags import CIDR, DERIVED

KEY = ("shop", "web")


def reconciler(views: Sequence[FakeView], mode: str = DERIVED) -> Reconciler:
    return Reconciler(views, mode, Allocator(["10.99.0.0/16"]) if mode == CIDR else None, 30.0,
                      clock=lambda: 0.0)


def pair() -> tuple[FakeView, FakeView]:
    a, b = member("a", "east"), member("b", "west")
    export_service(a, "shop", "web", ("10.1.0.5", "10.1.0.6"))
    return a, b


def conditions(v: FakeView, k: tuple[str, str] = KEY) -> dict[str, tuple[str, str]]:
    se = v.member.get("serviceexports", *k) or {}
    return {c["type"]: (c["status"], c["reason"]) for c in (se.get("status") or {}).get("conditions", [])}


def test_every_member_with_the_namespace_gets_the_import_its_service_and_slices() -> None:
    a, b = pair()
    r = reconciler([a, b]).reconcile(KEY)
    assert not r.failed and not r.retry
    for v in (a, b):
        si = v.member.get("serviceimports", *KEY)
        assert si is not None and si["spec"]["type"] == "ClusterSetIP"
        svc = v.member.get("services", "shop", derived_name(KEY))
        assert svc is not None and si["spec"]["ips"] == svc["spec"]["clusterIPs"]  # derived mode
        slices = [s for s in v.member.objects("endpointslices")
                  if s["metadata"]["labels"].get("multicluster.kubernetes.io/source-cluster") == "east"]
        assert len(slices) == 1
        assert sorted(e["addresses"][0] for e in slices[0]["endpoints"]) == ["10.1.0.5", "10.1.0.6"]
        assert slices[0]["metadata"]["ownerReferences"][0]["uid"] == si["metadata"]["uid"]
    assert conditions(a) == {"Valid": ("True", "Valid"), "Ready": ("True", "Exported"),
                             "Conflict": ("False", "NoConflicts")}


def test_a_member_without_the_namespace_gets_nothing() -> None:
    a, _ = pair()
    c = member("c", "north", namespaces=())
    reconciler([a, c]).reconcile(KEY)
    assert c.member.writes == [] and c.member.store == {}


def test_a_second_reconcile_writes_nothing_because_results_went_into_the_cache() -> None:
    a, b = pair()
    rec = reconciler([a, b])
    rec.reconcile(KEY)
    before = len(a.member.writes) + len(b.member.writes)
    assert before >= 8  # import, its status, derived Service, slice; in each member
    again = rec.reconcile(KEY)
    assert not again.retry and len(a.member.writes) + len(b.member.writes) == before


def test_a_new_endpoint_updates_only_the_imported_slices() -> None:
    a, b = pair()
    rec = reconciler([a, b])
    rec.reconcile(KEY)
    a.member.writes.clear()
    b.member.writes.clear()
    src = a.caches["endpointslices"][("shop", "web-abc")]
    src["endpoints"].append({"addresses": ["10.1.0.7"], "conditions": {"ready": True}})
    r = rec.reconcile(KEY)
    assert not r.retry
    assert [w[:2] for w in a.member.writes + b.member.writes] == [("PUT", "endpointslices")] * 2
    imported = [s for s in b.member.objects("endpointslices")]
    assert sorted(e["addresses"][0] for e in imported[0]["endpoints"]) == ["10.1.0.5", "10.1.0.6", "10.1.0.7"]


def test_export_without_a_service_is_not_valid_and_imports_nothing() -> None:
    a, b = member("a", "east"), member("b", "west")
    a.seed("serviceexports", {"apiVersion": MCS, "kind": "ServiceExport",
                              "metadata": {"name": "ghost", "namespace": "shop"}})
    reconciler([a, b]).reconcile(("shop", "ghost"))
    assert conditions(a, ("shop", "ghost"))["Valid"] == ("False", "NoService")
    assert not a.member.objects("serviceimports") and not b.member.objects("serviceimports")


def test_conflicting_types_are_reported_on_every_export() -> None:
    a, b = pair()
    export_service(b, "shop", "web", ("10.2.0.5",), headless=True)
    reconciler([a, b]).reconcile(KEY)
    assert conditions(a)["Conflict"][0] == conditions(b)["Conflict"][0] == "True"


def test_objects_not_managed_by_us_are_never_touched() -> None:
    a, b = pair()
    theirs = b.seed("serviceimports", {"apiVersion": MCS, "kind": "ServiceImport",
                                        "metadata": {"name": "web", "namespace": "shop"},
                                        "spec": {"type": "Headless", "ports": []}})
    r = reconciler([a, b]).reconcile(KEY)
    assert b.member.get("serviceimports", *KEY) == theirs
    assert not any(w[1] == "serviceimports" and w[0] != "POST" for w in b.member.writes)
    assert any("managed by someone else" in f for f in r.failed)
    assert conditions(a)["Ready"] == ("False", "Pending")


def test_unexport_deletes_what_we_wrote_everywhere() -> None:
    a, b = pair()
    rec = reconciler([a, b])
    rec.reconcile(KEY)
    del a.caches["serviceexports"][KEY]
    del a.member.store[("serviceexports", *KEY)]
    rec.reconcile(KEY)
    for v in (a, b):
        assert v.member.get("serviceimports", *KEY) is None
        assert v.member.get("services", "shop", derived_name(KEY)) is None
        assert [s["metadata"]["name"] for s in v.member.objects("endpointslices")] == (
            ["web-abc"] if v is a else [])  # the source slice stays


def test_a_failed_delete_is_retried_until_the_object_is_gone() -> None:
    a, b = pair()
    rec = reconciler([a, b])
    rec.reconcile(KEY)
    del a.caches["serviceexports"][KEY]
    del a.member.store[("serviceexports", *KEY)]
    b.member.failing.add("endpointslices")  # the delete of b's imported slice fails
    assert rec.reconcile(KEY).retry
    assert [s["metadata"]["name"] for s in b.member.objects("endpointslices")]  # still there
    b.member.failing.clear()
    rec.reconcile(KEY)  # the cache kept it, so the retry deletes it
    assert b.member.objects("endpointslices") == []


def test_a_failed_write_asks_for_a_retry_and_says_why() -> None:
    a, b = pair()
    b.member.failing.add("serviceimports")
    r = reconciler([a, b]).reconcile(KEY)
    assert r.retry and r.failed == ["ServiceImport failed in cluster west"]
    assert conditions(a)["Ready"] == ("False", "Pending")
    b.member.failing.clear()
    r = reconciler([a, b]).reconcile(KEY)
    assert not r.retry and conditions(a)["Ready"] == ("True", "Exported")


def test_a_stale_cache_gets_a_conflict_and_a_retry() -> None:
    a, b = pair()
    rec = reconciler([a, b])
    rec.reconcile(KEY)
    si = b.member.store[("serviceimports", *KEY)]
    si["metadata"]["resourceVersion"] = "changed-by-someone"  # the cache has not seen it
    a.caches["endpointslices"][("shop", "web-abc")]["endpoints"].append(
        {"addresses": ["10.1.0.8"], "conditions": {"ready": True}})
    src = a.caches["services"][KEY]
    src["spec"]["ports"].append({"name": "metrics", "port": 9090, "protocol": "TCP"})
    r = rec.reconcile(KEY)
    assert r.retry
    b.refresh()
    assert not rec.reconcile(KEY).retry


def test_cidr_mode_allocates_one_clusterset_ip_kept_across_reconciles() -> None:
    a, b = pair()
    rec = reconciler([a, b], CIDR)
    rec.reconcile(KEY)
    ips = {v.member.name: (v.member.get("serviceimports", *KEY) or {})["spec"]["ips"] for v in (a, b)}
    assert ips["a"] == ips["b"] and ips["a"][0].startswith("10.99.")
    assert not a.member.get("services", "shop", derived_name(KEY))  # no derived Service in cidr mode
    fresh = reconciler([a, b], CIDR)
    fresh.adopt()  # a restarted controller keeps the address its imports carry
    fresh.reconcile(KEY)
    assert (b.member.get("serviceimports", *KEY) or {})["spec"]["ips"] == ips["b"]


def test_all_keys_are_exports_and_what_we_own() -> None:
    a, b = pair()
    rec = reconciler([a, b])
    rec.reconcile(KEY)
    assert rec.all_keys() == {KEY}
    assert b.keys() == {KEY}  # b has no export, only what we wrote
