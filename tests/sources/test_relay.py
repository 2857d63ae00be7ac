"""The --workers relay (sources/relay.py) through a real pipe: a worker's Store, copied at
the fork, follows the supervisor's; and what is relayed of an object
(`objects.essentials`) parses exactly as the whole."""

from __future__ import annotations

import asyncio
import copy
import multiprocessing
from pathlib import Path
from typing import Any

from support.helpers import EXAMPLE

from mcsdns.data.objects import (
    ENDPOINT_SLICE,
    SERVICE_IMPORT,
    EndpointSlice,
    Malformed,
    ServiceImport,
    essentials,
)
from mcsdns.data.parsing import obj_key
from mcsdns.data.store import Store
from mcsdns.sources.manifest import load_file
from mcsdns.sources.relay import Hub, RelaySource, Tee


def example() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(Path(EXAMPLE).glob("*.yaml")):
        out += load_file(f)
    return [o for o in out if o.get("kind") in (SERVICE_IMPORT, ENDPOINT_SLICE)]


def parse(obj: dict[str, Any]) -> Any:
    fn = ServiceImport.parse if obj.get("kind") == SERVICE_IMPORT else EndpointSlice.parse
    try:
        return fn(obj)
    except Malformed as e:
        return f"Malformed: {e}"


def test_essentials_parse_as_the_whole_object() -> None:
    objs = example()
    assert objs
    sl = next(o for o in objs if o["kind"] == ENDPOINT_SLICE)
    noisy = copy.deepcopy(sl)
    noisy["metadata"].update(annotations={"a": "b"}, uid="x", managedFields=[{"manager": "m"}])
    noisy["endpoints"][0].update(targetRef={"kind": "Pod", "name": "p"}, nodeName="n1")
    broken = [dict(sl, metadata="nope"), dict(sl, endpoints={"not": "a list"}),
              dict(sl, endpoints=["not a map"]), dict(sl, addressType="FQDN"), {"kind": SERVICE_IMPORT}]
    for o in [*objs, noisy, *broken]:
        assert parse(essentials(o)) == parse(o)
    assert "annotations" not in essentials(noisy)["metadata"]
    assert "targetRef" not in essentials(noisy)["endpoints"][0]


def view(store: Store) -> tuple[Any, Any]:
    return dict(store.imports), dict(store.slices)


def test_a_worker_store_follows_the_supervisors_from_where_it_was_forked() -> None:
    """A worker's Store starts as a copy of the supervisor's (fork) and follows it through
    the pipe: lists, events and the sync mark, in order."""
    objs = example()
    imports = [o for o in objs if o["kind"] == SERVICE_IMPORT]
    slices = [o for o in objs if o["kind"] == ENDPOINT_SLICE]
    hub, direct = Hub(), Store()
    sup = Tee(direct, hub)
    sup.replace(SERVICE_IMPORT, copy.deepcopy(imports[1:]))  # before the fork
    worker = Store()
    worker.replace(SERVICE_IMPORT, copy.deepcopy(imports[1:]))  # what the fork copies
    recv, send = multiprocessing.Pipe(duplex=False)
    src = RelaySource(worker, recv)

    async def run() -> None:
        await src.start(asyncio.get_running_loop())
        hub.attach(0, send)  # as the worker is forked
        sup.replace(SERVICE_IMPORT, copy.deepcopy(imports))
        sup.replace(ENDPOINT_SLICE, copy.deepcopy(slices))
        hub.mark_synced()
        changed = copy.deepcopy(imports[0])
        changed["spec"]["ips"] = ["10.9.9.9"] if changed["spec"].get("type") != "Headless" else []
        sup.apply([changed], [(ENDPOINT_SLICE, obj_key(slices[0]))])
        hub.status(True, 123.0, "")
        for _ in range(400):
            if src.synced and src.connected and view(worker) == view(direct):
                break
            await asyncio.sleep(0.01)
        await src.stop()
        hub.close()

    asyncio.run(run())
    assert src.synced and src.connected and src.last_sync == 123.0
    assert view(worker) == view(direct) and len(worker.imports) == len(imports)
    assert obj_key(slices[0]) not in worker.slices


def test_a_worker_that_does_not_read_is_reported_stuck_past_the_bound() -> None:
    """What waits for a worker is bounded: once its pipe is full and `max_backlog` more
    messages wait, the hub names it (the supervisor then replaces the worker)."""
    hub = Hub(max_backlog=50)
    sup = Tee(Store(), hub)
    recv, send = multiprocessing.Pipe(duplex=False)  # never read: a stopped worker
    hub.attach(0, send)
    big = [{"kind": SERVICE_IMPORT, "metadata": {"name": f"s{i}", "namespace": "ns"},
            "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [{"port": 80}]}}
           for i in range(20)]
    for _ in range(2000):
        sup.apply(big, [])
        if hub.stuck():
            break
    assert hub.stuck() == [0]
    hub.close()
    recv.close()
