"""The locality rule alone (`controller.locality.plan`): which hints each endpoint gets in a
member, from its Nodes' zones and its own endpoints, and when there are none."""

from __future__ import annotations

from typing import Any

from mcsdns.controller.locality import (
    ELSEWHERE,
    NO_NODES,
    NO_ZONE,
    NOT_EXPORTED,
    NOT_KNOWN,
    TOO_MANY,
    UNLABELED,
    NodeZones,
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
             ("PreferSameZone", nodes(a="z1", b=None), own, UNLABELED),
             ("PreferSameZone", nodes(**{f"n{i}": f"z{i}" for i in range(9)}), own, TOO_MANY),
             ("PreferSameZone", nodes(a="z1"), None, NOT_EXPORTED),
             ("PreferSameZone", nodes(a="z1"), [{"endpoints": [ep("10.0.0.1")]}], NO_ZONE)]
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


def test_same_node_hints_only_where_own_endpoints_name_their_node() -> None:
    p = plan("PreferSameNode", "west", nodes(n1="z1"), [{"endpoints": [ep("10.0.0.1", "z1", node="n1")]}])
    assert p.hints("west", ep("10.0.0.1", "z1", node="n1")) == {"forZones": [{"name": "z1"}],
                                                                "forNodes": [{"name": "n1"}]}
    assert p.hints("west", ep("10.0.0.2", "z1")) == {"forZones": [{"name": "z1"}]}
    assert p.hints("east", ep("10.1.0.1")) == {"forZones": [{"name": ELSEWHERE}],
                                               "forNodes": [{"name": ELSEWHERE}]}


def test_zone_tracker_reports_only_changes_the_hints_depend_on() -> None:
    t = ZoneTracker()
    assert t.update("n1", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}}})
    assert not t.update("n1", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}, "x": 1}})
    assert not t.update("n2", {"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}}})  # same zones
    assert t.update("n3", {"metadata": {}})  # the first unlabeled Node
    assert t.current() == NodeZones(frozenset({"z1"}), frozenset({"n1", "n2", "n3"}), ("n3",))
    assert t.update("n3", None) and not t.update("n2", None) and t.update("n1", None)  # no Nodes left
    assert t.current() == NodeZones()
