"""Records on demand (publish/builder.py, zone/zone.py): after the load, before the
background pass has built a service, a query for one of its names builds it and gets the
answer the whole zone gives; negative answers (NXDOMAIN, NODATA, a namespace's name) are the
same as after a transfer has built everything; the serial does not move when records are
built; the background pass builds the rest and completes the zone."""

from __future__ import annotations

import asyncio
from typing import Any

from mcsdns.dns.names import encode_name
from mcsdns.dns.types import Rcode, RRType
from mcsdns.ops import load
from mcsdns.publish.builder import SERVICE_COST
from mcsdns.publish.pipeline import Pipeline

Z = "clusterset.local"
A = b"\x00\x01\x00\x01"
SRV = b"\x00\x21\x00\x01"


def objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(20):
        out.append({"kind": "ServiceImport", "metadata": {"name": f"vip{i}", "namespace": "shop"},
                    "spec": {"type": "ClusterSetIP", "ips": [f"10.0.0.{i + 1}"],
                             "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    for name, ready in (("db", True), ("idle", False)):  # "idle": no ready endpoint, no names
        out.append({"kind": "ServiceImport", "metadata": {"name": name, "namespace": "data"},
                    "spec": {"type": "Headless"}})
        labels = {"multicluster.kubernetes.io/service-name": name,
                  "multicluster.kubernetes.io/source-cluster": "a"}
        out.append({"kind": "EndpointSlice", "metadata": {"name": f"{name}-a", "namespace": "data",
                                                          "labels": labels},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"], "hostname": "p0",
                                                 "conditions": {"ready": ready}}]})
    out.append({"kind": "ServiceImport", "metadata": {"name": "idle", "namespace": "empty"},
                "spec": {"type": "Headless"}})
    return out


QUESTIONS = [(f"vip3.shop.svc.{Z}", A), (f"_http._tcp.vip3.shop.svc.{Z}", SRV),
             (f"_tcp.vip3.shop.svc.{Z}", A), (f"nothing.vip3.shop.svc.{Z}", A),
             (f"p0.a.db.data.svc.{Z}", A), (f"a.db.data.svc.{Z}", A),
             (f"db.data.svc.{Z}", SRV), (f"idle.data.svc.{Z}", A), (f"data.svc.{Z}", A),
             (f"empty.svc.{Z}", A), (f"idle.empty.svc.{Z}", A), (f"shop.svc.{Z}", A), (f"x.svc.{Z}", A)]


def pipeline(loop: asyncio.AbstractEventLoop | None) -> Pipeline:
    p = Pipeline()
    for o in objects():
        p.store.upsert(o)
    p.builder.loop = loop  # a loop that is not run: the background pass stays queued
    p.load()
    return p


def answers(p: Pipeline) -> list[tuple[int, tuple[bytes, ...]]]:
    """The rcode and the rendered bodies (every rotation) of each question's answer."""
    return [(ans.rcode, ans.bodies) for name, tail in QUESTIONS
            for ans in (p.cache.answer(encode_name(name), tail),)]


def test_a_query_builds_its_service_and_answers_as_the_whole_zone_does() -> None:
    loop = asyncio.new_event_loop()
    try:
        lazy = pipeline(loop)
        serial = lazy.zone.serial
        assert lazy.zone.unbuilt and len(lazy.zone.svc_names) == 0  # nothing built at ready
        got = answers(lazy)
        built = len(lazy.zone.svc_names)
        assert 0 < built < 22 and lazy.zone.unbuilt  # only what was asked for
        whole = pipeline(None)  # no loop: everything built at the load
        assert not whole.zone.unbuilt
        assert got == answers(whole) and lazy.zone.serial == serial == whole.zone.serial
        codes = [rcode for rcode, _ in got]
        assert codes.count(Rcode.NXDOMAIN) == 5 and Rcode.NOERROR in codes  # nothing, idle x2, empty, x
        loop.run_until_complete(asyncio.sleep(0.05))  # the background pass builds the rest
        assert not lazy.zone.unbuilt and not lazy.builder.lazy and lazy.zone.serial == serial
        assert lazy.zone.names == whole.zone.names
    finally:
        loop.close()


def test_a_transfer_completes_the_zone() -> None:
    loop = asyncio.new_event_loop()
    try:
        lazy = pipeline(loop)
        assert lazy.zone.unbuilt
        records = list(lazy.transfers._axfr())
        assert not lazy.zone.unbuilt
        # 20 VIPs, db's address at its service name and at its endpoint's name
        assert sum(1 for r in records if r[1] == RRType.A) == 22
        assert sorted(records) == sorted(pipeline(None).transfers._axfr())
    finally:
        loop.close()


def test_queries_are_answered_between_the_turns_of_the_background_pass() -> None:
    """A query that arrives while the pass runs waits for one turn of it at most: the pass
    builds about load.FILL_ITEMS items per loop turn, and answers come in between, in order."""
    loop = asyncio.new_event_loop()
    try:
        p = Pipeline()
        per_turn = load.FILL_ITEMS // 9 + 1  # services of 9 items (8 + a port) the pass builds a turn
        n = 30 * per_turn
        for i in range(n):
            p.store.upsert({"kind": "ServiceImport", "metadata": {"name": f"s{i}", "namespace": "shop"},
                            "spec": {"type": "ClusterSetIP", "ips": [f"10.0.{i // 250}.{i % 250 + 1}"],
                                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
        p.builder.loop = loop
        p.load()
        left: list[int] = []  # services still unbuilt at each answer, in the order answered

        def ask(i: int) -> None:
            ans = p.cache.answer(encode_name(f"s{n - 1 - i}.shop.svc.{Z}"), A)
            assert ans.rcode == Rcode.NOERROR
            left.append(len(p.zone.unbuilt))
            if p.zone.unbuilt:
                loop.call_soon(ask, i + 1)

        async def until_built() -> None:
            while p.zone.unbuilt:
                await asyncio.sleep(0)

        loop.call_soon(ask, 0)
        loop.run_until_complete(until_built())
        assert len(left) > 10  # answered all along the pass
        steps = [a - b for a, b in zip(left, left[1:], strict=False)]
        assert all(0 <= s <= per_turn + 1 for s in steps), steps  # one turn (and the service asked)
    finally:
        loop.close()


def test_a_changed_endpoint_address_is_in_the_additional_of_its_srv_answers() -> None:
    """Additional records are looked up by name when an answer is rendered: an endpoint's new
    address replaces the cached SRV answers that listed the old one."""
    labels = {"multicluster.kubernetes.io/service-name": "web",
              "multicluster.kubernetes.io/source-cluster": "a"}

    def endpoint_slice(addr: str) -> dict[str, Any]:
        return {"kind": "EndpointSlice", "metadata": {"name": "web-a", "namespace": "shop", "labels": labels},
                "addressType": "IPv4", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                "endpoints": [{"addresses": [addr], "hostname": "p0", "conditions": {"ready": True}}]}

    p = Pipeline()
    p.store.upsert({"kind": "ServiceImport", "metadata": {"name": "web", "namespace": "shop"},
                    "spec": {"type": "Headless", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    p.store.upsert(endpoint_slice("10.1.0.1"))
    p.load()
    names = [encode_name(f"web.shop.svc.{Z}"), encode_name(f"_http._tcp.web.shop.svc.{Z}")]
    before = [p.cache.answer(n, SRV).bodies[0] for n in names]
    assert all(bytes((10, 1, 0, 1)) in b for b in before)
    p.store.upsert(endpoint_slice("10.1.0.9"))
    after = [p.cache.answer(n, SRV).bodies[0] for n in names]
    assert all(bytes((10, 1, 0, 9)) in b and bytes((10, 1, 0, 1)) not in b for b in after)


def test_the_first_load_digests_each_service_once_and_serves_the_same_serial(
        monkeypatch: Any) -> None:
    """Objects stored before the zone first answers, one at a time in any order, are
    digested once per service, at the load; the serial is that of the same objects stored
    at once, and a change after the load is digested as it comes."""
    from mcsdns.publish import builder
    from mcsdns.zone.journal import service_digest as real

    digested: list[tuple[str, str]] = []

    def counting(key: tuple[str, str], *rest: Any) -> int:
        digested.append(key)
        return real(key, *rest)

    monkeypatch.setattr(builder, "service_digest", counting)
    one_by_one = Pipeline(serial=1)
    for o in reversed(objects()):  # slices before their ServiceImports
        one_by_one.store.upsert(o)
    assert digested == []
    one_by_one.load()
    services = {(o["metadata"]["namespace"], o["metadata"]["name"])
                for o in objects() if o["kind"] == "ServiceImport"}
    assert sorted(digested) == sorted(services)
    at_once = Pipeline(serial=1)
    at_once.store.apply(objects(), [])
    at_once.load()
    assert one_by_one.served_serial == at_once.served_serial is not None
    digested.clear()
    one_by_one.store.upsert(objects()[0])  # unchanged: nothing to digest
    one_by_one.store.delete(objects()[0])
    assert digested == [("shop", "vip0")] and one_by_one.served_serial != at_once.served_serial


def test_without_a_serial_file_the_digests_follow_the_first_serial_in_loop_turns() -> None:
    """The first serial of a process without a serial file is new whatever the digest: the
    zone answers under it at the load, and the services' digests (the serial's input) are
    folded in the loop turns after it, about load.PAY_ITEMS a turn; then the digest is the one
    a load that digests at once has, and a change made meanwhile moved the serial."""
    def si(i: int, ip: str) -> dict[str, Any]:
        return {"kind": "ServiceImport", "metadata": {"name": f"s{i}", "namespace": "shop"},
                "spec": {"type": "ClusterSetIP", "ips": [ip]}}

    per_turn = load.PAY_ITEMS // SERVICE_COST + 1  # services of no item (no port, no slice) a turn
    n = 3 * per_turn + 7
    objs = [si(i, f"10.0.{i // 250}.{i % 250 + 1}") for i in range(n)] + objects()
    changed = si(1, "10.9.9.9")
    at_once, changed_at_once = Pipeline(), Pipeline()  # digested at the load (no loop)
    at_once.store.apply(objs, [])
    at_once.load(fill=False)
    changed_at_once.store.apply([*objs, changed], [])
    changed_at_once.load(fill=False)
    loop = asyncio.new_event_loop()
    try:
        p = Pipeline()
        p.store.apply(objs, [])
        p.builder.loop = loop
        p.load()
        first = p.served_serial
        assert first is not None and p.cache.answer(encode_name(f"s0.shop.svc.{Z}"), A).rcode == Rcode.NOERROR
        assert p.versions.digest != at_once.versions.digest
        p.store.upsert(changed)  # a change before the digests are in: a new serial all the same
        assert p.served_serial not in (None, first)
        owed = [len(p.builder.owed)]
        while p.builder.owed:
            loop.call_soon(loop.stop)  # one loop turn
            loop.run_forever()
            owed.append(len(p.builder.owed))
        assert all(0 < a - b <= per_turn for a, b in zip(owed, owed[1:], strict=False)), owed
        assert p.versions.digest == changed_at_once.versions.digest
        second = p.served_serial
        p.publisher.commit()  # the same content: the same serial
        assert p.served_serial == second
    finally:
        loop.close()
