"""Locality through the ClusterSetIP: a Service that sets `trafficDistribution` gets, in every
member, imported EndpointSlices whose hints make kube-proxy use that member's own ready
endpoints in the node's zone, then its other own ready endpoints, then every cluster's.
Three test API servers, the controller as a process; the exact hints for each case, and
which endpoints each node uses by kube-proxy's rule (tests/support/kubeproxy_rule.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.controller_checks import args_for, derived, slices_of
from support.controller_env import IDS, Cluster, eventually, run_controller
from support.helpers import REPO
from support.kubeproxy_rule import used
from support.locality_env import (
    B_HINTS,
    ELSEWHERE,
    ENDPOINTS,
    NODES,
    ZONE,
    export,
    hints,
    node,
    service,
    source,
)

SOURCE = "multicluster.kubernetes.io/source-cluster"


def no_hints(cl: Cluster) -> bool:
    h = hints(cl)
    return bool(h) and all(v is None for v in h.values())


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[dict[str, Cluster]]:
    cl = {n: Cluster(n, cid, tmp_path) for n, cid in IDS}
    try:
        for n, c in cl.items():
            c.kube.namespace("shop")
            for nn, z in NODES[n].items():
                c.api.put(node(nn, z))
            c.api.put(service("web", "PreferSameZone"))
            c.api.put(source("web", ENDPOINTS[n]))
        for n in ("a", "b", "c"):  # a's export is the oldest
            cl[n].api.put(export("web"))
        yield cl
    finally:
        for c in cl.values():
            c.close()


def update(cl: Cluster, kind: str, name: str, change: Any, ns: str = "shop") -> None:
    obj = copy.deepcopy(cl.api.get(kind, ns, name))
    assert obj is not None
    change(obj)
    cl.api.put(obj)


def _readiness_flips(b: Cluster) -> None:
    """Only in another zone, then none ready, then back (failback)."""
    b.api.put(source("web", ENDPOINTS["b"], ready={"10.2.0.1": False}))
    eventually(lambda: hints(b)["10.2.0.2"] == {"forZones": ["z1", "z2", "z3"]})
    assert used(slices_of(b, "shop", "web"), "b-1", "z1") == {"10.2.0.2"}
    b.api.put(source("web", ENDPOINTS["b"], ready={"10.2.0.1": False, "10.2.0.2": False}))
    eventually(lambda: hints(b)["10.2.0.1"] == {"forZones": ["z1", "z2", "z3"]})
    assert hints(b)["10.1.0.1"] == {"forZones": ELSEWHERE}  # kept: kube-proxy falls back by itself
    assert used(slices_of(b, "shop", "web"), "b-1", "z1") == {"10.1.0.1", "10.3.0.1"}
    b.api.put(source("web", ENDPOINTS["b"], host="h"))  # ready again, and a hostname change
    eventually(lambda: hints(b) == B_HINTS, what="failback")
    assert used(slices_of(b, "shop", "web"), "b-1", "z1") == {"10.2.0.1"}


def _zone_changes(b: Cluster) -> None:
    """A Node's zone changes (z3 gone), then an endpoint's (z2 uncovered)."""
    update(b, "Node", "b-3", lambda n: n["metadata"]["labels"].update({ZONE: "z2"}), ns="")
    eventually(lambda: hints(b)["10.2.0.1"] == {"forZones": ["z1"]}, what="b-3 moved to z2")
    assert hints(b)["10.2.0.2"] == {"forZones": ["z2"]}
    b.api.put(source("web", [("10.2.0.1", "z1", "b-1"), ("10.2.0.2", "z3", "b-2")]))
    eventually(lambda: hints(b)["10.2.0.1"] == {"forZones": ["z1", "z2"]}, what="10.2.0.2 moved to z3")
    assert hints(b)["10.2.0.2"] == {"forZones": ["z2", "z3"]}
    update(b, "Node", "b-3", lambda n: n["metadata"]["labels"].update({ZONE: "z3"}), ns="")
    b.api.put(source("web", ENDPOINTS["b"]))
    eventually(lambda: hints(b) == B_HINTS)


def _unlabeled_then_nine_zones(b: Cluster, ctl: Any) -> None:
    """An unlabeled Node keeps b's hints; nine zones too, until one endpoint would need nine."""
    b.api.put(node("b-4", None))
    eventually(lambda: ctl.metrics().get('mcsdns_controller_locality_unlabeled_nodes{member="b"}') == 1)
    ctl.logged("cluster b: Node b-4 has no topology.kubernetes.io/zone label: it spreads")
    assert hints(b) == B_HINTS and used(slices_of(b, "shop", "web"), "b-4", None) == {
        "10.1.0.1", "10.2.0.1", "10.2.0.2", "10.3.0.1"}
    for i in range(4, 10):
        b.api.put(node(f"b-{i}", f"z{i}"))  # b-4 labelled z4: nine zones
    rest = [f"z{i}" for i in range(3, 10)]
    eventually(lambda: hints(b)["10.2.0.1"] == {"forZones": ["z1", *rest]}, what="eight hints, nine zones")
    b.api.put(source("web", ENDPOINTS["b"], ready={"10.2.0.2": False}))  # 10.2.0.1 would need nine
    eventually(lambda: no_hints(b), what="no hints for an endpoint that would need nine")
    ctl.logged("cluster b: Service shop/web: no locality hints: an endpoint would need 9 zone hints")
    assert ctl.metrics()['mcsdns_controller_locality_degraded{member="b",reason="too-many-zones",'
                         'service="shop/web"}'] == 1
    b.api.put(source("web", ENDPOINTS["b"]))
    eventually(lambda: hints(b)["10.2.0.2"] == {"forZones": ["z2", *rest]})
    assert not any(k.startswith("mcsdns_controller_locality_degraded") for k in ctl.metrics())
    for i in range(4, 10):
        b.api.delete("Node", "", f"b-{i}")


