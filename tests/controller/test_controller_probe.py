"""A member's reachability is measured (controller/probe.py): a GET (a quorum read) every
second with a short deadline on its own thread, and its writes' timeouts; not watch silence. A hung
member (its API server answers nothing, its watches stay open and silent, as under SIGSTOP)
is unreachable within seconds, its endpoints leave the others after the Endpoint TTL counted
from the last contact measured, and its Lease records that contact, not the controller's
clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fakeapi import KubeAPI
from support.controller_checks import lease_renew_time, sources
from support.controller_env import Cluster, eventually, run_controller
from support.controller_fakes import export_service
from support.controller_fakes import member as member_view

from mcsdns.controller.member.client import Member
from mcsdns.controller.probe import Probe
from mcsdns.controller.reconcile import Reconciler
from mcsdns.flags import DERIVED
from mcsdns.kube.apiclient.errors import Unreachable

Obj = dict[str, Any]


@contextmanager
def hung(api: KubeAPI) -> Iterator[None]:
    """The API server takes connections but answers no request, and its open watches send
    nothing (no bookmark either), as a SIGSTOPped kube-apiserver; undone at the end."""
    go = threading.Event()
    handle, interval = api.handle, api.bookmark_interval

    def stalled(*a: Any, **kw: Any) -> Any:
        go.wait()
        return handle(*a, **kw)

    api.handle = stalled  # type: ignore[method-assign]
    api.bookmark_interval = 1e9
    try:
        yield
    finally:
        api.handle = handle  # type: ignore[method-assign]
        api.bookmark_interval = interval
        go.set()


@pytest.fixture
def member(tmp_path: Path) -> Iterator[tuple[KubeAPI, Member]]:
    api = KubeAPI()
    api.start()
    m = Member("east", str(api.write_kubeconfig(tmp_path / "kc")))
    m.connect()
    yield api, m
    api.stop()


def probe(m: Member, stop: threading.Event, seen: list[bool] | None = None, after: float = 0.6) -> Probe:
    """A fast probe of `m` (every 0.1 s, 0.3 s deadline); each outcome's verdict in `seen`."""
    p = Probe(m, stop, after, on_result=lambda p: seen.append(p.ok) if seen is not None else None,
              period=0.1, deadline=(0.3, 0.3))
    p.start()
    return p


def test_a_hung_member_is_unreachable_after_its_probe_failed_for_a_while_and_back_once_it_answers(
        member: tuple[KubeAPI, Member]) -> None:
    api, m = member
    stop = threading.Event()
    seen: list[bool] = []
    p = probe(m, stop, seen)
    try:
        eventually(lambda: p.ok, what="first answer")
        with hung(api):
            start = len(seen)
            eventually(lambda: not p.ok, what="unreachable")
            assert seen[start] is True  # a failure younger than `after` is no outage yet
            last = p.last_ok
            n = len(seen)
            eventually(lambda: len(seen) >= n + 3, what="more probes while hung")
            assert p.last_ok == last and not p.ok  # no answer is no contact
            assert p.why().startswith("no answer to its probe")
        eventually(lambda: p.ok, what="reachable again")
        assert p.last_ok is not None and last is not None and p.last_ok > last and p.unreachable == 1
    finally:
        stop.set()


def test_a_5xx_is_unreachable_a_4xx_is_an_answer(member: tuple[KubeAPI, Member]) -> None:
    """A 5xx (a storage error) is no answer; a 404 (the test API server has no namespace
    default) is the API server answering."""
    api, m = member
    stop = threading.Event()
    p = probe(m, stop)
    try:
        eventually(lambda: p.ok, what="a 404 counts as an answer")
        api.fail_next(1000, 500, message="[-]etcd failed: reason withheld")
        eventually(lambda: not p.ok, what="unreachable on 500s")
        assert "500" in p.why()
        api.fail_next(0)
        eventually(lambda: p.ok, what="reachable again")
    finally:
        stop.set()


def test_a_write_that_times_out_makes_the_member_unreachable_for_writes_at_once(
        member: tuple[KubeAPI, Member]) -> None:
    api, m = member
    stop = threading.Event()
    p = probe(m, stop, after=60)  # the probe alone would wait a minute
    m.on_timeout = p.write_timed_out
    m.client.timeout = (0.3, 0.3)  # type: ignore[union-attr]
    try:
        eventually(lambda: p.ok, what="first answer")
        with hung(api), pytest.raises(Unreachable):
            m.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": "x"}})
        assert not p.ok and p.why().startswith("a write timed out")
        assert m.write_counts[("namespaces", "create")] == 1 and not m.landed_counts
        m.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "y"}})
        create = ("namespaces", "create")
        assert m.write_counts[create] == 2 and m.landed_counts[create] == 1
    finally:
        stop.set()


def test_one_hung_member_does_not_delay_the_probe_of_another(tmp_path: Path) -> None:
    apis = [KubeAPI(), KubeAPI()]
    stop = threading.Event()
    seen: list[list[bool]] = [[], []]
    probes = []
    try:
        for i, api in enumerate(apis):
            api.start()
            m = Member(f"m{i}", str(api.write_kubeconfig(tmp_path / f"kc{i}")))
            m.connect()
            probes.append(probe(m, stop, seen[i]))
        eventually(lambda: all(p.ok for p in probes), what="both answer")
        with hung(apis[1]):
            eventually(lambda: not probes[1].ok, what="m1 unreachable")
            n0, n1 = len(seen[0]), len(seen[1])
            eventually(lambda: len(seen[0]) >= n0 + 10, what="m0 probed on")
            assert all(seen[0]) and len(seen[1]) < n1 + 10  # m0's probes ran 3x as often, all answered
    finally:
        stop.set()
        for api in apis:
            api.stop()


