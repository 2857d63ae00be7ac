"""Each controller kind's contract, and the engine's error policy by (kind, verb): a desired
object's view survives what the API server adds and an update's merge; an existing object's
foreign metadata survives the merge; a view difference, and only one, makes an update."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.controller_fakes import FakeMember, FakeView, member

from mcsdns.controller.contract import Contract, Kind, Target, Verb
from mcsdns.controller.engine import POLICY, Engine, Result
from mcsdns.controller.exports import ExportState
from mcsdns.controller.kinds import ENDPOINT_SLICES, KINDS, SERVICE, SERVICE_EXPORT, SERVICE_IMPORT
from mcsdns.controller.kinds.derivedservice import DERIVED_ANNOTATION
from mcsdns.controller.kinds.serviceexport import conditions
from mcsdns.controller.merge import CLUSTERSET_IP, HEADLESS, Export, Merged, PortSpec, serving_ports
from mcsdns.controller.queue import WorkQueue
from mcsdns.kube.apiclient.errors import Conflict, NotFound, Request, Unreachable, error_for

Obj = dict[str, Any]
KEY = ("shop", "web")
M = FakeMember("b", "west")

ports = st.lists(st.builds(PortSpec, st.sampled_from(["", "http", "grpc"]), st.sampled_from(["TCP", "UDP"]),
                           st.integers(1, 65535), st.sampled_from([None, "h2c"])),
                 max_size=3, unique_by=lambda p: p.name)
merged = st.builds(Merged, type=st.sampled_from([CLUSTERSET_IP, HEADLESS]), ports=ports,
                   session_affinity=st.sampled_from(["None", "ClientIP"]),
                   session_affinity_config=st.sampled_from([None, {"clientIP": {"timeoutSeconds": 10}}]),
                   ip_families=st.sampled_from([(), ("IPv4",), ("IPv6", "IPv4")]),
                   clusters=st.sampled_from([["east"], ["east", "west"]]), winner=st.just("east"))
port_dict = st.fixed_dictionaries({"name": st.sampled_from(["", "http", "grpc"]), "port": st.integers(1, 9)},
                                 optional={"protocol": st.sampled_from(["TCP", "UDP"])})
endpoint = st.fixed_dictionaries(
    {"addresses": st.lists(st.just("10.1.0.5"), min_size=1, max_size=1)},
    optional={"conditions": st.fixed_dictionaries({}, optional={"ready": st.booleans()}),
              "hostname": st.just("h"), "zone": st.just("z")})
source_slice = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.sampled_from(["web-abc", "web-def"]),
                                       "namespace": st.just("shop")}),
    "addressType": st.sampled_from(["IPv4", "IPv6"]),
    "ports": st.lists(port_dict, max_size=2), "endpoints": st.lists(endpoint, max_size=2)})


@st.composite
def targets(draw: st.DrawFn) -> Target:
    mg = draw(merged)
    ex = ExportState({"metadata": {"name": "web", "generation": draw(st.sampled_from([None, 3]))}},
                     Export("east", "t", mg.type, tuple(mg.ports)), None,
                     draw(st.lists(source_slice, max_size=2)))
    ex.serving = serving_ports(mg.ports, tuple(draw(ports)))
    derived = draw(st.booleans())
    return Target(mg, [ex], ips=draw(st.sampled_from([None, (["10.99.0.1"], ["IPv4"])])),
                  annotations={DERIVED_ANNOTATION: "derived-x"} if derived else {},
                  slice_labels={"kubernetes.io/service-name": "derived-x"} if derived else {},
                  service="derived-x" if derived else None, service_import={"metadata": {"uid": "u-1"}})


def desired(c: Contract, t: Target) -> list[Obj]:
    """Every object the kind wants for `t` (a ServiceExport: its status body)."""
    if c is SERVICE_IMPORT:
        return [SERVICE_IMPORT.desired(M, KEY, t)]
    if c is SERVICE:
        return list(SERVICE.desired(M, KEY, t).values())
    if c is ENDPOINT_SLICES:
        return list(ENDPOINT_SLICES.desired(M, KEY, t).values())
    ex = t.exports[0]
    return [SERVICE_EXPORT.desired(M, ex, conditions(ex, t.merged, []))]


def as_served(obj: Obj) -> Obj:
    """What an API server makes of a created object: metadata, defaults and allocations added."""
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u-7", resourceVersion="41", creationTimestamp="2026-01-01T00:00:00Z",
                           managedFields=[{"manager": "x"}], generation=1)
    if out.get("kind") == "Service":
        out["spec"].update(clusterIP="10.96.0.9", clusterIPs=["10.96.0.9"], internalTrafficPolicy="Cluster")
        for p in out["spec"]["ports"]:
            p.setdefault("targetPort", p["port"])
    return out


FOREIGN_LABELS, FOREIGN_ANNOTATIONS = {"team": "blue"}, {"note": "kept", "other/x": "y"}


def with_foreign_metadata(obj: Obj) -> Obj:
    out = as_served(obj)
    md = out["metadata"]
    md["labels"] = {**FOREIGN_LABELS, **(md.get("labels") or {})}
    md["annotations"] = {**FOREIGN_ANNOTATIONS, **(md.get("annotations") or {})}
    md["finalizers"] = ["someone/else"]
    if out.get("kind") == "ServiceExport":
        out["status"]["conditions"].append({"type": "Theirs", "status": "True"})
    return out


@pytest.mark.parametrize("c", KINDS, ids=lambda c: c.kind.value)
@settings(max_examples=60, deadline=None)
@given(t=targets(), other=targets())
def test_desired_view_is_stable_and_merge_reaches_it(c: Contract, t: Target, other: Target) -> None:
    for want in desired(c, t):
        assert c.view(as_served(want)) == c.view(want)  # no write once created
        for have in desired(c, other):  # any object of ours brought to `want` by one update
            if have["metadata"]["name"] == want["metadata"]["name"]:
                assert c.view(c.merge(with_foreign_metadata(have), want)) == c.view(want)


@pytest.mark.parametrize("c", KINDS, ids=lambda c: c.kind.value)
@settings(max_examples=30, deadline=None)
@given(t=targets(), other=targets())
def test_an_update_keeps_foreign_metadata(c: Contract, t: Target, other: Target) -> None:
    for want in desired(c, t):
        for have in desired(c, other):
            if have["metadata"]["name"] != want["metadata"]["name"]:
                continue
            have = with_foreign_metadata(have)
            body = c.merge(have, want)
            md = body["metadata"]
            assert (md["resourceVersion"], md["uid"], md["finalizers"]) == ("41", "u-7", ["someone/else"])
            assert FOREIGN_LABELS.items() <= (md.get("labels") or {}).items()
            assert FOREIGN_ANNOTATIONS.items() <= (md.get("annotations") or {}).items()
            if c is SERVICE_EXPORT:
                assert {"type": "Theirs", "status": "True"} in body["status"]["conditions"]


def test_a_managed_annotation_gone_stale_updates_the_import() -> None:
    t = Target(Merged(CLUSTERSET_IP, [PortSpec("http", "TCP", 80)], "None", None, (), ["east"], "east"), [])
    want = SERVICE_IMPORT.desired(M, KEY, t)
    have = with_foreign_metadata(SERVICE_IMPORT.desired(M, KEY, Target(
        t.merged, [], annotations={DERIVED_ANNOTATION: "derived-old"})))
    assert SERVICE_IMPORT.view(have) != SERVICE_IMPORT.view(want)
    assert SERVICE_IMPORT.merge(have, want)["metadata"]["annotations"] == FOREIGN_ANNOTATIONS


# --- the engine: an update when, and only when, the view differs ---------------------------
def seeded(c: Contract, obj: Obj) -> tuple[FakeView, Obj]:
    v = member("b", "west")
    return v, v.seed(c.resource, obj)


CHANGES = {  # per kind: a change of a field its view reads
    Kind.SERVICE_IMPORT: lambda o: o["spec"].update(sessionAffinity="ClientIP"),
    Kind.SERVICE: lambda o: o["spec"]["ports"].append({"name": "x", "port": 1, "protocol": "UDP"}),
    Kind.ENDPOINT_SLICE: lambda o: o["endpoints"].append({"addresses": ["10.1.0.9"]}),
}


@pytest.mark.parametrize("c", [SERVICE_IMPORT, SERVICE, ENDPOINT_SLICES], ids=lambda c: c.kind.value)
def test_a_view_difference_makes_one_update_and_none_without(c: Contract) -> None:
    mg = Merged(CLUSTERSET_IP, [PortSpec("http", "TCP", 80)], "None", None, ("IPv4",), ["east"], "east")
    t = Target(mg, [ExportState({}, Export("east", "t", CLUSTERSET_IP, ()), None,
                            [{"metadata": {"name": "web-abc"}, "endpoints": [{"addresses": ["10.1.0.5"]}]}])],
               service="derived-x", service_import={"metadata": {"uid": "u-1"}})
    want = desired(c, t)[0]
    v, have = seeded(c, want)
    r = Result()
    assert Engine(v, KEY, r).apply(c, copy.deepcopy(want), have) is have and v.member.writes == []
    changed = copy.deepcopy(want)
    CHANGES[c.kind](changed)
    out = Engine(v, KEY, r).apply(c, changed, have)
    assert v.member.writes == [("PUT", c.resource, want["metadata"]["name"])] and out is not None
    assert c.view(out) == c.view(changed) and not r.failed and not r.retry


def test_an_unchanged_export_status_is_not_written() -> None:
    v = member("a", "east")
    se = v.seed("serviceexports", {"apiVersion": "x", "kind": "ServiceExport",
                                   "metadata": {"name": "web", "namespace": "shop"}})
    ex = ExportState(se, None, ("NoService", "Service not found."))
    SERVICE_EXPORT.sync(Engine(v, KEY, Result()), ex, None)
    assert v.member.writes == [("PUT status", "serviceexports", "web")]
    ex.obj = v.member.get("serviceexports", *KEY) or {}
    SERVICE_EXPORT.sync(Engine(v, KEY, Result()), ex, None)
    assert len(v.member.writes) == 1


# --- the error policy, by (kind, verb) -----------------------------------------------------
ERRORS = [Conflict("changed"), NotFound("/x"), Unreachable("refused"),
          error_for(422, "Unprocessable", b"{}", Request.of("/x", method="POST"), "POST /x: 422")]


def _by_name(kv: tuple[Kind, Verb]) -> tuple[str, str]:
    return kv[0].value, kv[1].value


WRITES: list[tuple[Kind, Verb]] = sorted(POLICY.keys(), key=_by_name)


@pytest.mark.parametrize("kind,verb", WRITES, ids=lambda x: str(x.value))
@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_the_error_policy_by_kind_and_verb(kind: Kind, verb: Verb, err: Exception) -> None:
    r = Result()

    def fail() -> None:
        raise err
    assert Engine(member("b", "west"), KEY, r).run(kind, verb, fail) is None
    gone = isinstance(err, NotFound) and verb is Verb.DELETE
    assert r.retry is not gone
    named = not gone and kind is not Kind.SERVICE_EXPORT  # the export's own status never fails the import
    what = {Verb.DELETE: f"delete {kind.value}", Verb.STATUS: f"{kind.value} status"}.get(verb, kind.value)
    assert r.failed == ([f"{what} failed in cluster west"] if named else [])


def test_every_write_the_kinds_make_has_a_policy() -> None:
    writes = {(c.kind, v) for c in (SERVICE_IMPORT, SERVICE, ENDPOINT_SLICES)
              for v in (Verb.CREATE, Verb.UPDATE, Verb.DELETE)}
    writes |= {(Kind.SERVICE_IMPORT, Verb.STATUS), (Kind.SERVICE_EXPORT, Verb.STATUS)}
    assert set(POLICY) == writes


# --- the view covers what the kind sets -----------------------------------------------------
def leaves(obj: Any, path: str = "") -> list[tuple[str, list[Any]]]:
    """(dotted path, the keys leading to it) of every scalar in `obj`; list items share a path."""
    if isinstance(obj, dict):
        return [(p, [k, *ks]) for k, v in obj.items() for p, ks in leaves(v, f"{path}.{k}" if path else k)]
    if isinstance(obj, list):
        return [(p, [i, *ks]) for i, v in enumerate(obj) for p, ks in leaves(v, path)]
    return [(path, [])]


def changed_at(obj: Obj, keys: list[Any]) -> Obj:
    out = copy.deepcopy(obj)
    node: Any = out
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = "~changed~"
    return out


@pytest.mark.parametrize("c", KINDS, ids=lambda c: c.kind.value)
@settings(max_examples=40, deadline=None)
@given(t=targets())
def test_the_view_compares_every_field_the_kind_sets(c: Contract, t: Target) -> None:
    """A field of the desired object that an update cannot bring back unless it is compared:
    a kind that sets a field must compare it, or declare it `unviewed`."""
    for want in desired(c, t):
        for path, keys in leaves(want):
            if any(path == u or path.startswith(u + ".") for u in c.unviewed):
                continue
            assert c.view(changed_at(want, keys)) != c.view(want), f"{c.kind.value}: {path} is not compared"


@pytest.mark.parametrize("header,wait", [("7", 7.0), ("3600", 30.0), (None, 0.0)])
def test_a_throttled_write_is_retried_no_sooner_than_its_retry_after(header: str | None, wait: float) -> None:
    """A 429 answer's Retry-After (capped at 30 s) is the least delay of the key's retry."""
    r = Result()
    throttled = error_for(429, "TooManyRequests", b"{}", Request.of("/x", method="POST"), "POST /x: 429",
                          header)

    def fail() -> None:
        raise throttled
    Engine(member("b", "west"), KEY, r).run(Kind.SERVICE_IMPORT, Verb.CREATE, fail)
    assert r.retry and r.wait == wait
    q = WorkQueue()
    before = time.monotonic()
    assert q.retry(KEY, r.wait) >= wait
    due, key = q.delayed[0]
    assert key == KEY and due - before >= wait
