"""`--state-dir` persistence for a running server: restore the saved objects into the
Store at start, save the Store after changes while it is live.

The file format is `mcsdns.state`'s; this module decides when to read and write it,
and counts what happened (`mcsdns_state_*` metrics).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ..data import state
from ..data.store import Store
from ..ops.stats import Put, define
from ..sources import Source

log = logging.getLogger("mcsdns")

STATE_RESTORED = define("mcsdns_state_restored", "gauge",
                        "1 while serving state restored from --state-dir (before the first sync).")
STATE_AGE = define("mcsdns_state_restored_age_seconds", "gauge",
                   "Age of the restored state being served: seconds since the source last confirmed it.")
STATE_WRITES = define("mcsdns_state_writes_total", "counter",
                      "--state-dir snapshot writes by result (ok, error).", ("result",))
STATE_REJECTED = define("mcsdns_state_rejected_total", "counter",
                        "--state-dir files found corrupt, foreign or unreadable and ignored.")

STATE_REFRESH = 300.0  # rewrite an unchanged snapshot this often, to refresh its as_of


class StateKeeper:
    """Restores and saves the Store's objects in `path` (a --state-dir's objects file).

    Invariants: `restored_as_of` is set only while the Store serves restored objects that
    no sync has replaced yet; a snapshot is written only while `live()` (the served data
    came from a completed sync), so restored or partial data is never saved as current.
    """

    def __init__(self, store: Store, path: Path, namespaces: list[str], interval: float,
                 synced: Callable[[], bool], sources: Callable[[], Sequence[Source]]) -> None:
        self.store = store
        self.path = path
        self.namespaces = namespaces
        self.interval = interval  # at most one write per this many seconds
        self.synced_zone = synced  # the zone answers from a completed sync
        self.sources = sources
        self.restored_as_of: float | None = None  # set while serving restored state
        self.writes: Counter[str] = Counter({"ok": 0, "error": 0})  # snapshot writes by result
        self.rejected = 0  # state files found unusable
        self.dirty = asyncio.Event()
        store.subscribe(lambda _keys: self.dirty.set())

    def publish(self, put: Put) -> None:
        put(STATE_RESTORED, 0 if self.restored_as_of is None else 1)
        if self.restored_as_of is not None:
            put(STATE_AGE, max(0.0, time.time() - self.restored_as_of))
        for k, v in list(self.writes.items()):
            put(STATE_WRITES, v, result=k)
        put(STATE_REJECTED, self.rejected)

    def restore(self) -> bool:
        """Load the saved objects into the Store; False (reported, counted) when there are
        none or the file is unusable."""
        try:
            saved = state.read(self.path, self.namespaces)
        except state.StateError as e:
            self.rejected += 1
            log.error("state file %s ignored: %s", self.path, e)
            return False
        if saved is None:
            log.info("no saved state in %s yet", self.path)
            return False
        try:
            self.store.restore(saved.objects)
        except Exception:  # noqa: BLE001 - the Store skips malformed objects; this is a last guard
            log.exception("state file %s ignored: restoring it failed", self.path)
            self.rejected += 1
            self.store.drop_restored()
            return False
        self.restored_as_of = saved.as_of
        when = datetime.fromtimestamp(saved.as_of, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        imports, slices, age = len(self.store.imports), len(self.store.slices), time.time() - saved.as_of
        log.warning("serving restored state until the first sync: %d ServiceImports, "
                    "%d EndpointSlices from %s, as of %s (%.0f s ago)", imports, slices,
                    self.path, when, age,
                    extra={"event": "state_restored", "service_imports": imports, "endpoint_slices": slices,
                           "path": self.path, "as_of": when, "age_seconds": round(age, 3)})
        return True

    def live(self) -> bool:
        """Synced, and no longer serving restored state: what is served may be saved."""
        return self.restored_as_of is None and self.synced_zone()

    def synced(self) -> None:
        """The first full sync is in the Store: restored objects it did not confirm go."""
        if self.restored_as_of is not None:
            gone = self.store.drop_restored()
            self.restored_as_of = None
            log.info("first sync complete: live data replaces the restored state "
                     "(%d restored objects no longer exist)", gone,
                     extra={"event": "restored_state_replaced", "gone": gone})
        self.dirty.set()

    def _confirmed_at(self) -> float:
        """When the store was last known to match the source: now while connected."""
        now = time.time()
        return min((now if s.connected else s.last_sync or now for s in self.sources()), default=now)

    async def save(self) -> None:
        """Write the snapshot (serialised and written off the event loop)."""
        store = self.store
        args = (list(store.imports.values()), list(store.slices.values()), store.cluster_id,
                self.namespaces, self._confirmed_at())
        path = self.path

        def write() -> None:
            state.write_atomic(path, state.encode(*args))

        try:
            await asyncio.get_running_loop().run_in_executor(None, write)
        except OSError as e:
            if not self.writes["error"]:
                log.error("cannot write state file %s: %s", path, e)
            self.writes["error"] += 1
            return
        if self.writes["error"] and not self.writes["ok"]:
            log.info("state file %s written", path)
        self.writes["ok"] += 1

    async def writer(self) -> None:
        """Save after changes (at most every `interval` s) and every STATE_REFRESH s."""
        last = float("-inf")
        while True:
            try:
                await asyncio.wait_for(self.dirty.wait(), STATE_REFRESH)
            except TimeoutError:
                pass
            wait = last + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.dirty.clear()
            if not self.live():
                continue  # the first sync sets `dirty` again
            await self.save()
            last = time.monotonic()