def lease_events(cl: Cluster, member: str) -> list[Obj]:
    """The Events about `member`'s Lease, oldest first."""
    want = ("coordination.k8s.io/v1", "Lease", "kube-system", f"mcsdns-member-{member}")
    out = [e for e in cl.api.objects("Event") if tuple(e["involvedObject"].get(k) for k in (
        "apiVersion", "kind", "namespace", "name")) == want and e["involvedObject"].get("uid")]
    return sorted(out, key=lambda e: str(e["firstTimestamp"]) + e["metadata"]["name"])


def test_a_hung_members_endpoints_leave_the_others_after_the_ttl_from_the_last_contact(
        tmp_path: Path) -> None:
    """c's API server hangs (its watches stay open, silent): c is unreachable within seconds, one
    warning says so, its endpoints leave a and b once the TTL has run from the last contact
    measured, and c's Lease keeps that contact (not renewed during the hang). Before: the
    watches' silence went unnoticed for 75 s and the Lease was renewed all along."""
    a, b, c = (Cluster(n, cid, tmp_path) for n, cid in (("a", "east"), ("b", "west"), ("c", "north")))
    try:
        for cl in (a, b, c):
            cl.kube.namespace("shop")
        for cl, ip in ((a, "10.1.0.1"), (c, "10.3.0.1")):
            cl.kube.service("shop", "web")
            cl.kube.endpoints("shop", "web", "web-x", [(ip, None)])
            cl.kube.export("shop", "web")
        ttl = 4
        args = [f"--cluster={cl.name}={cl.kubeconfig}" for cl in (a, b, c)]
        args += ["--endpoint-ttl", str(ttl), "--unreachable-after", "1", "--resync", "600"]
        with run_controller(args, tmp_path) as ctl:
            eventually(lambda: sources(b) == {"east", "north"}, what="web in b from a and c")
            with hung(c.api):
                hang = time.time()
                eventually(lambda: ctl.metrics().get('mcsdns_controller_member_reachable{member="c"}') == 0,
                           what="c unreachable")
                eventually(lambda: sources(b) == {"east"} and sources(a) == {"east"},
                           what="c's endpoints gone from a and b")
                gone = time.time()
                assert lease_renew_time(a, "c") <= hang  # the last contact before the hang, kept
                m = ctl.metrics()
                assert m['mcsdns_controller_member_unreachable_total{member="c"}'] == 1
                assert m['mcsdns_controller_member_last_contact_timestamp_seconds{member="c"}'] <= hang
                assert m['mcsdns_controller_member_last_contact_timestamp_seconds{member="a"}'] > hang
                assert gone - lease_renew_time(a, "c") >= ttl  # the TTL ran from the last contact
            eventually(lambda: sources(b) == {"east", "north"}, what="c's endpoints back")
            eventually(lambda: lease_renew_time(a, "c") > gone, what="c's Lease renewed once it answers")
            told = eventually(lambda: len(lease_events(a, "c")) == 2 and lease_events(a, "c"),
                              what="c's loss and return told on its Lease")
            assert [(e["type"], e["reason"]) for e in told] == [("Warning", "MemberUnreachable"),
                                                               ("Normal", "MemberReachable")]
            assert told[0]["message"].startswith("cluster c unreachable: no answer to its probe")
            assert not [e for cl in (a, b, c) for e in cl.api.objects("Event") if e["reason"] == "SyncFailed"]
            logs = ctl.logged("cluster c unreachable")
            lines = [ln for ln in logs.splitlines() if "cluster c unreachable" in ln]
            assert len(lines) == 1 and "unreachable: no answer to its probe" in lines[0], lines
            assert ctl.logs().count("cluster c: no contact for") == 1
    finally:
        for cl in (a, b, c):
            cl.close()


def test_a_member_found_unreachable_mid_reconcile_gets_no_more_of_its_writes() -> None:
    """b's first imported slice's create times out and the probe marks b unreachable: the rest
    of that reconcile's writes to b (the other slice) are not sent, each of which would wait out
    its own timeout; the key is retried, and the healthy members get all of their writes."""
    a, b, c = member_view("a", "east"), member_view("b", "west"), member_view("c", "north")
    export_service(a, "shop", "web", ("10.1.0.5",))
    export_service(c, "shop", "web", ("10.3.0.5",))
    send = b.member.request

    def slice_times_out(method: str, path: str, body: Any = None, query: Any = None) -> Any:
        if "/endpointslices" not in path:
            return send(method, path, body, query)
        if b.reachable:
            b.reachable = False  # what the probe's write_timed_out makes of it
        b.member.writes.append(("timed out", "endpointslices", ""))
        raise Unreachable("b: read timed out after 10 s")

    b.member.request = slice_times_out  # type: ignore[method-assign]
    r = Reconciler([a, b, c], DERIVED, None, 30.0, clock=lambda: 0.0).reconcile(("shop", "web"))
    assert r.retry and [w for w in b.member.writes if w[1] == "endpointslices"] == [
        ("timed out", "endpointslices", "")]
    for v in (a, c):  # each imports both exporters' slices
        assert len([w for w in v.member.writes if w[1] == "endpointslices"]) == 2
    assert r.failed_in.keys() == {"b"}
