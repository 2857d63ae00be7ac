"""The object models own their conversions (data/objects.py): over many generated objects
(a seeded random generator), per kind,

- `parse(manifest(x)) == x`: what `--state-dir` saves restores the same model;
- `parse(essentials(o)) == parse(o)`: what `--workers` relays parses as the whole object,
  with noise added and parts made malformed (reported the same);
- every raw field the store reads of an object is in its model's declaration (`SOURCE`),
  and every declared field is read.
"""

from __future__ import annotations

import copy
import json
import random
import string
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from mcsdns.data.endpoints import Endpoint, ip_text
from mcsdns.data.fields import ITEM, Path
from mcsdns.data.objects import (
    ClusterProperty,
    EndpointSlice,
    Malformed,
    Port,
    ServiceImport,
    essentials,
)
from mcsdns.data.parsing import KEYED, PARSED, obj_key, prepare, size
from mcsdns.data.store import Store
from mcsdns.kube.names import CLUSTER_PROPERTY_ID

N = 1000  # generated objects per kind and test
Obj = dict[str, Any]
Model = type[ServiceImport] | type[EndpointSlice] | type[ClusterProperty]

# ---- valid models ----


def label(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return rng.choice(["a", "0", "x" * 63, "a-b", "9z", "web"])
    alnum = string.ascii_lowercase + string.digits
    body = "".join(rng.choice(alnum + "-") for _ in range(rng.randint(0, 10)))
    return rng.choice(string.ascii_lowercase) + body + rng.choice(alnum)


def text(rng: random.Random) -> str:
    """Any string (what Kubernetes leaves unchecked here: slice names, zones)."""
    return "".join(rng.choice("az09-_./ é\u00e9\u4e2d\"\\") for _ in range(rng.randint(1, 12)))


def cluster_id(rng: random.Random) -> str:
    return label(rng) if rng.random() < 0.6 else f"{label(rng)}.{label(rng)}"


def address(rng: random.Random, v6: bool) -> bytes:
    return bytes(rng.randrange(256) for _ in range(16 if v6 else 4))


def port(rng: random.Random) -> Port:
    return Port(label(rng) if rng.random() < 0.7 else "", rng.choice(["TCP", "UDP", "SCTP"]),
                rng.choice([0, 53, 80, 65535, rng.randrange(65536)]))


def service_import(rng: random.Random) -> ServiceImport:
    headless = rng.random() < 0.4
    ips = () if headless else tuple(dict.fromkeys(address(rng, rng.random() < 0.3)
                                                  for _ in range(rng.randint(0, 3))))
    ports = tuple(port(rng) for _ in range(rng.randint(0, 4)))
    return ServiceImport(label(rng), label(rng), headless, ips, ports)


def endpoint(rng: random.Random, v6: bool) -> Endpoint:
    addrs = tuple(dict.fromkeys(address(rng, v6) for _ in range(rng.randint(1, 3))))
    host = label(rng) if rng.random() < 0.6 else ip_text(addrs[0]).replace(".", "-").replace(":", "-")
    ready = rng.random() < 0.7
    return Endpoint.of(addrs, host, ready, rng.random() < 0.7, rng.random() < 0.3,
                    text(rng) if rng.random() < 0.5 else "")


def endpoint_slice(rng: random.Random) -> EndpointSlice:
    v6 = rng.random() < 0.4
    return EndpointSlice(label(rng), text(rng), label(rng), cluster_id(rng), v6,
                         tuple(endpoint(rng, v6) for _ in range(rng.randint(0, 5))),
                         tuple(port(rng) for _ in range(rng.randint(0, 3))))


def cluster_property(rng: random.Random) -> ClusterProperty:
    return ClusterProperty(cluster_id(rng))


MAKERS: list[tuple[Model, Callable[[random.Random], Any]]] = [
    (ServiceImport, service_import), (EndpointSlice, endpoint_slice), (ClusterProperty, cluster_property)]
IDS = [m.KIND for m, _ in MAKERS]

# ---- raw objects: manifests with noise, some parts malformed ----

JUNK: list[Any] = [None, "", "x", 0, -1, 70000, True, False, 3.5, [], {}, ["x"], [{}], {"a": 1},
                   "999.1.1.1", "10.0.0.1", "fd00::1", "Bad_Name", "UPPER", "a.b", "x" * 64, "Headless",
                   "IPv6", "FQDN", "UDP", "tcp", "id.k8s.io"]


def noisy(rng: random.Random, raw: Obj) -> Obj:
    """`raw` with fields no parser reads, as a real API server sends them."""
    out = copy.deepcopy(raw)
    md = out.setdefault("metadata", {})
    md.update(uid="u-1", resourceVersion="42", annotations={"a": "b"}, managedFields=[{"manager": "m"}])
    md.setdefault("labels", {})["app"] = "x"
    out["apiVersion"] = "multicluster.x-k8s.io/v1alpha1"
    out["status"] = {"clusters": [{"cluster": "a"}]}
    if isinstance(out.get("spec"), dict):
        out["spec"]["sessionAffinity"] = "None"
    for e in out.get("endpoints", []):
        e.update(targetRef={"kind": "Pod", "name": "p"}, nodeName="n1")
        e["conditions"]["extra"] = True
    for p in out.get("ports", []) + out.get("spec", {}).get("ports", []):
        p["appProtocol"] = "http"
    if out.get("endpoints") and rng.random() < 0.3:  # hostnames that parse lowercased, dropped, derived
        rng.choice(out["endpoints"])["hostname"] = rng.choice(["Web", "UPPER", "a.b", ""])
    return out


def _parts(v: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield at, v
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, sub in items:
        yield from _parts(sub, (*at, k))


def malformed(rng: random.Random, raw: Obj) -> Obj:
    """`raw` with a few parts replaced by junk, removed, or junk added to a list."""
    out = copy.deepcopy(raw)
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        path, _v = rng.choice(list(_parts(out))[1:] or [((), None)])
        if not path:
            break
        parent: Any = out
        for k in path[:-1]:
            parent = parent[k]
        r = rng.random()
        if r < 0.6:
            parent[path[-1]] = copy.deepcopy(rng.choice(JUNK))
        elif r < 0.8 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], list):
            parent[path[-1]].append(copy.deepcopy(rng.choice(JUNK)))
    return out


