"""Applying an object costs time linear in its size: no linear scan inside a loop over its
ports, endpoints or addresses (a 10k-port ServiceImport stalled the event loop 5.8 s).

Each case applies an object of N and of 8N items, as the server does (the store parses it,
the service's records are built), and compares the CPU times: linear work costs about 8x,
a scan per item about 64x. Ratios of the same run, each the best of a few repeats, so a busy
machine slows both sides alike; the bound sits between the two by a wide margin.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import pytest

from mcsdns.data.store import Store
from mcsdns.dns.names import encode_name
from mcsdns.kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL
from mcsdns.zone.records import service_records

ZONE = encode_name("clusterset.local")
SMALL, GROWTH = 2000, 8
BOUND = 24  # linear: ~8-10; a scan per item: ~40-60


def _ip(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def _import(spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "ServiceImport", "metadata": {"name": "web", "namespace": "ns"}, "spec": spec}


def _slice(endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "web-c1", "namespace": "ns",
                         "labels": {SERVICE_NAME_LABEL: "web", SOURCE_CLUSTER_LABEL: "c1"}},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "endpoints": endpoints}


HEADLESS = _import({"type": "Headless"})

# name -> the objects (import, then slices) of a service with n items
CASES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "named ports": lambda n: [_import({"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [
        {"name": f"p{i}", "protocol": "TCP", "port": i % 65535 + 1} for i in range(n)]})],
    "endpoints sharing a hostname": lambda n: [HEADLESS, _slice(
        [{"addresses": [_ip(i)], "hostname": "web"} for i in range(n)])],
    "ClusterSetIP ips": lambda n: [_import({"type": "ClusterSetIP", "ips": [_ip(i) for i in range(n)]})],
    "addresses of one endpoint": lambda n: [HEADLESS, _slice(
        [{"addresses": [_ip(i) for i in range(n)]}])],
}


def _apply_cpu(objs: list[dict[str, Any]]) -> float:
    """CPU seconds to apply `objs` to an empty store and build the service's records."""
    store = Store()
    gc.disable()
    try:
        t = time.process_time()
        for obj in objs:
            store.upsert(obj)
        si, slices = store.service(("ns", "web"))
        assert si is not None
        names = service_records(si, slices, ZONE)
        spent = time.process_time() - t
    finally:
        gc.enable()
    assert names
    return spent


def _best(make: Callable[[int], list[dict[str, Any]]], n: int, repeats: int) -> float:
    return min(_apply_cpu(make(n)) for _ in range(repeats))


@pytest.mark.parametrize("case", list(CASES))
def test_apply_cost_is_linear(case: str) -> None:
    make = CASES[case]
    small = _best(make, SMALL, 5)
    large = _best(make, SMALL * GROWTH, 2)
    ratio = large / max(small, 1e-4)
    assert ratio < BOUND, (f"{case}: {SMALL * GROWTH} items cost {large:.3f} s, {SMALL} cost "
                           f"{small:.3f} s: {ratio:.0f}x for {GROWTH}x the items (linear: ~{GROWTH}x)")
