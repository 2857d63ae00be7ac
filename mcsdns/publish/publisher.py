"""The one owner of the zone version: applies changes, assigns the serial, keeps the
journal and publishes the new view.

`ZonePublisher.apply` sets each changed service in the zone, folds the returned
changes into the digest and journal (`zone.journal.Versions`), drops what the
response cache kept for the names touched, then gives the new content its serial:
the zone's SOA, the cache's copy for negative answers, and the NOTIFY listeners,
in that order, in one synchronous step on the event loop. Nothing else commits:
no poll, no commit inside a transfer. Workers sharing a serial file adopt a serial
another allocated for the same content when the file changes (inotify).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable

from ..kube.apiclient.keys import Key
from ..nameserver.cache import ResponseCache
from ..ops.inotify import DirWatch, dir_watch
from ..zone.journal import Versions, Worked
from ..zone.rrsets import Names
from ..zone.zone import Staged, Zone

log = logging.getLogger("mcsdns.serial")

RETRY = 0.5  # seconds before trying again when the serial state cannot be used
FALLBACK_POLL = 1.0  # seconds between looks at a shared serial file where inotify is missing


class ZonePublisher:
    """Changes → zone → serial → journal → response cache → listeners.

    Invariants: every change to the zone goes through `apply` or `load`; the serial
    the zone serves is the one `versions` assigned to its content; the cache never
    holds a response for a name changed since it was kept.
    """

    def __init__(self, zone: Zone, versions: Versions, cache: ResponseCache,
                 shared_file: str | None = None) -> None:
        self.zone = zone
        self.versions = versions
        self.cache = cache
        self.shared_file = shared_file  # a serial file other workers may write
        self.on_serial: list[Callable[[int, bool], None]] = []  # (serial, allocated here)
        self._retry: asyncio.TimerHandle | None = None
        self._watch: DirWatch | None = None

    def apply(self, changes: Iterable[tuple[Key, Names]]) -> None:
        """Set each service's names, then publish the result under its serial."""
        touched: set[bytes] = set()
        for key, names in changes:
            change = self.zone.set_service(key, names)
            self.versions.record(change)
            touched |= change.names
        self.cache.invalidate(touched)
        self.commit()

    def fill(self, built: Iterable[tuple[Key, Names]]) -> None:
        """Set the names of services built for the first time (`publish.builder`): content
        the serial already counts (nothing journaled, no new serial); only what the cache
        may hold for their names is dropped (a namespace's name they add)."""
        touched: set[bytes] = set()
        for key, names in built:
            touched |= self.zone.set_service(key, names).names
        self.cache.invalidate(touched)

    def swap(self, work: Iterable[tuple[Staged, Worked]]) -> None:
        """As `apply`, for changes staged and worked out off the loop (publish.builder)."""
        sets: list[set[bytes]] = []
        for st, worked in work:
            change = self.zone.commit(st)
            self.versions.record(change, worked)
            sets.append(change.names)
        self.cache.invalidate_all_of(sets)
        self.commit()

    def load(self) -> None:
        """The zone holds all the data (first sync, or restored state): answer from it."""
        if self.zone.set_loaded():
            self.cache.invalidate(None)
        self.commit()

    def commit(self) -> None:
        """Give loaded content its serial, if that changed."""
        if not self.zone.loaded:
            return
        try:
            got = self.versions.assign()
        except OSError as e:
            log.warning("serial state unavailable: %s; retrying in %.1f s", e, RETRY)
            self._later(RETRY)
            return
        if got is None:
            return
        serial, allocated = got
        self.cache.invalidate((self.zone.set_serial(serial),))
        self.cache.set_serial(serial)
        for fn in self.on_serial:
            fn(serial, allocated)

    def _later(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._retry is None or self._retry.cancelled() or self._retry.when() < loop.time():
            self._retry = loop.call_later(delay, self.commit)

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Adopt serials other workers allocate: commit when the shared file changes."""
        if not self.shared_file:
            return
        directory, name = os.path.split(os.path.abspath(self.shared_file))
        self._watch = dir_watch()
        if self._watch is None:
            loop.create_task(self._poll())
            return
        self._watch.add(directory)
        watch = self._watch

        def changed() -> None:
            if name in watch.changed_names():
                self.commit()

        loop.add_reader(watch.fd, changed)

    async def _poll(self) -> None:
        """Where inotify is missing: look at the shared file now and then."""
        while True:
            await asyncio.sleep(FALLBACK_POLL)
            self.commit()

    def forget_watch(self) -> None:
        """In a forked child: drop the parent's file watch and retry (they belong to its
        loop; reading the shared inotify descriptor here would steal its events)."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._retry = None

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._watch is not None:
            loop.remove_reader(self._watch.fd)
            self._watch.close()
            self._watch = None
        if self._retry is not None:
            self._retry.cancel()