def _field_removed(a: Cluster, b: Cluster, c: Cluster) -> None:
    """The field removed in one export (a Conflict, the oldest's value kept), then in all."""
    update(b, "Service", "web", lambda s: s["spec"].pop("trafficDistribution"))
    eventually(lambda: b.kube.conditions("shop", "web").get("Conflict", {}).get("reason")
               == "TrafficDistributionConflict")
    assert 'Using "PreferSameZone" from oldest service export in "east"' in \
        b.kube.conditions("shop", "web")["Conflict"]["message"]
    for cl in (a, c):
        update(cl, "Service", "web", lambda s: s["spec"].pop("trafficDistribution"))
    for cl in (a, b):
        eventually(lambda cl=cl: no_hints(cl), what=f"no hints in {cl.name}")
    eventually(lambda: "trafficDistribution" not in (b.api.get("Service", "shop", derived("shop", "web"))
                                                     or {"spec": {"trafficDistribution": "?"}})["spec"])
    assert b.kube.conditions("shop", "web")["Conflict"]["status"] == "False"

def test_hints_for_every_case_and_which_endpoints_each_node_uses(fleet: dict[str, Cluster],
                                                               tmp_path: Path) -> None:
    a, b, c = fleet["a"], fleet["b"], fleet["c"]
    with run_controller(args_for(a, b, c), tmp_path) as ctl:
        # local endpoints in the node's zone; a zone without one (z3) uses every local endpoint;
        # a's endpoint in a zone named as one of b's (z1) is hinted elsewhere
        eventually(lambda: hints(b) == B_HINTS, what=f"b's hints {B_HINTS}")
        assert {n: used(slices_of(b, "shop", "web"), n, z) for n, z in NODES["b"].items()} == {
            "b-1": {"10.2.0.1"}, "b-2": {"10.2.0.2"}, "b-3": {"10.2.0.1", "10.2.0.2"}}
        eventually(lambda: hints(a) == {"10.1.0.1": {"forZones": ["z1"]}, "10.2.0.1": {"forZones": ELSEWHERE},
                                        "10.2.0.2": {"forZones": ELSEWHERE},
                                        "10.3.0.1": {"forZones": ELSEWHERE}})
        assert used(slices_of(a, "shop", "web"), "a-1", "z1") == {"10.1.0.1"}
        # a node without a zone label: hints in c all the same, and c-1 uses every endpoint
        c_hints = {"10.1.0.1": {"forZones": ELSEWHERE}, "10.2.0.1": {"forZones": ELSEWHERE},
                   "10.2.0.2": {"forZones": ELSEWHERE}, "10.3.0.1": {"forZones": ["zc"]}}
        eventually(lambda: hints(c) == c_hints, what=f"c's hints {c_hints}")
        assert used(slices_of(c, "shop", "web"), "c-1", None) == {"10.1.0.1", "10.2.0.1", "10.2.0.2",
                                                                    "10.3.0.1"}
        eventually(lambda: ctl.metrics().get('mcsdns_controller_locality_unlabeled_nodes{member="c"}') == 1)
        assert "cluster c: Node c-1 has no topology.kubernetes.io/zone label: it spreads over every " \
               "cluster" in ctl.logs()
        svc = b.api.get("Service", "shop", derived("shop", "web"))
        assert svc is not None and svc["spec"]["trafficDistribution"] == "PreferSameZone"
        _readiness_flips(b)
        _zone_changes(b)
        _unlabeled_then_nine_zones(b, ctl)
        _field_removed(a, b, c)


