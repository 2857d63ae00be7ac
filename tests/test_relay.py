"""The --workers relay (sources/relay.py) through a real pipe: a worker's Store equals one
fed directly, for a worker attached at the start and for one attached later (a restart);
and what the hub keeps of an object (`objects.essentials`) parses exactly as the whole."""

from __future__ import annotations

import asyncio
import copy
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from helpers import EXAMPLE

from mcsdns.data.objects import Malformed, essentials, parse_endpoint_slice, parse_service_import
from mcsdns.data.store import ENDPOINT_SLICE, SERVICE_IMPORT, Store, obj_key
from mcsdns.sources.files import load_file
from mcsdns.sources.relay import Hub, RelaySource


def example() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(Path(EXAMPLE).glob("*.yaml")):
        out += load_file(f)
    return [o for o in out if o.get("kind") in (SERVICE_IMPORT, ENDPOINT_SLICE)]


def parse(obj: dict[str, Any]) -> Any:
    fn = parse_service_import if obj.get("kind") == SERVICE_IMPORT else parse_endpoint_slice
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


@pytest.mark.parametrize("late", [False, True])
def test_a_worker_store_equals_a_store_fed_directly(late: bool) -> None:
    objs = example()
    imports = [o for o in objs if o["kind"] == SERVICE_IMPORT]
    slices = [o for o in objs if o["kind"] == ENDPOINT_SLICE]
    direct, hub = Store(), Hub()
    worker = Store()
    recv, send = multiprocessing.Pipe(duplex=False)
    src = RelaySource(worker, recv)

    async def run() -> None:
        await src.start(asyncio.get_running_loop())
        if not late:
            hub.attach(0, send)
        for sink in (direct, hub):
            sink.replace(SERVICE_IMPORT, copy.deepcopy(imports))
            sink.replace(ENDPOINT_SLICE, copy.deepcopy(slices))
        hub.mark_synced()
        changed = copy.deepcopy(imports[0])
        changed["spec"]["ips"] = ["10.9.9.9"] if changed["spec"].get("type") != "Headless" else []
        gone = (ENDPOINT_SLICE, obj_key(slices[0]))
        for sink in (direct, hub):
            sink.apply([copy.deepcopy(changed)], [gone])
        hub.status(True, 123.0, "")
        if late:  # a restarted worker: the whole current view, then what follows
            hub.attach(0, send)
        for _ in range(400):
            if src.synced and src.connected and view(worker) == view(direct):
                break
            await asyncio.sleep(0.01)
        await src.stop()
        hub.close()

    asyncio.run(run())
    assert src.synced and src.connected and src.last_sync == 123.0
    assert view(worker) == view(direct)
    assert obj_key(slices[0]) not in worker.slices
