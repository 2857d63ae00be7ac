"""Kubernetes Events on ServiceExports (mcsdns/controller/events.py): what a running controller
reports (export ready, port conflicts, conflicts, writes failing in a member), written as
client-go's recorder writes them (a repeat counted on the same Event, a bound per object),
checked on the test API server and, with MCSDNS_REALK8S, on a real kube-apiserver with the
controller's least-privilege rule."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from fakeapi import KubeAPI
from support.controller_checks import args_for, export
from support.controller_env import Cluster, eventually, run_controller
from support.realk8s import RealK8s

from mcsdns.controller.events import Recorder, export_events
from mcsdns.controller.member.client import Member
from mcsdns.kube import permissions
from mcsdns.kube.apiclient.errors import ApiError, describe
from mcsdns.kube.resources import EVENTS

Obj = dict[str, Any]


def events(cl: Cluster, reason: str | None = None) -> list[Obj]:
    return [e for e in cl.api.objects("Event") if reason is None or e["reason"] == reason]


def se(conds: list[tuple[str, str, str, str]], uid: str = "u1") -> Obj:
    return {"metadata": {"name": "api", "namespace": "ns", "uid": uid, "resourceVersion": "7"},
            "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m}
                                      for t, s, r, m in conds]}}


READY = ("Ready", "True", "Exported", "The service has been exported.")
PORTS = ("Ready", "False", "PortConflict", "dns 53/TCP gets no traffic")
CONFLICT = ("Conflict", "True", "TypeConflict", 'Conflicting type. Using "ClusterSetIP".')


def test_export_events_are_the_conditions_that_changed_and_the_failed_writes() -> None:
    assert export_events(se([]), se([READY]), []) == [("Normal", "Exported", READY[3])]
    assert export_events(se([READY]), se([READY]), []) == []  # nothing changed: nothing said
    assert export_events(se([READY]), se([PORTS, CONFLICT]), []) == [
        ("Warning", "PortConflict", PORTS[3]), ("Warning", "TypeConflict", CONFLICT[3])]
    assert export_events(se([]), se([("Valid", "False", "NoService", "Service not found.")]), []) == [
        ("Warning", "NoService", "Service not found.")]
    failed = ["EndpointSlice create failed in cluster west", "EndpointSlice create failed in cluster west"]
    assert export_events(se([READY]), se([READY]), failed) == [
        ("Warning", "SyncFailed", "EndpointSlice create failed in cluster west")]


@pytest.fixture
def member(tmp_path: Path) -> Any:
    api = KubeAPI()
    api.start()
    m = Member("east", str(api.write_kubeconfig(tmp_path / "kc")))
    m.connect()
    m.mcs_version = "v1beta1"
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    yield api, m
    api.stop()


def test_a_repeated_event_is_counted_on_one_event_and_each_object_is_bounded(member: Any) -> None:
    api, m = member
    rec = Recorder(burst=3, refill=3600, instance="ctl-0")
    obj = se([])
    first = rec.record(m, obj, ("Warning", "SyncFailed", "x failed"))
    again = rec.record(m, obj, ("Warning", "SyncFailed", "x failed"))
    assert first is not None and again is not None
    stored = api.objects("Event")
    assert [(e["count"], e["metadata"]["name"]) for e in stored] == [(2, first["metadata"]["name"])]
    e = stored[0]
    assert e["involvedObject"] == {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                                   "namespace": "ns", "name": "api", "uid": "u1", "resourceVersion": "7"}
    assert (e["type"], e["reason"], e["source"], e["reportingComponent"], e["reportingInstance"]) == (
        "Warning", "SyncFailed", {"component": "mcsdns-controller"}, "mcsdns-controller", "ctl-0")
    assert e["firstTimestamp"] <= e["lastTimestamp"]
    # the third event on the object is the last of its burst; the fourth is dropped and counted
    assert rec.record(m, obj, ("Normal", "Exported", "ok")) is not None
    assert rec.record(m, obj, ("Warning", "SyncFailed", "y failed")) is None
    assert len(api.objects("Event")) == 2
    assert rec.figures() == ({("east", "Warning", "SyncFailed"): 2, ("east", "Normal", "Exported"): 1},
                             {("east", "rate"): 1})
    # another object has its own bound
    assert rec.record(m, se([], uid="u2"), ("Warning", "SyncFailed", "x failed")) is not None


def test_an_event_deleted_meanwhile_is_created_again_and_a_refusal_is_counted(member: Any) -> None:
    api, m = member
    rec = Recorder()
    ev = ("Warning", "SyncFailed", "x failed")
    first = rec.record(m, se([]), ev)
    assert first is not None
    api.delete("Event", "ns", first["metadata"]["name"])
    again = rec.record(m, se([]), ev)
    assert again is not None and [e["count"] for e in api.objects("Event")] == [2]
    api.deny("events", ("create", "update"))
    assert rec.record(m, se([]), ("Normal", "Exported", "ok")) is None  # no exception: counted
    assert rec.figures()[1] == {("east", "error"): 1}


class SlowMember:
    """A member whose API answers each write once `go` is set (the writer thread blocks)."""

    name, cluster_id, mcs_version = "slow", "slow", "v1beta1"

    def __init__(self) -> None:
        self.go = threading.Event()
        self.bodies: list[Obj] = []
        self.threads: set[str] = set()

    def mcs_api_version(self) -> str:
        return "multicluster.x-k8s.io/v1beta1"

    def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        self.go.wait(60)
        self.threads.add(threading.current_thread().name)
        self.bodies.append(body)
        return body


def test_events_are_written_off_the_reconcile_path_by_one_thread_and_a_full_queue_drops() -> None:
    m, rec = SlowMember(), Recorder(queue_size=3)
    emitters = [threading.Thread(target=rec.emit, args=(m, se([], uid=f"u{i}"), ("Normal", "Exported", "ok")))
                for i in range(8)]
    started = time.monotonic()
    for t in emitters:
        t.start()
    for t in emitters:
        t.join()
    print(f"\n8 emits returned in {time.monotonic() - started:.3f} s")
    assert not m.bodies  # every emit returned while the API had answered no write: nobody waited for it
    m.go.set()
    rec.close()
    written, dropped = rec.figures()
    assert m.threads == {"events"} and len(m.bodies) == written[("slow", "Normal", "Exported")]
    assert dropped[("slow", "queue")] == 8 - len(m.bodies) > 0


def test_test_api_server_validates_events_as_kube_apiserver(member: Any) -> None:
    """The Event the recorder writes passes strict field validation; a wrong namespace and an
    unknown field are refused with kube-apiserver's answers (also checked against a real one
    below)."""
    api, m = member
    body = Recorder(instance="ctl-0")._new(m, se([]), ("Normal", "Exported", "ok"), "2026-01-01T00:00:00Z")
    for code, msg in check_event_writes(lambda method, path, b, q: m.request(method, path, b, q), body):
        assert code == 0, msg
    for code, msg in check_event_patches(raw_http(api.url), "ns", body["metadata"]["name"]):
        assert code == 0, msg


def check_event_patches(raw: Any, ns: str, name: str) -> list[tuple[int, str]]:
    """PATCH an Event as client-go's recorder does (a strategic merge patch of count and
    lastTimestamp), as a merge patch, and with plain JSON (415); [(0, "")] when as expected."""
    out: list[tuple[int, str]] = []
    path = EVENTS.path(ns, name)
    for n, ctype, want in ((3, "application/strategic-merge-patch+json", 200),
                           (4, "application/merge-patch+json", 200), (5, "application/json", 415)):
        code, data = raw("PATCH", path, {"count": n, "lastTimestamp": "2026-01-01T00:00:09Z"}, ctype)
        ok = code == want and (code != 200 or json.loads(data)["count"] == n)
        out.append((0, "") if ok else (1, f"{ctype}: {code} {data[:300]!r}"))
    return out


def raw_http(url: str) -> Any:
    """(method, path, body, content type) -> (status, body) against the test API server."""
    def send(method: str, path: str, body: Obj, ctype: str) -> tuple[int, bytes]:
        req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method=method,
                                     headers={"Content-Type": ctype, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
    return send


def check_event_writes(send: Any, body: Obj) -> list[tuple[int, str]]:
    """Create `body` strictly, update it, and the two refused writes; [(0, "") when as expected,
    else (1, what differed)]."""
    out: list[tuple[int, str]] = []
    ns = body["metadata"]["namespace"]
    strict = {"fieldValidation": "Strict"}
    made = send("POST", EVENTS.path(ns), body, strict)
    out.append((0, "") if made["count"] == 1 else (1, f"created {made}"))
    upd = dict(body, count=2, metadata={"name": body["metadata"]["name"], "namespace": ns})
    put = send("PUT", EVENTS.path(ns, body["metadata"]["name"]), upd, None)  # no resourceVersion
    out.append((0, "") if put["count"] == 2 else (1, f"updated {put}"))
    for bad, want in ((dict(body, metadata={"name": "x.1", "namespace": ns}, involvedObject=dict(
            body["involvedObject"], namespace="elsewhere")), "does not match event.namespace"),
                      (dict(body, metadata={"name": "x.2", "namespace": ns}, colour="red"),
                       'unknown field "colour"')):
        try:
            send("POST", EVENTS.path(ns), bad, strict)
            out.append((1, f"accepted {bad}"))
        except ApiError as e:
            out.append((0, "") if want in describe(e) else (1, describe(e)))
    return out


def test_controller_reports_ready_conflicts_and_member_errors_as_events(clusters2: list[Cluster],
                                                                        tmp_path: Path) -> None:
    a, b = clusters2  # a (older export, wins), b
    export(a, (("dns", 53, "UDP"),), 8000, "10.1.0.1")
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    export(b, (("dns", 53, "TCP"),), 9000, "10.2.0.1")
    b.api.deny("endpointslices", ("create",))  # west refuses the imported slices: a member error
    with run_controller(args_for(a, b), tmp_path) as ctl:
        eventually(lambda: events(b, "SyncFailed") and events(b, "SyncFailed")[0]["count"] >= 3,
                   what="SyncFailed counted on one Event in west, the member that failed")
        sync = events(b, "SyncFailed")
        assert len(sync) == 1 and sync[0]["type"] == "Warning"
        assert sync[0]["message"] == f"EndpointSlice failed in cluster {b.cluster_id}"
        uid = b.api.get("ServiceExport", "ns", "api")["metadata"]["uid"]  # type: ignore[index]
        assert (sync[0]["involvedObject"]["uid"], sync[0]["involvedObject"]["kind"]) == (uid, "ServiceExport")
        assert events(a, "SyncFailed") == []  # east is healthy: west's failures are not written there
        b.api.allow()
        eventually(lambda: events(a, "Exported"), what="Exported (Normal) in east")
        # west: the Conflict condition's and the Ready condition's port conflicts (the latter once
        # with the failed write in its message, once without: each change is said once)
        got = {(e["type"], e["message"][:33], e["count"]) for e in events(b, "PortConflict")}
        assert got == {("Warning", "Conflicting ports. Using the unio", 1),
                       ("Warning", "Ports [dns 53/TCP] get no traffic", 1)}, got
        total = 'mcsdns_controller_events_total{member="%s",reason="%s",type="%s"}'

        def exported() -> int | None:
            """The count of east's one Exported Event, once the metric agrees with it."""
            ev = events(a, "Exported")
            n = ctl.metrics().get(total % (a.name, "Exported", "Normal"))
            return int(ev[0]["count"]) if len(ev) == 1 and n == ev[0]["count"] else None

        count = eventually(exported, what="east's Exported Event and its metric agree")
        # Ready turns True in east once, or twice when east's first status was written before
        # west's failures were known (east's Ready names every member's failures: Pending)
        assert count in (1, 2)
        m = ctl.metrics()
        assert m.get(total % (b.name, "SyncFailed", "Warning"), 0) >= 3
        assert total % (a.name, "SyncFailed", "Warning") not in m
        assert m.get(f'mcsdns_controller_events_dropped_total{{member="{a.name}",why="error"}}') == 0
        # the API requests by member, method and code: b's refusals among them
        refused = f'mcsdns_controller_api_requests_total{{code="403",member="{b.name}",method="POST"}}'
        assert m.get(refused, 0) >= 1


