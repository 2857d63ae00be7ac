"""The C parser (data/_parse.c) against the Python one (data/objects.py): for every raw
ServiceImport and EndpointSlice, generated valid, noisy, malformed and hostile, the C
one either declines (None: the Python one decides) or makes exactly the model the Python
one makes, field by field and type by type, and leaves the object as it was."""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from test_models import endpoint_slice, malformed, noisy, service_import
from test_object_fuzz import endpoint_slice as hostile_slice
from test_object_fuzz import service_import as hostile_import

import mcsdns.data.objects as objects
from mcsdns.data.objects import EndpointSlice, Malformed, ServiceImport

_parse = pytest.importorskip("mcsdns.data._parse", reason="the C extension is not built (no compiler)")

Obj = dict[str, Any]
Model = type[ServiceImport] | type[EndpointSlice]
FAST: dict[Model, Callable[[Any], Any]] = {ServiceImport: _parse.service_import,
                                           EndpointSlice: _parse.endpoint_slice}


def python_parse(model: Model, obj: Obj) -> Any:
    """The Python parser alone (the C one set aside)."""
    fast = objects._C_IMPORT, objects._C_SLICE
    objects._C_IMPORT = None
    objects._C_SLICE = None
    try:
        return model.parse(obj)
    except Malformed as e:
        return e
    finally:
        objects._C_IMPORT = fast[0]
        objects._C_SLICE = fast[1]


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (True is not 1, a str subclass is not a str)."""
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def check(model: Model, obj: Obj) -> bool:
    """The C parser agrees with the Python one on `obj`; whether it made the model."""
    before = copy.deepcopy(obj)
    made = FAST[model](obj)
    assert obj == before, "the C parser changed the object"
    if made is None:
        return False
    want = python_parse(model, obj)
    assert same(made, want), f"C made {made!r}, Python {want!r}, of {obj!r}"
    return True


def plain(rng: random.Random, model: Model) -> Iterator[Obj]:
    """Valid objects as an API server sends them: the manifest of a generated model with
    the fields no parser reads, one address per endpoint, names in any case."""
    make = service_import if model is ServiceImport else endpoint_slice
    for _ in range(1000):
        raw = noisy(rng, make(rng).manifest())
        for e in raw.get("endpoints", []):
            e["addresses"] = e["addresses"][:1]
            if rng.random() < 0.2:
                e.pop("hostname", None)  # derived from the address
            if rng.random() < 0.2:
                e["conditions"] = rng.choice([{}, None, {"ready": None}, {"serving": False, "ready": True}])
        if model is EndpointSlice and rng.random() < 0.3:
            raw["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"] = "Cluster-A.West"
        yield raw


@pytest.mark.parametrize("model", [ServiceImport, EndpointSlice], ids=["ServiceImport", "EndpointSlice"])
def test_plain_objects_are_made_in_c_as_in_python(model: Model) -> None:
    rng = random.Random(7)
    made = [check(model, o) for o in plain(rng, model)]
    # noisy() makes some hostnames invalid or upper case: those that stay valid are made here
    assert sum(made) > 0.8 * len(made), f"the C parser made only {sum(made)} of {len(made)}"


@pytest.mark.parametrize("model", [ServiceImport, EndpointSlice], ids=["ServiceImport", "EndpointSlice"])
@pytest.mark.parametrize("seed", range(4))
def test_malformed_objects_are_declined_or_made_as_in_python(model: Model, seed: int) -> None:
    rng = random.Random(seed)
    made = [check(model, malformed(rng, o)) for o in plain(rng, model)]
    assert 0 < sum(made) < len(made)  # both ways taken


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_import())
def test_hostile_service_imports(obj: Obj) -> None:
    check(ServiceImport, obj)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_slice())
def test_hostile_endpoint_slices(obj: Obj) -> None:
    check(EndpointSlice, obj)


def test_edges_of_each_rule() -> None:
    """Values at each rule's edge, in C and in Python alike."""
    base_es: Obj = {"metadata": {"name": "s", "namespace": "ns", "labels": {
        "multicluster.kubernetes.io/service-name": "web", "multicluster.kubernetes.io/source-cluster": "a"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}]}
    base_si: Obj = {"metadata": {"name": "web", "namespace": "ns"},
                    "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [{"port": 80}]}}
    edits: list[tuple[Model, Callable[[Obj], None]]] = [
        (EndpointSlice, lambda o: o["endpoints"][0].update(hostname="x" * 63)),
        (EndpointSlice, lambda o: o["endpoints"][0].update(hostname="x" * 64)),
        (EndpointSlice, lambda o: o["endpoints"][0].update(hostname="\u212a")),  # Kelvin: lowercases to "k"
        (EndpointSlice, lambda o: o["endpoints"][0].update(hostname="-a")),
        (EndpointSlice, lambda o: o["endpoints"][0].update(zone=7)),
        (EndpointSlice, lambda o: o["endpoints"][0].update(zone="")),
        (EndpointSlice, lambda o: o["endpoints"][0].update(conditions={"ready": 1, "terminating": 1})),
        (EndpointSlice, lambda o: o["endpoints"][0].update(conditions=[])),
        (EndpointSlice, lambda o: o["endpoints"][0].update(addresses=["10.0.0.1\x00"])),
        (EndpointSlice, lambda o: o["endpoints"][0].update(addresses=["010.0.0.1"])),
        (EndpointSlice, lambda o: o["endpoints"][0].update(addresses=["fd00::1"])),
        (EndpointSlice, lambda o: o.update(addressType="IPv6", endpoints=[{"addresses": ["FD00:0::1"]}])),
        (EndpointSlice, lambda o: o.update(addressType=None)),
        (EndpointSlice, lambda o: o.pop("addressType")),
        (EndpointSlice, lambda o: o.update(endpoints=None, ports=None)),
        (EndpointSlice, lambda o: o["metadata"].pop("namespace")),
        (EndpointSlice, lambda o: o["metadata"]["labels"].update(
            {"multicluster.kubernetes.io/source-cluster": "A.b.c"})),
        (EndpointSlice, lambda o: o["metadata"]["labels"].update(
            {"multicluster.kubernetes.io/service-name": "Web"})),
        (EndpointSlice, lambda o: o.update(ports=[{"port": True}])),
        (EndpointSlice, lambda o: o.update(ports=[{"port": 2**70}])),
        (EndpointSlice, lambda o: o.update(ports=[{"port": 65535, "name": "HTTP", "protocol": "SCTP"}])),
        (EndpointSlice, lambda o: o.update(ports=[{"port": 65536}])),
        (EndpointSlice, lambda o: o.update(ports=[{"port": 1, "name": 0}])),
        (EndpointSlice, lambda o: o.update(ports=[{"port": 1, "protocol": ""}])),
        (ServiceImport, lambda o: o["spec"].update(ips=["10.0.0.1", "10.0.0.1", "fd00::1"])),
        (ServiceImport, lambda o: o["spec"].update(ips=[f"10.0.0.{i}" for i in range(20)])),
        (ServiceImport, lambda o: o["spec"].update(type="Headless", ips="x")),
        (ServiceImport, lambda o: o["spec"].update(type="Headless", ips=["not an ip"])),
        (ServiceImport, lambda o: o["metadata"].update(labels="x")),
        (ServiceImport, lambda o: o["metadata"].update(labels=[])),
        (ServiceImport, lambda o: o["metadata"].update(namespace=None)),
    ]
    made = 0
    for model, edit in edits:
        obj = copy.deepcopy(base_si if model is ServiceImport else base_es)
        edit(obj)
        made += check(model, obj)
    assert made >= 12
