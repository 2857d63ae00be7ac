"""A ClusterSetIP service's records come from its ServiceImport alone: churn in its
EndpointSlices (every endpoint of every cluster) rebuilds nothing, bumps no serial and
counts no zone change; a change of its ServiceImport, or a headless service's slices,
still does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import dns.message

from mcsdns.ops.load import BIG_ITEMS
from mcsdns.ops.stats import Stats
from mcsdns.publish.pipeline import Pipeline

NS = "shop"


def _import(name: str, typ: str, ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"namespace": NS, "name": name},
            "spec": {"type": typ, "ips": ips, "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}


def _slice(svc: str, cluster: str, addrs: list[str], ready: bool) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"namespace": NS, "name": f"{svc}-{cluster}", "labels": {
                "multicluster.kubernetes.io/service-name": svc,
                "multicluster.kubernetes.io/source-cluster": cluster}},
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": ready}} for a in addrs]}


def _changes(p: Pipeline) -> float:
    """mcsdns_zone_changes_total, as /metrics shows it."""
    stats = Stats()
    for publish in p.publishers():
        stats.register(publish)
    return stats.snapshot()[("mcsdns_zone_changes_total", ())]


def _a(p: Pipeline, name: str) -> set[str]:
    query = dns.message.make_query(f"{name}.{NS}.svc.clusterset.local.", "A")
    wire = p.handler.respond(query.to_wire(), True)
    assert wire is not None
    return {rd.to_text() for rr in dns.message.from_wire(wire).answer for rd in rr}


def test_slice_churn_of_a_clustersetip_service_changes_nothing() -> None:
    p = Pipeline()
    p.store.apply([_import("web", "ClusterSetIP", ["10.42.0.1"]), _import("db", "Headless", []),
                   _slice("web", "east", ["10.1.0.1"], True), _slice("db", "east", ["10.2.0.1"], True)], [])
    p.load()
    serial, changes = p.served_serial, _changes(p)
    for i in range(20):  # endpoints come and go, become ready and not, in two clusters
        p.store.apply([_slice("web", "east", [f"10.1.0.{i}"], i % 2 == 0),
                       _slice("web", "west", [f"10.3.0.{i}", "10.3.1.1"], True)], [])
    p.store.apply([], [("EndpointSlice", (NS, "web-west"))])
    assert _changes(p) == changes and p.served_serial == serial
    assert _a(p, "web") == {"10.42.0.1"}
    # the ServiceImport itself changes: rebuilt, under a new serial
    p.store.apply([_import("web", "ClusterSetIP", ["10.42.0.2"])], [])
    assert _a(p, "web") == {"10.42.0.2"} and _changes(p) == changes + 1 and p.served_serial != serial
    # a headless service's slices are its records
    p.store.apply([_slice("db", "east", ["10.2.0.1", "10.2.0.2"], True)], [])
    assert _a(p, "db") == {"10.2.0.1", "10.2.0.2"} and _changes(p) == changes + 2
    # turned headless: its slices now count (the last churn left one endpoint, not ready)
    p.store.apply([_import("web", "Headless", [])], [])
    assert _a(p, "web") == set()
    p.store.apply([_slice("web", "east", ["10.1.0.7"], True)], [])
    assert _a(p, "web") == {"10.1.0.7"}


class _Held(Executor):
    """Runs what it is given only when told (`run`): a build stays under way meanwhile."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        self.jobs.append((f, fn, args))
        return f

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for f, fn, args in jobs:
            f.set_result(fn(*args))


def test_an_import_changed_while_its_build_is_under_way_is_built_again() -> None:
    """A ClusterSetIP service large enough to be built off the loop changes while that build
    runs: the build after the swap takes the new ServiceImport (not skipped as unchanged)."""
    ports = [{"protocol": "TCP", "port": n} for n in range(1, BIG_ITEMS + 2)]  # built off the loop

    async def scenario() -> set[str]:
        p, held = Pipeline(), _Held()
        p.builder.loop, p.builder.executor = asyncio.get_running_loop(), held
        p.load()
        while p.builder.lazy:  # the background pass after the load: changes are built from then on
            await asyncio.sleep(0)
        big = _import("web", "ClusterSetIP", ["10.42.0.1"])
        big["spec"]["ports"] = ports
        p.store.apply([big], [])
        assert held.jobs and not p.builder.idle  # under way
        p.store.apply([{**big, "spec": {**big["spec"], "ips": ["10.42.0.2"]}}], [])
        for _ in range(200):
            held.run()
            await asyncio.sleep(0.001)
            if p.builder.idle and not held.jobs:
                break
        return _a(p, "web")

    assert asyncio.run(scenario()) == {"10.42.0.2"}
