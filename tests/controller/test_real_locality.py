"""Locality degrades per node and per service, never per cluster: the controller against two REAL
kube-apiservers (MCSDNS_REALK8S; skipped without it). West has Nodes in z1 and z2 and a new
Node without a zone label, with an endpoint on each: the labelled nodes keep their zone's
endpoint (kube-proxy's rule, tests/support/kubeproxy_rule.py, on the slices the real server holds), the
unlabelled one spreads over every cluster. Then nine zones: only the service whose one endpoint
would need nine zone hints (the real server takes at most 8) loses its hints, and the warning
and `mcsdns_controller_locality_degraded` name it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.controller_env import eventually, run_controller
from support.kubeproxy_rule import used
from support.real_fleet import MCS, Real, start_fleet
from support.realk8s import SKIP_REASON, script

from mcsdns.controller.locality import ELSEWHERE, ZONE_LABEL

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
Obj = dict[str, Any]
IDS = {"a": "east", "b": "west"}
SLICES = "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices"
WEST = [("10.2.0.1", "z1", "b-1"), ("10.2.0.2", "z2", "b-2"), ("10.2.0.3", None, "b-new")]
EAST = [("10.1.0.1", "z1", "a-1")]


def node(r: Real, name: str, zone: str | None) -> None:
    md: Obj = {"name": name, "labels": {ZONE_LABEL: zone} if zone else {}}
    r.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": md})


def export(r: Real, name: str, eps: Sequence[tuple[str, str | None, str]]) -> None:
    """Service shop/`name` (PreferSameZone), its slice with `eps` (address, zone, node), its export."""
    r.create("/api/v1/namespaces/shop/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                 "trafficDistribution": "PreferSameZone"}})
    r.create(SLICES, {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{name}-src", "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [dict({"addresses": [ip], "nodeName": n, "conditions": {"ready": True}},
                           **({"zone": z} if z else {})) for ip, z, n in eps]})
    r.create(f"/apis/{MCS}/namespaces/shop/serviceexports", {
        "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": name, "namespace": "shop"}})


def imported(r: Real, name: str) -> list[Obj]:
    sel = f"multicluster.kubernetes.io/service-name={name}"
    return list(r.client.list(SLICES, sel))


def hints(r: Real, name: str) -> dict[str, list[str] | None]:
    """Address -> the zone hints the real server holds on the imported slices of shop/`name`."""
    return {e["addresses"][0]: [z["name"] for z in e["hints"]["forZones"]] if e.get("hints") else None
            for s in imported(r, name) for e in s.get("endpoints") or []}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[dict[str, Real]]:
    out = dict(zip(IDS, start_fleet(tmp_path, [f"mcsdns-loc-{n}" for n in IDS]), strict=True))
    try:
        for n, cid in IDS.items():
            r = out[n]
            r.create("/apis/about.k8s.io/v1alpha1/clusterproperties", {
                "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": cid}})
            r.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": "shop"}})
        yield out
    finally:
        for r in out.values():
            r.down()


def test_an_unlabelled_node_and_nine_zones_degrade_only_that_node_and_that_service(
        fleet: dict[str, Real], tmp_path: Path) -> None:
    a, b = fleet["a"], fleet["b"]
    node(a, "a-1", "z1")
    for _, z, n in WEST:
        node(b, n, z)
    export(a, "web", EAST)
    export(b, "web", WEST)
    args = ["--cluster", f"a={a.kubeconfig}", "--cluster", f"b={b.kubeconfig}"]
    with run_controller(args, tmp_path) as ctl:
        want = {"10.2.0.1": ["z1"], "10.2.0.2": ["z2"], "10.2.0.3": [ELSEWHERE], "10.1.0.1": [ELSEWHERE]}
        eventually(lambda: hints(b, "web") == want, what=f"west's hints {want}")
        print("west's hints beside an unlabelled node:", hints(b, "web"))
        slices = imported(b, "web")
        assert used(slices, "b-1", "z1") == {"10.2.0.1"} and used(slices, "b-2", "z2") == {"10.2.0.2"}
        assert used(slices, "b-new", None) == {"10.2.0.1", "10.2.0.2", "10.2.0.3", "10.1.0.1"}
        eventually(lambda: ctl.metrics().get('mcsdns_controller_locality_unlabeled_nodes{member="b"}') == 1)
        assert "cluster b: Node b-new has no topology.kubernetes.io/zone label: it spreads over every " \
               "cluster" in ctl.logs()
        assert not any(k.startswith("mcsdns_controller_locality_degraded") for k in ctl.metrics())

        export(b, "one", [("10.2.1.1", "z1", "b-1")])  # one endpoint: 1 + 8 uncovered zones below
        eventually(lambda: hints(b, "one") == {"10.2.1.1": ["z1", "z2"]})
        for i in range(3, 10):
            node(b, f"b-{i}", f"z{i}")
        eventually(lambda: hints(b, "one") == {"10.2.1.1": None}, what="no hints for shop/one")
        rest = [f"z{i}" for i in range(3, 10)]
        # 8 zone hints at most: kept (web is reconciled apart from one: waited for too)
        want = {"10.2.0.1": ["z1", *rest], "10.2.0.2": ["z2", *rest], "10.2.0.3": rest,
                "10.1.0.1": [ELSEWHERE]}
        eventually(lambda: hints(b, "web") == want, what=f"west's hints {want}")
        slices = imported(b, "web")
        assert used(slices, "b-1", "z1") == {"10.2.0.1"}
        assert used(slices, "b-5", "z5") == {"10.2.0.1", "10.2.0.2", "10.2.0.3"}
        assert "cluster b: Service shop/one: no locality hints: an endpoint would need 9 zone hints" \
            in ctl.logs()
        assert "Service shop/web: no locality hints" not in ctl.logs()
        m = ctl.metrics()
        assert {k: v for k, v in m.items() if k.startswith("mcsdns_controller_locality_degraded")} == {
            'mcsdns_controller_locality_degraded{member="b",reason="too-many-zones",service="shop/one"}': 1}
        # no write refused (the client says "HTTP 422 Invalid"; a bare "422" can be a timestamp's ms)
        assert not [line for line in ctl.logs().splitlines() if "HTTP 422" in line or "Invalid" in line]