def test_events_on_a_real_apiserver_with_the_controllers_rule(real_k8s: RealK8s, tmp_path: Path) -> None:
    """On kube-apiserver: the recorder's Events pass strict field validation, a repeat is an
    update without resourceVersion, the wrong namespace and an unknown field are refused as
    the test API server refuses them, and `create`+`update` on events (the one rule in
    mcsdns.kube.permissions) is all the recorder needs."""
    ns = real_k8s.namespace("events")
    mcs = "multicluster.x-k8s.io"
    served = real_k8s.json("GET", f"/apis/{mcs}")["preferredVersion"]["version"]
    obj = real_k8s.json("POST", f"/apis/{mcs}/{served}/namespaces/{ns}/serviceexports", {
        "apiVersion": f"{mcs}/{served}", "kind": "ServiceExport", "metadata": {"name": "api"}})
    rules = [{"apiGroups": [g], "resources": [r], "verbs": list(v)}
             for g, r, v in permissions.CONTROLLER if r == "events"]
    assert rules == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "update"]}]
    real_k8s.json("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "events"},
        "rules": rules})
    kc = real_k8s.token_for(ns, "recorder")
    real_k8s.json("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "events"},
        "subjects": [{"kind": "ServiceAccount", "name": "recorder", "namespace": ns}]})
    m = Member("real", str(kc))
    m.connect()
    m.mcs_version = served
    probe = ("Normal", "Probe", "RBAC is in force")
    eventually(lambda: Recorder().record(m, obj, probe), what="a first event (RBAC settles)")
    rec = Recorder(instance="ctl-0")
    ev = ("Warning", "SyncFailed", "EndpointSlice create failed in cluster west")
    assert rec.record(m, obj, ev) is not None
    again = rec.record(m, obj, ev)
    assert again is not None and again["count"] == 2 and rec.figures()[1] == {}
    stored = [e for e in real_k8s.json("GET", EVENTS.path(ns))["items"] if e["reason"] == "SyncFailed"]
    assert [(e["count"], e["involvedObject"]["uid"], e["involvedObject"]["kind"]) for e in stored] == [
        (2, obj["metadata"]["uid"], "ServiceExport")]
    admin = Member("admin", str(real_k8s.kubeconfig))
    admin.connect()
    body = rec._new(m, obj, ("Normal", "Exported", "ok"), "2026-01-01T00:00:00Z")
    for code, msg in check_event_writes(lambda method, path, b, q: admin.request(method, path, b, q), body):
        assert code == 0, msg

    def raw(method: str, path: str, b: Obj, ctype: str) -> tuple[int, bytes]:
        code, _, data = real_k8s.request(method, path, b, {"Content-Type": ctype})
        return code, data
    for code, msg in check_event_patches(raw, ns, body["metadata"]["name"]):
        assert code == 0, msg
