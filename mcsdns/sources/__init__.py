"""Sources feed Kubernetes objects into the Store.

A source is started with the Store and the event loop. It must call Store
methods (`upsert`, `delete`, `replace`, `apply`) only on the event-loop
thread (its threads hand over through an `Inbox`), and set `synced` once it
has applied a first complete view of every kind it serves. Sources: `files`
(--manifests; `manifest` reads one file, bounded), `kube` (the API), `relay` (a
--workers worker, fed by its supervisor's `kube`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:  # kubefirst and limits are imported before asyncio (ops/load.py, stage 1)
    import asyncio

from ..ops.stats import Put, define

CONNECTED = define("mcsdns_source_connected", "gauge", "1 while the source is connected.", ("source",))
LAST_SYNC = define("mcsdns_source_last_sync_timestamp_seconds", "gauge",
                   "Unix time of the last successful sync.", ("source",))
ERRORS = define("mcsdns_source_errors_total", "counter", "Source errors by kind.", ("source", "error"))


class Sink(Protocol):
    """Where a source puts what it reads: the Store, or (`--workers`) the relay's Hub."""

    @property
    def imports(self) -> Sized: ...

    @property
    def slices(self) -> Sized: ...

    def replace(self, kind: str, objs: Iterable[dict[str, Any]],
                applied: Iterable[tuple[str, str]] = ()) -> None: ...

    def apply(self, upserts: Iterable[dict[str, Any]],
              deletes: Iterable[tuple[str, tuple[str, str]]]) -> None: ...


class Source(Protocol):
    """Where objects come from (files or a Kubernetes API); it feeds the Store. Everything
    a caller (the roles, the state keeper, `mcsdns records`) uses of a source is here."""

    name: str
    connected: bool  # reading works now (every watch established, the directory listed)
    last_sync: float  # unix time of the last successful read (0: none yet)
    last_error: str  # the last error, for a person ("" if none)

    @property
    def synced(self) -> bool:
        """True once a first full view of every kind has been applied."""
        ...

    def configure(self) -> None:
        """Load what the source needs before anything starts; ConfigError if it cannot."""
        ...

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin feeding the store; returns once running (not necessarily synced)."""
        ...

    async def stop(self) -> None:
        ...

    def reload(self) -> None:
        """Read everything again (SIGHUP)."""
        ...

    def target(self) -> str:
        """What the source reads from, for a person."""
        ...

    def pending(self) -> str:
        """What the first sync still lacks, and the last error, for a person ("" once synced)."""
        ...

    def publish(self, put: Put) -> None:
        """Samples of the source's metrics (`publish_source`)."""
        ...


def publish_source(put: Put, name: str, connected: bool, last_sync: float,
                   errors: Mapping[str, int]) -> None:
    """The metrics every source has: connected, time of the last sync (when
    there was one), errors by kind."""
    put(CONNECTED, 1 if connected else 0, source=name)
    if last_sync:
        put(LAST_SYNC, last_sync, source=name)
    for k, v in list(errors.items()):
        put(ERRORS, v, source=name, error=str(k))


T = TypeVar("T")


class Inbox(Generic[T]):
    """Items posted by a source's threads, handed to the event loop in order: `on_batch`
    runs on the loop with every item posted since its last run. Items posted before the
    loop is attached wait for it."""

    def __init__(self, on_batch: Callable[[list[T]], None]) -> None:
        self.on_batch = on_batch
        self.loop: asyncio.AbstractEventLoop | None = None  # `attach`ed
        self._items: list[T] = []
        self._pending = False  # a flush is scheduled (or, before `attach`, items wait)
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand what is posted to `loop` from now on, and what was posted before (on the loop)."""
        with self._lock:
            self.loop = loop
            waiting = self._pending
        if waiting:
            loop.call_soon(self._flush)

    def post(self, item: T) -> bool:
        """Queue `item` (any thread); False once the loop is closed (shutting down)."""
        with self._lock:
            self._items.append(item)
            if self._pending:
                return True
            self._pending = True
            loop = self.loop
        if loop is None:  # not attached yet: `attach` flushes
            return True
        try:
            loop.call_soon_threadsafe(self._flush)
        except RuntimeError:
            return False
        return True

    def _flush(self) -> None:
        with self._lock:
            items, self._items, self._pending = self._items, [], False
        self.on_batch(items)
