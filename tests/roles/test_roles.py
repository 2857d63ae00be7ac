"""Roles as classes: the zone pipeline works without a socket, and a --workers supervisor
decides readiness and NOTIFY from its workers' typed messages, never from metric names."""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import socket
from pathlib import Path
from typing import Any

import dns.message
import pytest
from support.helpers import EXAMPLE, REPO

from mcsdns.ops.stats import Snapshot
from mcsdns.publish.pipeline import Pipeline
from mcsdns.roles.messages import Failed, Metrics, Outbox, Status, oldest_serial
from mcsdns.roles.supervisor import Supervisor
from mcsdns.roles.worker import Worker
from mcsdns.serveconfig import Config
from mcsdns.sources.manifest import load_file

SRV = "_grpc._tcp.api.shop.svc.clusterset.local."


def srv_priorities(p: Pipeline) -> dict[str, int]:
    """Target cluster -> SRV priority, asked through the handler (no socket)."""
    wire = p.handler.respond(dns.message.make_query(SRV, "SRV").to_wire(), True)
    assert wire is not None
    out: dict[str, int] = {}
    for rr in dns.message.from_wire(wire).answer:
        for rd in rr:
            out[rd.target.labels[1].decode()] = rd.priority
    return out


def test_the_pipeline_publishes_objects_without_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_socket(*_args: Any, **_kw: Any) -> socket.socket:
        raise AssertionError("the pipeline opened a socket")

    monkeypatch.setattr(socket, "socket", no_socket)
    p = Pipeline()
    p.store.apply(load_file(REPO / "examples" / "locality" / "api.yaml"), [])
    assert not p.ready and p.served_serial is None
    p.load()
    first = p.served_serial
    assert p.ready and first is not None
    before = srv_priorities(p)
    assert set(before) == {"cluster-a", "cluster-b", "cluster-c"} and len(set(before.values())) == 1
    # this cluster's ID arrives: every service is rebuilt local-first, under a new serial
    p.store.apply([{"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                    "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "cluster-b"}}], [])
    after = srv_priorities(p)
    assert after["cluster-b"] < after["cluster-a"] and after["cluster-b"] < after["cluster-c"]
    assert p.served_serial not in (None, first)


def test_oldest_serial_waits_for_every_worker() -> None:
    assert oldest_serial([Status(True, 5), None]) is None
    assert oldest_serial([Status(True, 5), Status(True, None)]) is None
    assert oldest_serial([Status(True, 5), Status(True, 4)]) == 4
    assert oldest_serial([Status(True, 1), Status(True, 0xFFFFFFFF)]) == 0xFFFFFFFF  # serial arithmetic


def test_supervisor_ready_and_notify_come_from_status_messages(tmp_path: Path) -> None:
    """Metrics snapshots that say the opposite (or carry renamed series) change nothing:
    only Status messages decide /ready and the NOTIFY serial."""
    sup = Supervisor(Config(manifests=str(EXAMPLE), workers=2, notify=[("127.0.0.1", 9)]))
    assert sup.notifier is not None
    ends = []
    try:
        for slot in sup.pool.slots:
            recv, send = multiprocessing.Pipe(duplex=False)
            slot.conn = recv
            ends.append(send)

        def say(i: int, msg: Any) -> None:
            ends[i].send(msg)
            sup.pool.receive(i)

        lying: Snapshot = {("mcsdns_ready", ()): 1.0, ("mcsdns_zone_serial", ()): 99.0}
        for i in (0, 1):
            say(i, Metrics(lying))
        assert not sup.ready() and sup.notifier.wanted is None
        say(0, Status(True, 10))
        assert not sup.ready() and sup.notifier.wanted is None  # worker 1 has said nothing yet
        say(1, Status(False, None))
        assert not sup.ready() and sup.notifier.wanted is None
        say(1, Metrics({("mcsdns_renamed_ready", ()): 0.0}))
        say(1, Status(True, 9))
        assert sup.ready() and sup.notifier.wanted == 9  # the serial both serve
        say(1, Status(True, 11))
        assert sup.notifier.wanted == 10
        say(0, Status(True, 11))
        assert sup.notifier.wanted == 11
        assert sup.pool.snapshots()[1] == {("mcsdns_renamed_ready", ()): 0.0}  # /metrics still gets them
        say(0, Failed("--listen 127.0.0.1:53: UDP: Address already in use"))
        assert sup.config_error is not None and not sup.ready()  # stopping
    finally:
        if sup.tmpdir:
            shutil.rmtree(sup.tmpdir, ignore_errors=True)


def test_a_worker_reports_its_status_when_it_loads_and_at_each_serial(tmp_path: Path) -> None:
    recv, send = multiprocessing.Pipe(duplex=False)
    cfg = Config(manifests=str(EXAMPLE))
    worker = Worker.from_config(cfg, str(tmp_path / "serial"), Outbox(send), restarted=False)
    assert not asyncio.run(worker.loader.load_once(10.0))
    p = worker.pipeline
    first = p.served_serial
    assert first is not None
    p.store.apply([{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                    "metadata": {"name": "new", "namespace": "shop"},
                    "spec": {"type": "ClusterSetIP", "ips": ["10.9.9.9"]}}], [])
    assert p.served_serial not in (None, first)
    got = []
    while recv.poll(0.5):
        got.append(recv.recv())
    assert got == [Status(True, first), Status(True, p.served_serial)]
    assert not worker.listeners.bound  # nothing was bound: only start binds
