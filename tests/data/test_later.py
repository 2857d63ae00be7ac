"""A listed slice's endpoints kept as their JSON text until first read (ops/load.py, stage
3): once read they are the endpoints, drops and messages of the slice parsed at once, and
the store reports the drops then."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec

from mcsdns.data.objects import ENDPOINT_SLICE, EndpointSlice, Malformed
from mcsdns.data.parsing import prepare
from mcsdns.data.store import Store
from mcsdns.kube.names import SERVICE_NAME_LABEL, SOURCE_CLUSTER_LABEL
from mcsdns.ops import load

Obj = dict[str, Any]


def raw_slice(name: str, endpoints: Any, family: str = "IPv4", service: str = "web") -> Obj:
    return {"kind": ENDPOINT_SLICE, "addressType": family, "endpoints": endpoints,
            "metadata": {"namespace": "shop", "name": name, "uid": "x", "labels": {
                SERVICE_NAME_LABEL: service, SOURCE_CLUSTER_LABEL: "cluster-a"}},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}


def ep(addr: Any, **more: Any) -> Obj:
    return {"addresses": [addr], "conditions": {"ready": True}, **more}


BIG = [ep(f"10.1.{i // 250}.{i % 250}", hostname=f"p{i}") for i in range(load.LATER_BYTES // 40)]
CASES: list[Obj] = [
    raw_slice("plain", [ep("10.0.0.1"), ep("10.0.0.2", hostname="db-0", zone="z1")]),
    raw_slice("v6", [ep("2001:db8::1"), ep("10.0.0.1")], family="IPv6"),  # one of the wrong family
    raw_slice("bad-parts", [ep("10.0.0.300"), "not a map", ep("10.0.0.3", hostname="Bad_Host"),
                            {"addresses": []}, ep("10.0.0.4", conditions=[1]), ep(7), ep("10.0.0.5")]),
    raw_slice("shapes", [{"addresses": "10.0.0.1"}, {"addresses": ["10.0.0.2"], "zone": 5},
                         {"addresses": ["10.0.0.3"], "conditions": {"ready": "yes"}}]),
    raw_slice("nested", [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]], ep("10.0.0.1", zone=[[["z"]]])]),
    raw_slice("terminating", [ep("10.0.0.1", conditions={"ready": False, "serving": True,
                                                          "terminating": True})]),
    raw_slice("empty", []),
    raw_slice("null", None),
    raw_slice("falsy", ""),  # as no endpoints, as ever
    raw_slice("not-a-list", "10.0.0.1"),
    raw_slice("a-map", {"addresses": ["10.0.0.1"]}),
    raw_slice("big", BIG),
]


def listed(obj: Obj) -> Obj:
    """`obj` as a list's typed decoder asked to keep the endpoints' text hands it on (json
    where not of the declared shape, as typedlist.hand does)."""
    text = json.dumps(obj).encode()
    try:
        out: Obj = EndpointSlice.SOURCE.decoder(later=True).one(text)
    except msgspec.ValidationError:
        out = json.loads(text)
    return out


def outcome(obj: Obj, later: bool) -> EndpointSlice | str:
    try:
        return EndpointSlice.parse(obj, later)
    except Malformed as e:
        return f"Malformed: {e}"


def test_endpoints_kept_as_text_settle_to_the_slice_parsed_at_once() -> None:
    kept, results = [], {}
    for obj in CASES:
        now = results[obj["metadata"]["name"]] = outcome(copy.deepcopy(obj), later=False)
        then = outcome(listed(obj), later=True)
        if isinstance(then, EndpointSlice):
            if then.later:
                kept.append(obj["metadata"]["name"])
                assert then.endpoints == () and then.n_dropped == 0
                assert then != now  # until read
            then = then.settled()
            assert not then.later and then.settled() is then
        assert then == now, obj["metadata"]["name"]
        assert outcome(listed(obj), later=False) == now  # text parsed at once when not `later`
    assert isinstance(results["falsy"], EndpointSlice) and isinstance(results["a-map"], str)
    # kept: each list small enough; not the big one, nor what is not a list
    assert kept == ["plain", "v6", "bad-parts", "shapes", "nested", "terminating", "empty"]


def test_the_store_reports_drops_when_a_kept_slice_is_first_read() -> None:
    lazy, eager = Store(), Store()
    for obj in CASES[:3]:
        small = listed(obj)
        small["kind"] = ENDPOINT_SLICE
        prepare(small, later=lambda: True)
        lazy.upsert(small)
        eager.upsert(copy.deepcopy(obj))
    assert eager.skipped and not lazy.skipped  # nothing parsed yet
    assert lazy.slices != eager.slices
    assert lazy.service(("shop", "web")) == eager.service(("shop", "web"))
    assert lazy.slices == eager.slices and lazy.skipped == eager.skipped
    before = dict(lazy.skipped)
    lazy.service(("shop", "web"))  # read again: reported once
    assert lazy.skipped == before
