"""The locality rule alone (`controller.locality.plan`): which hints each endpoint gets in a
member, from its Nodes' zones and its own endpoints, and when there are none."""

from __future__ import annotations

from typing import Any

import pytest

from mcsdns.controller.locality import (
    ELSEWHERE,
    NO_NODES,
    NOT_EXPORTED,
    NOT_KNOWN,
    OTHERS,
    TOO_MANY,
    NodeZones,
    Verdicts,
    ZoneTracker,
    plan,
)

Obj = dict[str, Any]


def ep(ip: str, zone: str | None = None, ready: bool | None = True, node: str | None = None) -> Obj:
    e: Obj = {"addresses": [ip], "conditions": {} if ready is None else {"ready": ready}}
    if zone:
        e["zone"] = zone
    if node:
        e["nodeName"] = node
    return e


def nodes(**zones: str | None) -> NodeZones:
    return NodeZones.of({"metadata": {"name": n, "labels": {"topology.kubernetes.io/zone": z} if z else {}}}
                        for n, z in zones.items())


def zone_hints(h: Obj | None) -> list[str] | None:
    return None if h is None else [x["name"] for x in h.get("forZones") or []]


def test_own_endpoints_hint_their_zone_and_the_uncovered_ones_others_a_zone_no_node_has() -> None:
    own = [{"endpoints": [ep("10.0.0.1", "z1"), ep("10.0.0.2", "z2", ready=None)]}]
    p = plan("PreferClose", "west", nodes(n1="z1", n2="z2", n3="z3", n4="mcsdns-elsewhere"), own)
    assert p.active and p.extra == ("mcsdns-elsewhere", "z3")
    assert zone_hints(p.hints("west", ep("10.0.0.1", "z1"))) == ["mcsdns-elsewhere", "z1", "z3"]
    assert zone_hints(p.hints("east", ep("10.1.0.1", "z1"))) == [f"{ELSEWHERE}-1"]  # a Node's zone: taken


def test_no_hints_and_why() -> None:
    own: list[Obj] = [{"endpoints": [ep("10.0.0.1", "z1")]}]
    cases = [("PreferSameZone", None, own, NOT_KNOWN), ("PreferSameZone", NodeZones(), own, NO_NODES),
             ("PreferSameZone", nodes(**{f"n{i}": f"z{i}" for i in range(9)}), own, TOO_MANY),
             ("PreferSameZone", nodes(a="z1"), None, NOT_EXPORTED)]
    for td, nz, slices, why in cases:
        p = plan(td, "west", nz, slices)
        assert (p.active, p.why) == (False, why) and p.hints("east", ep("10.1.0.1", "z1")) is None
    assert not plan(None, "west", nodes(a="z1"), own).asked
    unready = [{"endpoints": [ep("10.0.0.9", ready=False)]}]  # no zone, but not ready: no matter
    assert plan("PreferSameZone", "west", nodes(a="z1"), unready).active


def test_an_endpoint_that_would_need_more_than_eight_zone_hints() -> None:
    """With none ready, an own endpoint hints every zone of the Nodes and its own: nine."""
    eight = nodes(**{f"n{i}": f"z{i}" for i in range(8)})
    slices = [{"endpoints": [ep("10.0.0.1", "zx", ready=False), ep("10.0.0.2", "z0", ready=False)]}]
    assert (plan("PreferSameZone", "west", eight, slices).why) == TOO_MANY
    slices[0]["endpoints"][1]["conditions"]["ready"] = True  # z0 covered: 7 + zx = 8 hints
    assert zone_hints(plan("PreferSameZone", "west", eight, slices).hints("west", ep("10.0.0.1", "zx"))) == [
        "z1", "z2", "z3", "z4", "z5", "z6", "z7", "zx"]


def test_an_unlabelled_node_and_an_endpoint_without_a_zone_degrade_no_other_node() -> None:
    """The Node spreads by itself (no zone to match); its endpoint is used where the zone has no
    zoned own endpoint, and nowhere else (a zone no Node has, when every zone has one)."""
    own = [{"endpoints": [ep("10.0.0.1", "z1"), ep("10.0.0.3", node="new")]}]
    p = plan("PreferSameZone", "west", nodes(n1="z1", n2="z2", new=None), own)
    assert p.active and p.extra == ("z2",)
    assert zone_hints(p.hints("west", own[0]["endpoints"][0])) == ["z1", "z2"]
    assert zone_hints(p.hints("west", own[0]["endpoints"][1])) == ["z2"]
    p = plan("PreferSameZone", "west", nodes(n1="z1", new=None), own)
    assert zone_hints(p.hints("west", own[0]["endpoints"][1])) == [ELSEWHERE]


def test_nine_zones_degrade_only_the_services_that_would_need_nine_hints() -> None:
    nine = nodes(**{f"n{i}": f"z{i}" for i in range(9)})
    two = [{"endpoints": [ep("10.0.0.1", "z0"), ep("10.0.0.2", "z1")]}]
    assert zone_hints(plan("PreferSameZone", "west", nine, two).hints("west", ep("10.0.0.1", "z0"))) == [
        "z0", *(f"z{i}" for i in range(2, 9))]
    p = plan("PreferSameZone", "west", nine, [{"endpoints": [ep("10.0.0.1", "z0")]}])
    assert p.why == TOO_MANY and p.detail.startswith("an endpoint would need 9 zone hints")


def test_the_metric_names_the_first_ten_services_and_counts_the_rest() -> None:
    v, p = Verdicts(), plan("PreferSameZone", "west", NodeZones(error="forbidden"), [])
    for i in range(12):
        v.note("b", ("shop", f"s{i:02}"), p)
    v.note("b", ("shop", "s00"), None)  # gone
    got = v.degraded()
    assert got == {**{("b", "nodes-unreadable", f"shop/s{i:02}"): 1 for i in range(1, 11)},
                   ("b", "nodes-unreadable", OTHERS): 1}


def test_same_node_hints_only_where_own_endpoints_name_their_node() -> None:
    p = plan("PreferSameNode", "west", nodes(n1="z1"), [{"endpoints": [ep("10.0.0.1", "z1", node="n1")]}])
    assert p.hints("west", ep("10.0.0.1", "z1", node="n1")) == {"forZones": [{"name": "z1"}],
                                                                "forNodes": [{"name": "n1"}]}
    assert p.hints("west", ep("10.0.0.2", "z1")) == {"forZones": [{"name": "z1"}]}
    assert p.hints("east", ep("10.1.0.1")) == {"forZones": [{"name": ELSEWHERE}],
                                               "forNodes": [{"name": ELSEWHERE}]}


def test_zone_tracker_reports_only_changes_the_hints_depend_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "mcsdns.controller")
    t = ZoneTracker("b")
    assert t.update("n1", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}}})
    assert not t.update("n1", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}, "x": 1}})
    assert not t.update("n2", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}}})  # same zones
    assert not t.update("n3", {"metadata": {}})  # unlabeled: it spreads, the hints stay
    assert t.current() == NodeZones(frozenset({"z1"}), frozenset({"n1", "n2", "n3"}), ("n3",))
    assert "cluster b: Node n3 has no topology.kubernetes.io/zone label: it spreads" in caplog.text
    assert t.update("n3", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z3"}}})  # a new zone
    assert "cluster b: Node n3 is in zone z3" in caplog.text
    assert t.update("n3", None) and not t.update("n2", None) and t.update("n1", None)  # no Nodes left
    assert t.current() == NodeZones()