def raw_objects(model: Model, make: Callable[[random.Random], Any], seed: int) -> Iterator[Obj]:
    rng = random.Random(seed)
    for _ in range(N):
        raw = make(rng).manifest()
        if model is ClusterProperty and rng.random() < 0.3:
            raw["metadata"]["name"] = rng.choice([*CLUSTER_PROPERTY_ID, "other.k8s.io"])
        yield malformed(rng, noisy(rng, raw))


def outcome(model: Model, obj: Obj) -> Any:
    try:
        return model.parse(obj)
    except Malformed as e:
        return f"Malformed: {e}"


# ---- the round trips ----


@pytest.mark.parametrize(("model", "make"), MAKERS, ids=IDS)
def test_a_manifest_parses_back_to_the_same_model(model: Model, make: Callable[[random.Random], Any]) -> None:
    rng = random.Random(1)
    for _ in range(N):
        x = make(rng)
        assert model.parse(json.loads(json.dumps(x.manifest()))) == x


def test_the_generated_models_vary_every_field() -> None:
    """A field added to a model but not to the generators here would not be round-tripped:
    every field takes more than one value (but a slice's dropped parts: a valid manifest
    has none; the malformed objects below have them)."""
    rng = random.Random(2)
    sis = [service_import(rng) for _ in range(N)]
    sls = [endpoint_slice(rng) for _ in range(N)]
    seen: dict[type[Any], list[Any]] = {ServiceImport: sis, EndpointSlice: sls,
                                        Endpoint: [e for s in sls for e in s.endpoints],
                                        Port: [p for s in sis for p in s.ports],
                                        ClusterProperty: [cluster_property(rng) for _ in range(N)]}
    for cls, objs in seen.items():
        for f in msgspec.structs.fields(cls):
            if (cls, f.name) in ((EndpointSlice, "dropped"), (EndpointSlice, "n_dropped"),
                                 (EndpointSlice, "later")):  # text kept only from a list (test_later.py)
                continue
            assert len({repr(getattr(o, f.name)) for o in objs}) > 1, f"{cls.__name__}.{f.name}"


@pytest.mark.parametrize(("model", "make"), MAKERS, ids=IDS)
def test_essentials_parse_as_the_whole_object(model: Model, make: Callable[[random.Random], Any]) -> None:
    kinds: set[str] = set()
    for obj in raw_objects(model, make, seed=3):
        obj["kind"] = model.KIND  # the store parses only objects of the model's kind
        whole = outcome(model, obj)
        assert outcome(model, essentials(obj)) == whole, obj
        kinds.add("malformed" if isinstance(whole, str) else "none" if whole is None
                  else "dropped" if getattr(whole, "n_dropped", 0) else "valid")
    assert {"malformed", "valid"} <= kinds  # both reached
    assert model is not EndpointSlice or "dropped" in kinds


@pytest.mark.parametrize(("model", "make"), MAKERS, ids=IDS)
def test_a_store_fed_essentials_holds_what_one_fed_whole_objects_does(
        model: Model, make: Callable[[random.Random], Any]) -> None:
    """As a --workers worker's Store follows the supervisor's (sources/relay.py); objects
    of an unknown kind or none are skipped the same."""
    whole, relayed = Store(), Store()
    objs = list(raw_objects(model, make, seed=4))
    objs += [dict(o, kind="Other") for o in objs[:20]] + [{k: v for k, v in objs[0].items() if k != "kind"}]
    for obj in objs:
        whole.upsert(copy.deepcopy(obj))
        relayed.upsert(essentials(copy.deepcopy(obj)))
    for s in (whole, relayed):
        s.events.clear()
    assert vars(relayed).keys() == vars(whole).keys()
    for k in ("imports", "slices", "by_service", "cluster_id", "skipped"):
        assert getattr(relayed, k) == getattr(whole, k), k
    assert whole.skipped


