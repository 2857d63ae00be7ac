"""mcsdns.controller.writers and leaseholder as functions: which writer an object names, when
another writer counts as writing, that our own writes and a restart of the same deployment
are not another writer, and which member holds the Leases whatever the flag order."""

from __future__ import annotations

from typing import Any

import pytest

from mcsdns.controller.leaseholder import in_cluster, lease_member
from mcsdns.controller.member.client import Member
from mcsdns.controller.writers import (
    WRITER,
    Writers,
    lease_identity,
    members_hash,
    members_identity,
    writer_of,
)
from mcsdns.diagnose.collect import Snapshot
from mcsdns.diagnose.writers import writer_checks
from mcsdns.ops.errors import ConfigError

Obj = dict[str, Any]


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def obj(name: str, writer: str | None, rv: str) -> Obj:
    md: Obj = {"namespace": "ns", "name": name, "resourceVersion": rv}
    if writer is not None:
        md["annotations"] = {WRITER: writer}
    return {"metadata": md}


def test_identity_is_the_lease_or_the_member_set_in_any_order() -> None:
    assert members_identity(["b", "a", "c"]) == members_identity(["c", "a", "b"])
    assert members_identity(["a", "b"]) != members_identity(["a", "b", "c"])
    assert members_hash(["a", "b"]).startswith("2:")
    assert lease_identity("local", "mcsdns-system", "mcsdns-controller") == \
        "lease:local/mcsdns-system/mcsdns-controller"


def test_writer_of_takes_only_a_plausible_identity() -> None:
    assert writer_of(obj("x", "members:2:abc", "1")) == "members:2:abc"
    assert writer_of(obj("x", None, "1")) is None
    assert writer_of(obj("x", "a\nb", "1")) is None
    assert writer_of(obj("x", "x" * 300, "1")) is None


def test_another_writer_is_yielded_to_while_it_writes_then_its_objects_are_ours() -> None:
    clock = Clock()
    w = Writers("members:2:mine", "2:mine", grace=30, clock=clock)
    theirs = [("serviceimports", obj("web", "members:3:theirs", "5"))]
    assert w.holder("a", theirs) == "members:3:theirs"  # new to us: it writes
    assert w.first("a", "members:3:theirs") and not w.first("a", "members:3:theirs")  # said once
    assert w.conflicts("a") == 1 and w.conflicts("b") == 0
    clock.t += 20
    assert w.holder("a", theirs) == "members:3:theirs"  # unchanged, but within the grace
    assert 9.0 <= w.wait("members:3:theirs") <= 10.0
    clock.t += 11
    assert w.holder("a", theirs) is None  # quiet for the grace: a replaced controller
    assert w.conflicts("a") == 0
    theirs = [("serviceimports", obj("web", "members:3:theirs", "6"))]  # it wrote again
    assert w.holder("a", theirs) == "members:3:theirs"
    assert w.first("a", "members:3:theirs")  # told again


def test_our_writes_and_our_own_stamps_are_not_another_writer() -> None:
    clock = Clock()
    w = Writers("lease:local/ns/mcsdns-controller", "3:abc", grace=30, clock=clock)
    mine = w.stamp(obj("web", None, "1"))
    assert mine["metadata"]["annotations"][WRITER] == "lease:local/ns/mcsdns-controller"
    assert w.holder("a", [("serviceimports", dict(mine))]) is None
    # a restart of the same deployment (another pod) stamps the same identity: not a conflict
    assert w.holder("a", [("services", obj("derived-x", "lease:local/ns/mcsdns-controller", "9"))]) is None
    # an old writer's object seen once, then quiet, then our status write changes its resourceVersion
    old = obj("db", "members:1:old", "3")
    assert w.holder("a", [("serviceimports", old)]) == "members:1:old"
    clock.t += 31
    assert w.holder("a", [("serviceimports", old)]) is None
    w.note("a", "serviceimports", obj("db", "members:1:old", "4"))  # our write
    assert w.holder("a", [("serviceimports", obj("db", "members:1:old", "4"))]) is None


def test_stamp_keeps_other_annotations_and_does_not_change_its_argument() -> None:
    w = Writers("me", "1:x")
    body = {"metadata": {"name": "x", "annotations": {"keep": "1"}}}
    out = w.stamp(body)
    assert out["metadata"]["annotations"] == {"keep": "1", WRITER: "me", "mcsdns.io/writer-members": "1:x"}
    assert body["metadata"]["annotations"] == {"keep": "1"}


def _member(name: str, server: str) -> Member:
    m = Member(name, "/dev/null")

    class C:
        host = server
    m.client = C()  # type: ignore[assignment]
    return m


def test_lease_member_is_the_same_whatever_the_order() -> None:
    a, b = _member("a", "https://10.0.0.1:6443"), _member("b", "https://kubernetes.default.svc")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    for order in ([a, b], [b, a]):
        assert lease_member(order, 2, "a", True, env) is a  # named
        assert lease_member(order, 2, "", True, env) is b  # the cluster this pod runs in
        with pytest.raises(ConfigError, match="--lease-cluster NAME"):
            lease_member(order, 2, "", True, {})  # not in a pod: ambiguous
    assert lease_member([a, b], 1, "", True, {}) is a  # the only --cluster (b from --members-dir)
    assert lease_member([a, b], 2, "", False, {}) is a  # no election: the first, as before


def test_in_cluster_server() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert in_cluster("https://kubernetes.default.svc:443", env)
    assert in_cluster("https://kubernetes.default.svc.cluster.local", env)
    assert in_cluster("https://10.96.0.1:443", env)
    assert not in_cluster("https://10.0.0.1:6443", env)
    assert not in_cluster("https://kubernetes.default.svc", {})


def test_diagnose_names_both_writers_of_a_recent_conflict() -> None:
    s = Snapshot("a")
    ev = {"reason": "WriterConflict", "count": 3, "lastTimestamp": "2026-01-01T00:00:00Z",
          "involvedObject": {"kind": "ServiceExport", "namespace": "ns", "name": "web"},
          "message": "Another controller, writer 'members:3:x', writes ...; this one, writer 'members:2:y', "
                     "leaves them to it while it does."}
    s.writer_events = [ev]
    now = 1767225600.0 + 60  # a minute later
    [r] = list(writer_checks([s], now))
    assert r.status == "FAIL" and "'members:3:x'" in r.message and "'members:2:y'" in r.message
    assert "3 WriterConflict Events" in r.message and "ns/web" in r.message
    assert not list(writer_checks([s], now + 3600))  # history
