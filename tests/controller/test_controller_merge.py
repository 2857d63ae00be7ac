"""Conflict resolution (KEP-1645) and ClusterSetIP allocation, without any API server."""

from __future__ import annotations

import pytest

from mcsdns.controller.ipam import Allocator, Exhausted
from mcsdns.controller.kinds.endpointslice import slice_ports
from mcsdns.controller.merge import CLUSTERSET_IP, HEADLESS, Export, PortSpec, merge, serving_ports

HTTP = PortSpec("http", "TCP", 80)
GRPC = PortSpec("grpc", "TCP", 9090)


def exp(cluster: str, created: str, typ: str = CLUSTERSET_IP, ports: tuple[PortSpec, ...] = (HTTP,),
        affinity: str = "None") -> Export:
    return Export(cluster, created, typ, ports, affinity)


def test_identical_exports_have_no_conflict() -> None:
    m = merge([exp("b", "2024-01-02T00:00:00Z"), exp("a", "2024-01-01T00:00:00Z")])
    assert m.conflict_condition() is None
    assert m.ports == [HTTP] and m.clusters == ["a", "b"] and m.winner == "a"


def test_type_from_oldest_export() -> None:
    m = merge([exp("new", "2024-02-01T00:00:00Z", HEADLESS), exp("old", "2024-01-01T00:00:00Z")])
    assert m.type == CLUSTERSET_IP
    reason, msg = m.conflict_condition() or ("", "")
    assert reason == "TypeConflict"
    assert '"ClusterSetIP"' in msg and '"old"' in msg and "1/2 clusters disagree" in msg


def test_ports_union_merged_by_name_then_protocol_port() -> None:
    old = exp("old", "2024-01-01T00:00:00Z", ports=(HTTP,))
    # same name, other number: the oldest wins; other name on the same number: dropped; grpc added
    new = exp("new", "2024-03-01T00:00:00Z",
              ports=(PortSpec("http", "TCP", 8080), PortSpec("web", "TCP", 80), GRPC))
    m = merge([new, old])
    assert m.ports == [HTTP, GRPC]
    reason, msg = m.conflict_condition() or ("", "")
    assert reason == "PortConflict" and '"old"' in msg


def test_serving_ports_name_first_then_protocol_and_number() -> None:
    http, web = PortSpec("http", "TCP", 80, "http"), PortSpec("web", "TCP", 8080)
    merged = [http, web]
    # a name match on the same protocol wins, whatever the number
    assert serving_ports(merged, (PortSpec("web", "TCP", 80),)) == {"web": web}
    # else the same protocol and number; a merged port serves one port of the export only
    assert serving_ports(merged, (PortSpec("http", "TCP", 81), PortSpec("alt", "TCP", 80))) == {
        "http": http, "alt": None}
    assert serving_ports(merged, (PortSpec("alt", "TCP", 80),)) == {"alt": http}
    # other protocol: none
    assert serving_ports(merged, (PortSpec("http", "UDP", 80),)) == {"http": None}


def test_slice_ports_take_name_protocol_and_app_protocol_of_the_merged_port() -> None:
    http = PortSpec("http", "TCP", 80, "kubernetes.io/h2c")
    serving = serving_ports([http], (PortSpec("web", "TCP", 80), PortSpec("dns", "UDP", 53)))
    src = [{"name": "web", "port": 9080, "protocol": "TCP", "appProtocol": "http"},
           {"name": "dns", "port": 5353, "protocol": "UDP"}, {"name": "other", "port": 1}]
    assert slice_ports(src, serving) == [
        {"name": "http", "protocol": "TCP", "port": 9080, "appProtocol": "kubernetes.io/h2c"},
        {"name": "other", "protocol": "TCP", "port": 1}]


def test_session_affinity_conflict_and_tie_break_by_cluster_id() -> None:
    t = "2024-01-01T00:00:00Z"
    m = merge([exp("b", t, affinity="ClientIP"), exp("a", t)])
    assert m.session_affinity == "None" and m.winner == "a"
    assert (m.conflict_condition() or ("",))[0] == "SessionAffinityConflict"


def test_allocator_stable_adopts_and_releases() -> None:
    a = Allocator(["10.42.0.0/30", "fd00::/120"])
    assert a.families() == ["IPv4", "IPv6"]
    assert a.get(("ns", "x"), ["IPv4", "IPv6"]) == ["10.42.0.1", "fd00::1"]
    assert a.get(("ns", "x"), ["IPv4"]) == ["10.42.0.1"]  # stable
    a.adopt(("ns", "y"), ["10.42.0.1", "10.42.0.2", "192.0.2.1"])  # taken, free, out of range
    assert a.get(("ns", "y"), ["IPv4"]) == ["10.42.0.2"]
    with pytest.raises(Exhausted):
        a.get(("ns", "z"), ["IPv4"])  # a /30 has two hosts
    a.release(("ns", "x"))
    assert a.get(("ns", "z"), ["IPv4"]) == ["10.42.0.1"]