def test_essentials_drop_what_no_parser_reads() -> None:
    rng = random.Random(5)
    sl = noisy(rng, endpoint_slice(rng).manifest())
    sl["endpoints"] = [Endpoint.of((b"\x0a\x00\x00\x01",), "web", True, True, False, "z").manifest()]
    kept = essentials(noisy(rng, sl))
    assert set(kept) == {"kind", "metadata", "addressType", "endpoints", "ports"}
    assert set(kept["metadata"]) == {"namespace", "name", "labels"}
    assert "app" not in kept["metadata"]["labels"]
    assert set(kept["endpoints"][0]) == {"addresses", "hostname", "zone", "conditions"}
    assert "extra" not in kept["endpoints"][0]["conditions"]
    cp = {"metadata": {"name": "a", "uid": "u"}, "spec": {"value": "c", "other": 1}}
    assert essentials(cp, "ClusterProperty") == {"metadata": {"name": "a"}, "spec": {"value": "c"}}


def test_a_cluster_property_whose_spec_is_not_a_map_is_malformed() -> None:
    store = Store()
    store.upsert({"kind": "ClusterProperty", "metadata": {"name": CLUSTER_PROPERTY_ID[0]}, "spec": ["x"]})
    assert store.skipped["ClusterProperty"] == 1 and store.cluster_id is None


# ---- the declarations cover what is read ----


class Recording(dict[str, Any]):
    """A raw object that notes every path read of it (`reads`); iterating a map reads all
    of it (the path then ends in "*")."""

    def __init__(self, d: dict[str, Any], at: Path, reads: set[Path]) -> None:
        super().__init__({k: recording(v, (*at, k), reads) for k, v in d.items()})
        self.at, self.reads = at, reads

    def get(self, k: str, default: Any = None) -> Any:
        self.reads.add((*self.at, k))
        return super().get(k, default)

    def __getitem__(self, k: str) -> Any:
        self.reads.add((*self.at, k))
        return super().__getitem__(k)

    def __contains__(self, k: object) -> bool:
        self.reads.add((*self.at, str(k)))
        return super().__contains__(k)

    def __iter__(self) -> Iterator[str]:
        self.reads.add((*self.at, "*"))
        return super().__iter__()

    def keys(self) -> Any:
        self.reads.add((*self.at, "*"))
        return super().keys()

    def items(self) -> Any:
        self.reads.add((*self.at, "*"))
        return super().items()

    def values(self) -> Any:
        self.reads.add((*self.at, "*"))
        return super().values()


def recording(v: Any, at: Path, reads: set[Path]) -> Any:
    if isinstance(v, dict):
        return Recording(v, at, reads)
    if isinstance(v, list):
        return [recording(x, (*at, ITEM), reads) for x in v]
    return v


@pytest.mark.parametrize(("model", "make"), MAKERS, ids=IDS)
def test_the_declaration_covers_every_field_the_store_reads(
        model: Model, make: Callable[[random.Random], Any]) -> None:
    """What the store reads of an object (kind, key, cost, and all its model's parser
    reads) is declared, so that `essentials` keeps it; and every declared field is read."""
    every: set[Path] = set()
    for obj in raw_objects(model, make, seed=6):
        reads: set[Path] = set()
        rec = recording(obj, (), reads)
        Store().upsert(rec)
        if model is not ClusterProperty:
            size(model.KIND, rec)
        reads -= {(PARSED,), (KEYED,)}  # the marks `prepare` leaves, not fields of the object
        undeclared = sorted(p for p in reads if not model.SOURCE.covers(p))
        assert not undeclared, f"{model.KIND} reads undeclared {undeclared} of {obj}"
        every |= reads
    assert not set(model.SOURCE.paths()) - every, "declared but never read"


@pytest.mark.parametrize(("model", "make"), MAKERS[:2], ids=IDS[:2])
def test_an_object_cut_after_its_parse_stores_as_the_whole_one(
        model: Model, make: Callable[[random.Random], Any]) -> None:
    """`prepare` (the reflector thread) parses an object and cuts it to its kind and key:
    the store ends exactly as with the whole object (models, skips, keys),
    malformed objects and metadata included; `whole=True` (the --workers relay) keeps it."""
    cut, whole = Store(), Store()
    for obj in raw_objects(model, make, seed=7):
        obj["kind"] = model.KIND  # as the reflector sets it
        kept = copy.deepcopy(obj)
        prepare(kept, whole=True)
        assert {k: v for k, v in kept.items() if k != PARSED} == obj
        small = copy.deepcopy(obj)
        prepare(small)
        assert set(small) == {"kind", KEYED, PARSED} and obj_key(small) == obj_key(obj)
        cut.upsert(small)
        whole.upsert(copy.deepcopy(obj))
    assert cut.imports == whole.imports and cut.slices == whole.slices
    assert cut.by_service == whole.by_service and cut.skipped == whole.skipped and cut.skipped
