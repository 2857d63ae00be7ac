"""Service records: built when first needed, or off the event loop when they are large.

Until the zone first answers, changed services are only noted (`settle`, called by
`Pipeline.load` alone, marks them once, each digested once however many of its objects
came apart: at the load, or in loop turns after it where the first serial does not depend
on the digest, `_pay`). Until the zone is
complete, a changed service whose records are not in the zone is only marked
`Zone.unbuilt` (its input digest folded, so the serial is known at once):
its records are built when a query asks for one of its names (`Zone.build`), a
transfer or `mcsdns records` asks for them all (`Zone.complete`), or by the background
pass the load starts (`loaded`: about load.FILL_ITEMS per loop turn, the GC held off), which
then completes the zone; from then on every change is built as follows.

`Builder.rebuild` builds the changed services' records on the loop, as one step,
when they cost at most load.BIG_ITEMS (endpoints and ports, plus SERVICE_COST per service;
nearly every change). Larger changes are built in `executor`: the records (`zone.records`), what
they change in the zone (`Zone.stage`) and the digest and journal difference
(`journal.work_out`); the loop then swaps whole services in (`ZonePublisher.swap`),
about load.SWAP_NAMES names per turn, so a query sees a service before or after its
change, never half, and answering never waits for the build (the GIL is handed back
every switch interval, 0.5 ms in `serve`; the GC is held off meanwhile). Where each step
runs is ops/load.py's to say.
A service changed again while its build runs is built again after the swap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Executor

from ..data.objects import EndpointSlice, ServiceImport
from ..data.store import Store, parsed_size
from ..kube.apiclient.keys import Key
from ..ops import load
from ..zone.journal import Worked, service_digest, work_out
from ..zone.leftout import LeftOut
from ..zone.locality import Locality
from ..zone.records import reads_slices, service_records
from ..zone.rrsets import Names
from ..zone.zone import Staged, Zone
from .publisher import ZonePublisher

log = logging.getLogger("mcsdns.builder")

SERVICE_COST = 8  # what building one service costs beyond its items, in items (about 100 us)

Inputs = list[tuple[Key, ServiceImport | None, list[EndpointSlice]]]
Work = list[tuple[Staged, Worked, LeftOut]]
Report = Callable[[Key, LeftOut], None]  # the names a build of a service left out


def records(zone: Zone, si: ServiceImport | None, slices: list[EndpointSlice], loc: Locality,
            left: LeftOut) -> Names:
    """A service's names and RRsets in `zone` (none without its ServiceImport); the names
    it cannot serve are noted in `left`."""
    return service_records(si, slices, zone.origin, loc, left) if si is not None else {}


class Builder:
    """Builds changed services into the zone through the publisher.

    Invariants: a service is in `building` from the moment its inputs are taken until
    its change is swapped in, and no other change of it reaches the zone meanwhile.
    """

    def __init__(self, store: Store, zone: Zone, publisher: ZonePublisher,
                 again: Callable[[set[Key]], None], report: Report) -> None:
        self.store, self.zone, self.publisher = store, zone, publisher
        self.report = report  # on the loop, after each build of a service
        self.again = again  # rebuild services that changed while they were being built
        self.loop: asyncio.AbstractEventLoop | None = None  # set: large builds run off it
        self.executor: Executor | None = None  # where they run (None: the loop's default)
        self.building: dict[Key, bool] = {}  # service -> changed again meanwhile
        self.digests: dict[Key, int] = {}  # of services being built: folded at their swap
        # services whose records do not read their slices -> the ServiceImport last taken
        self.taken: dict[Key, ServiceImport] = {}
        self.lazy = True  # services not in the zone are marked unbuilt, not built (see the module)
        self.filling = False  # the background pass is under way
        self.loc: Locality | None = None  # the locality of the last rebuild
        self.unsettled: set[Key] | None = set()  # changed before the zone first answers (None: after)
        self.owed: set[Key] = set()  # services whose digest is folded after the load (`settle`)
        zone.build = self._build_unbuilt

    @property
    def idle(self) -> bool:
        """No build is running or waiting to be swapped in."""
        return not self.building

    def rebuild(self, keys: set[Key], loc: Locality) -> None:
        """Bring the zone's records of `keys` up to the store's objects (or mark them unbuilt)."""
        self.loc = loc
        if self.unsettled is not None:
            self.unsettled |= keys
            return
        inputs: Inputs = []
        cost = 0
        imports, taken, versions, zone = self.store.imports, self.taken, self.publisher.versions, self.zone
        marked = False
        for key in keys:
            si = imports.get(key)
            sliceless = si if si is not None and not reads_slices(si) else None
            if sliceless is not None and taken.get(key) is sliceless:
                continue  # only its slices changed: its records cannot have
            if key in self.building:  # built again after the swap, from what it is then
                self.building[key] = True
                continue
            slices = self._read(key, si)
            digest = service_digest(key, si, slices, loc)
            self.owed.discard(key)
            if self.lazy and key not in zone.svc_names:
                taken.pop(key, None)
                versions.fold(key, digest)
                if si is None:
                    zone.unbuilt.discard(key)
                else:
                    zone.unbuilt.add(key)
                marked = True
                continue
            if sliceless is not None:
                taken[key] = sliceless
            else:
                taken.pop(key, None)
            zone.unbuilt.discard(key)
            cost += parsed_size(si, slices) + SERVICE_COST
            inputs.append((key, si, slices))
            self.digests[key] = digest
        if marked:
            versions.unjournaled()  # their records before were never built: no difference known
            self.publisher.commit()
        if not inputs:
            return
        if self.loop is None or load.on_loop(cost):
            for key, _, _ in inputs:
                versions.fold(key, self.digests.pop(key))
            self.publisher.apply(self._built_here(inputs, loc))
            return
        for key, _, _ in inputs:
            self.building[key] = False
        fut = load.in_executor(self.loop, self.executor, self._work, inputs, loc)
        fut.add_done_callback(lambda f: self._built(f, [k for k, _, _ in inputs]))

    def _read(self, key: Key, si: ServiceImport | None) -> list[EndpointSlice]:
        """The slices of `key` its records read (`reads_slices`): none where they read none,
        or without its ServiceImport."""
        return self.store.service(key)[1] if si is not None and reads_slices(si) else []

    def settle(self, defer: bool = False) -> None:
        """At the load (`Pipeline.load`, its one caller): mark what changed while it
        loaded unbuilt, from now on every change as it comes. Each service's digest is
        folded now, or (`defer`, when nothing is built yet, a loop runs the pass and the
        first serial does not depend on the digest: `Versions.deferrable`) after the load,
        about load.PAY_ITEMS per loop turn (`_pay`)."""
        keys, self.unsettled = self.unsettled, None
        if not keys or self.loc is None:
            return
        if not (defer and self.loop is not None and self.lazy and not self.zone.svc_names
                and not self.building and self.publisher.versions.deferrable()):
            self.rebuild(keys, self.loc)
            return
        imports, unbuilt = self.store.imports, self.zone.unbuilt
        for key in keys:
            if key in imports:  # else: no records, and no digest folded yet
                unbuilt.add(key)
                self.owed.add(key)
        self.loop.call_soon(self._pay)

    def _pay(self) -> None:
        """One turn of the digests `settle` deferred: services changed since have theirs."""
        owed, loc, imports = self.owed, self.loc, self.store.imports
        assert loc is not None and self.loop is not None
        fold = self.publisher.versions.fold
        cost = 0
        while owed and cost < load.PAY_ITEMS:
            key = owed.pop()
            si = imports.get(key)
            slices = self._read(key, si)
            fold(key, service_digest(key, si, slices, loc))
            cost += parsed_size(si, slices) + SERVICE_COST
        if owed:
            self.loop.call_soon(self._pay)
        else:
            self.publisher.versions.settled()

    def loaded(self) -> None:
        """The zone answers from data now: build what is unbuilt, in the background on the
        loop, or at once without one."""
        if not self.lazy or self.filling:
            return
        if self.loop is None:
            self.zone.complete()
            self.lazy = False
            return
        load.hold()  # the pass makes no cyclic garbage; released (what it built frozen) at its end
        self.filling = True
        self.loop.call_soon(self._fill)

    def _fill(self) -> None:
        """One turn of the background pass: about load.FILL_ITEMS of unbuilt services."""
        unbuilt, store = self.zone.unbuilt, self.store
        keys: list[Key] = []
        cost = 0
        while unbuilt and cost < load.FILL_ITEMS:
            key = unbuilt.pop()  # not next(iter()): that scans the slots emptied so far (quadratic)
            keys.append(key)
            si, slices = store.service(key)
            cost += parsed_size(si, slices) + SERVICE_COST
        self._build_unbuilt(keys)
        if unbuilt:
            assert self.loop is not None
            self.loop.call_soon(self._fill)
            return
        self.lazy = self.filling = False
        load.filled()
        log.debug("zone complete: every service built")

    def _build_unbuilt(self, keys: list[Key]) -> None:
        """Build unbuilt services into the zone now, as of the store: content the serial
        already counts, so nothing is journaled."""
        loc = self.loc
        if loc is None:
            return
        inputs: Inputs = []
        for key in keys:
            self.zone.unbuilt.discard(key)
            si, slices = self.store.service(key)
            if si is not None and not reads_slices(si):
                self.taken[key] = si
            inputs.append((key, si, slices))
        self.publisher.fill(self._built_here(inputs, loc))

    def resume(self) -> None:
        """In a forked process (the parent's build threads did not come along): build
        again what was being built, on this process's `loop`."""
        keys, self.building = set(self.building), {}
        for key in keys:
            self.taken.pop(key, None)
            self.digests.pop(key, None)
        if keys:
            self.again(keys)
        if self.owed:  # nor its deferred digests
            self.loop.call_soon(self._pay)  # type: ignore[union-attr]
        if self.lazy and self.zone.loaded:  # the parent's background pass did not come along
            self.filling = False
            self.loaded()

    def _built_here(self, inputs: Inputs, loc: Locality) -> Iterator[tuple[Key, Names]]:
        """On the loop: each service's names, its left-out names reported."""
        for key, si, slices in inputs:
            left = LeftOut()
            names = records(self.zone, si, slices, loc, left)
            self.report(key, left)
            yield key, names

    def _work(self, inputs: Inputs, loc: Locality) -> Work:
        """Off the loop: each service's staged zone change, its digest and difference, and
        the names it left out."""
        out: Work = []
        journaled = self.publisher.versions.established  # else `record` diffs, if it must
        for key, si, slices in inputs:
            left = LeftOut()
            st = self.zone.stage(key, records(self.zone, si, slices, loc, left))
            out.append((st, work_out(st.before, st.new, journaled), left))
        return out

    def _built(self, fut: asyncio.Future[Work], keys: list[Key]) -> None:
        if fut.cancelled():
            return  # shutting down
        try:
            work = fut.result()
        except Exception:  # pragma: no cover - a bug in the builders: keep the old records
            log.exception("building %d services failed", len(keys))
            for key in keys:
                self.building.pop(key, None)
                self.taken.pop(key, None)
                self.digests.pop(key, None)
            return
        self._swap(work)

    def _swap(self, work: Work) -> None:
        """Swap in whole services, about load.SWAP_NAMES names this turn; the rest next turn."""
        batch: list[tuple[Staged, Worked]] = []
        names = 0
        while work and names < load.SWAP_NAMES:
            st, w, left = work.pop()
            batch.append((st, w))
            self.report(st.key, left)
            names += len(st.gone) + len(st.put) + SERVICE_COST
        for st, _ in batch:
            self.publisher.versions.fold(st.key, self.digests.pop(st.key))
        self.publisher.swap(batch)
        again = {st.key for st, _ in batch if self.building.pop(st.key, False)}
        if work:
            assert self.loop is not None
            self.loop.call_soon(self._swap, work)
        if again:
            self.again(again)