def test_prefer_same_node_hints_nodes_where_endpoints_name_them(fleet: dict[str, Cluster],
                                                               tmp_path: Path) -> None:
    a, b, c = fleet["a"], fleet["b"], fleet["c"]
    for cl in (a, b, c):
        update(cl, "Service", "web", lambda s: s["spec"].update(trafficDistribution="PreferSameNode"))
    with run_controller(args_for(a, b, c), tmp_path):
        want = {"10.2.0.1": {"forZones": ["z1", "z3"], "forNodes": ["b-1"]},
                "10.2.0.2": {"forZones": ["z2", "z3"], "forNodes": ["b-2"]},
                "10.1.0.1": {"forZones": ELSEWHERE, "forNodes": ELSEWHERE},
                "10.3.0.1": {"forZones": ELSEWHERE, "forNodes": ELSEWHERE}}
        eventually(lambda: hints(b) == want, what=f"b's hints {want}")
        assert {n: used(slices_of(b, "shop", "web"), n, z) for n, z in NODES["b"].items()} == {
            "b-1": {"10.2.0.1"}, "b-2": {"10.2.0.2"}, "b-3": {"10.2.0.1", "10.2.0.2"}}


def locality_lines(*clusters: Cluster) -> dict[str, tuple[str, str]]:
    """`mcsdns diagnose`'s locality lines: member -> (status, message)."""
    args = [a for cl in clusters for a in ("--cluster", f"{cl.name}={cl.kubeconfig}")]
    out = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", "--output", "json", *args],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode in (0, 1), out.stderr
    return {r["cluster"]: (r["status"], r["message"]) for r in json.loads(out.stdout)["results"]
            if r["check"] == "locality"}


def test_diagnose_says_where_locality_is_active_and_why_not(fleet: dict[str, Cluster],
                                                            tmp_path: Path) -> None:
    a, b, c = fleet["a"], fleet["b"], fleet["c"]
    with run_controller(args_for(a, b, c), tmp_path):
        eventually(lambda: hints(b) == B_HINTS)
        lines = locality_lines(a, b, c)
    assert lines["a"][0] == "OK" and lines["a"][1].startswith("active")
    assert lines["b"] == ("OK", "active: a node uses this cluster's ready endpoints in its zone; zones "
                          "without a local endpoint (z3) use every local one; other clusters' only when this "
                          "one has none ready")
    assert lines["c"] == ("WARN", "active: a node uses this cluster's ready endpoints in its zone; other "
                          "clusters' only when this one has none ready; 1 Node(s) without the "
                          "topology.kubernetes.io/zone label (e.g. c-1) spread over every cluster")
    update(b, "Service", "web", lambda s: s["spec"].pop("trafficDistribution"))  # not the oldest: a conflict
    assert locality_lines(a, b, c)[""][1] == ('Conflicting traffic distribution. Using "PreferSameZone" from '
                                              'oldest service export in "east". 1/3 clusters disagree.')


def test_nodes_that_cannot_be_read_cost_locality_not_the_member(fleet: dict[str, Cluster],
                                                                tmp_path: Path) -> None:
    """An identity without the new nodes permission (RBAC not updated): b still imports every
    endpoint, with no hints, a warning and a metric; hints once the permission is granted."""
    a, b, c = fleet["a"], fleet["b"], fleet["c"]
    b.api.deny("nodes", ("list", "watch"))
    with run_controller(args_for(a, b, c), tmp_path) as ctl:
        eventually(lambda: len(hints(b)) == 4 and no_hints(b), what="b imports everything, without hints")
        eventually(lambda: ctl.metrics().get('mcsdns_controller_locality_degraded{member="b",'
                                             'reason="nodes-unreadable",service="shop/web"}') == 1)
        assert ctl.metrics()['mcsdns_controller_member_reachable{member="b"}'] == 1
        ctl.logged("cluster b: cannot read the Nodes' zones (locality hints): ")
        b.api.allow()
        eventually(lambda: hints(b) == B_HINTS, what="hints once the Nodes are readable")


def test_a_restart_makes_no_writes(fleet: dict[str, Cluster], tmp_path: Path) -> None:
    """The hints are in place when the controller starts again: it waits for the Nodes' zones
    before its first pass, so it neither drops nor rewrites them."""
    cl = list(fleet.values())
    with run_controller(args_for(*cl), tmp_path, name="first"):
        eventually(lambda: hints(fleet["b"]) == B_HINTS and not no_hints(fleet["a"]))
        time.sleep(1)
    before = [c.writes() for c in cl]
    fleet["b"].api.slow_gets["/api/v1/nodes"] = 1.5  # b's Nodes come last
    with run_controller(args_for(*cl), tmp_path, name="second") as ctl:
        eventually(ctl.ready, what="second controller ready")
        time.sleep(1)
    assert [c.writes() for c in cl] == before
    assert hints(fleet["b"]) == B_HINTS
