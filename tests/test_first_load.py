"""The first load is built in one go off the loop; later changes stay bounded per turn.

Before the zone is loaded nothing is answered from it, so a first list of 5,000
ServiceImports is parsed in one job and its services built and swapped in at once (one
notification, one swap). Once loaded, a relist of the same size is applied over several
loop turns and swapped in slices, so answers never wait for all of it.
"""

from __future__ import annotations

import asyncio
import copy
import sys
from typing import Any

from helpers import REPO

from mcsdns.data.objects import SERVICE_IMPORT
from mcsdns.kube.keys import Key
from mcsdns.server import builder
from mcsdns.server.pipeline import Pipeline

sys.path.insert(0, str(REPO))

from bench.apply_cost import objects  # noqa: E402

N = 5000


class Counted:
    """Notifications of the store and swaps into the zone, while they happen."""

    def __init__(self, p: Pipeline) -> None:
        self.notified: list[int] = []
        self.swaps = 0
        p.store.subscribe(lambda keys: self.notified.append(len(keys)))
        swap = p.publisher.swap

        def counting(work: Any) -> None:
            self.swaps += 1
            swap(work)

        p.publisher.swap = counting  # type: ignore[method-assign]

    def reset(self) -> None:
        self.notified, self.swaps = [], 0


async def _settle(p: Pipeline) -> None:
    for _ in range(3000):
        if p.idle:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the pipeline never went idle")


def _served(p: Pipeline, key: Key) -> bool:
    return key in p.zone.svc_names


def test_first_list_in_one_go_later_relist_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(builder, "SWAP_NAMES", 2000)  # several turns for N services once loaded
    objs = objects("services", N)[0]

    async def run() -> None:
        p = Pipeline()
        p.off_loop(asyncio.get_running_loop())
        seen = Counted(p)
        p.store.replace(SERVICE_IMPORT, copy.deepcopy(objs))
        await _settle(p)
        assert seen.notified == [N] and seen.swaps == 1
        assert _served(p, ("bench", "s0")) and _served(p, ("bench", f"s{N - 1}"))
        p.load()
        assert p.ready
        seen.reset()
        relist = copy.deepcopy(objs)
        for o in relist:
            o["spec"]["ports"][0]["port"] = 81  # every service changes
        p.store.replace(SERVICE_IMPORT, relist)
        assert not p.idle  # not all of it in this turn
        await _settle(p)
        assert len(seen.notified) > 1 and sum(seen.notified) == N and seen.swaps > 1
        p.close(asyncio.get_running_loop())

    asyncio.run(run())
