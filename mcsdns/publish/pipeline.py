"""The zone pipeline, without sockets: store → records → publisher → response cache,
and the handler that answers from them.

`Pipeline` subscribes to its Store: each batch of changed services is built into
records (`builder`, off the loop when large) and published (`publisher`: zone, serial,
journal, cache). The locality the records are ordered by is --cluster-id, else the
watched ClusterProperty's; when that changes, every service is rebuilt. The handler
and the transfers answer from what was published. Whatever feeds the Store (sources,
a test) and whatever carries queries to `handler.respond` (listeners, a test) is the
caller's: the pipeline opens no socket and starts no task until `off_loop`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable

from ..data.store import Store
from ..dns import tsig
from ..kube.apiclient.keys import Key
from ..nameserver import CACHE_BYTES
from ..nameserver.cache import ResponseCache
from ..nameserver.handler import Handler
from ..nameserver.xfr import Transfers
from ..ops import load
from ..ops.stats import Publisher
from ..zone.journal import Versions
from ..zone.leftout import LeftOutLog
from ..zone.locality import OFF, Locality
from ..zone.serial import SerialClock
from ..zone.zone import Zone
from .builder import Builder
from .publisher import ZonePublisher

log = logging.getLogger("mcsdns")


class Pipeline:
    """One process's zone: fed through `store`, answered through `handler`.

    Invariants: every change of the store reaches the zone through `rebuild` (records
    ordered by the current `locality`) and the publisher; the zone answers from data
    (`ready`) only after `load`.
    """

    def __init__(self, zone: str = "clusterset.local", ttl: int = 5, serial: int | None = None, *,
                 cache_bytes: int = CACHE_BYTES, locality: Locality = OFF,
                 serial_file: str | None = None, allow_transfer: Iterable[str] = (),
                 tsig_keys: Iterable[tsig.Key] = (), store: Store | None = None) -> None:
        keys = list(tsig_keys)
        self.configured = locality  # --cluster-id and the rest of the locality flags
        self._built_with = locality
        self._disagreed = ""  # the ClusterProperty's ID last warned about
        self.store = Store() if store is None else store  # given: a source already feeds it
        self.zone = Zone(zone, ttl, serial)
        self.cache = ResponseCache(self.zone, cache_bytes)
        self.handler = Handler(self.cache)
        self.handler.tsig_keys.update((k.name, k) for k in keys)
        self.store.subscribe(self.rebuild)
        self.left_out = LeftOutLog(self.store)  # names too long to serve
        # serial per content, journal (zone.journal), shared with the workers through `serial_file`
        self.versions = Versions(self.zone, SerialClock(serial_file))
        self.publisher = ZonePublisher(self.zone, self.versions, self.cache, serial_file)
        self.builder = Builder(self.store, self.zone, self.publisher, self.rebuild, self.left_out.report)
        self.transfers = Transfers(self.zone, self.versions, list(allow_transfer), keys)

    def publishers(self) -> list[Publisher]:
        """The series of the pipeline's parts."""
        return [self.cache.publish, self.handler.publish, self.store.publish, self.left_out.publish,
                self.zone.publish, self.versions.publish, self.transfers.publish]

    @property
    def locality(self) -> Locality:
        """The configured locality; without a cluster ID, the watched ClusterProperty's."""
        loc = self.configured
        if not loc.cluster_id and self.store.cluster_id:
            loc = dataclasses.replace(loc, cluster_id=self.store.cluster_id)
        return loc

    def rebuild(self, keys: set[Key]) -> None:
        """Build `keys` into the zone; every service when the locality changed."""
        loc = self.locality
        watched = self.store.cluster_id or ""
        if loc.cluster_id and watched not in ("", loc.cluster_id, self._disagreed):
            self._disagreed = watched
            log.warning("--cluster-id %s disagrees with the ClusterProperty's cluster ID %s: answers rank "
                        "endpoints by %s (the flag wins); fix whichever is wrong", loc.cluster_id, watched,
                        loc.cluster_id)
        if loc != self._built_with:  # the cluster ID arrived or changed: rebuild everything
            self._built_with = loc
            keys = set(keys) | set(self.store.imports) | set(self.zone.svc_names)
        self.builder.rebuild(keys, loc)

    @property
    def idle(self) -> bool:
        """Everything the store was given is parsed and built into the zone."""
        return self.store.idle and self.builder.idle

    @property
    def ready(self) -> bool:
        """The zone answers from data: loaded (first sync, or restored state)."""
        return self.zone.loaded

    @property
    def served_serial(self) -> int | None:
        """The SOA serial served, once loaded content has one."""
        return self.zone.serial if self.versions.established else None

    def load(self, answer: bool = True, fill: bool = True) -> None:
        """The store holds all the data: each service changed meanwhile digested once (the
        serial's input) and marked unbuilt, every later change built as it comes. With
        `answer`, the zone answers from it under its serial, and with `fill` the records
        not built yet are built in the background (at once without a loop); they are built
        when asked for in any case (a query, a transfer, `Zone.complete`)."""
        self.builder.settle(defer=answer and fill)
        if not answer:
            return
        self.publisher.load()
        if fill:
            self.builder.loaded()

    def off_loop(self, loop: asyncio.AbstractEventLoop, forked: bool = False) -> None:
        """From now on, parse large objects and build large services off `loop` (in
        `load.executor()`), and adopt serials other workers allocate. `forked`: in a process forked from the
        one that built this pipeline: drop its file watch, redo what it did off its loop."""
        if forked:
            self.publisher.forget_watch()
        self.store.loop = self.builder.loop = loop
        self.store.executor = self.builder.executor = load.executor()
        self.store.resume()
        self.builder.resume()
        self.publisher.watch(loop)

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop watching the serial file; drop builds not started."""
        self.publisher.close(loop)
        if self.store.executor is not None:
            self.store.executor.shutdown(wait=False, cancel_futures=True)
