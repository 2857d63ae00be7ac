"""`--workers N` with a Kubernetes source: one list+watch in the supervisor, and workers
forked from it once its zone is loaded, so that the API server sees one watch per pod,
not N, and the workers share the loaded pages (copy-on-write) instead of each building
its own.

- `Tee` (supervisor): what the `KubeSource` feeds: the supervisor's own Store and the
  `Hub`, together, on the event loop.
- `Hub` (supervisor): sends each list (`replace`) and batch of events (`apply`), only the
  fields the Store reads (`objects.essentials`), pickled, to every worker's pipe, in
  order; then `synced` and the source's connection `status`. A worker's pipe is attached
  as it is forked, so it continues exactly from what the worker inherited.
- `RelaySource` (worker): applies what arrives to the worker's Store, on its event loop.

Each pipe is written by its own thread, so a slow or dead worker never stalls the
supervisor's loop; a worker more than `MAX_BACKLOG` messages behind is replaced.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing.connection
import pickle
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..data.objects import essentials
from ..data.store import Store
from ..kube.apiclient.keys import Key
from ..ops.stats import Put
from . import Inbox

log = logging.getLogger("mcsdns.relay")

Obj = dict[str, Any]
Message = tuple[Any, ...]
_STOP: Message = ("stop",)
MAX_BACKLOG = 10_000  # messages a worker may be behind before it is replaced


class _Channel:
    """One worker's pipe, written in order by its own thread."""

    def __init__(self, conn: multiprocessing.connection.Connection, name: str) -> None:
        self.conn = conn
        self.queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"relay-{name}")
        self.thread.start()

    def send(self, msg: Message) -> None:
        self.queue.put(msg)

    def backlog(self) -> int:
        """Messages not yet written to the pipe."""
        return self.queue.qsize()

    def close(self) -> None:
        self.queue.put(_STOP)

    def _run(self) -> None:
        while True:
            msg = self.queue.get()
            if msg is _STOP:
                break
            try:
                self.conn.send(msg)
            except (OSError, ValueError):  # the worker is gone: drop the rest until closed
                while self.queue.get() is not _STOP:
                    pass
                break
        try:
            self.conn.close()
        except OSError:
            pass


def _tap(objs: Iterable[Obj], blobs: list[bytes], kind: str | None = None) -> Iterator[Obj]:
    """Each object, once, after what the workers' Stores read of it (of `kind` if it names
    none) is pickled into `blobs`."""
    for o in objs:
        blobs.append(pickle.dumps(essentials(o, kind), pickle.HIGHEST_PROTOCOL))
        yield o


class Hub:
    """Fans the source's lists and events out to the workers' channels, in order.

    Invariant: a channel attached at the moment its worker is forked (on the event loop,
    between two applied batches) receives every change after what the worker inherited,
    so each worker's Store follows the supervisor's."""

    def __init__(self, max_backlog: int = MAX_BACKLOG) -> None:
        self.channels: dict[int, _Channel] = {}
        self.max_backlog = max_backlog
        self.synced = False
        self.state: tuple[bool, float, str] = (False, 0.0, "")

    def replace(self, kind: str, blobs: list[bytes], applied: Iterable[Key] = ()) -> None:
        self._send(("replace", kind, blobs, list(applied)))

    def apply(self, blobs: list[bytes], deletes: list[tuple[str, Key]]) -> None:
        self._send(("apply", blobs, deletes))

    def mark_synced(self) -> None:
        if not self.synced:
            self.synced = True
            self._send(("synced",))

    def status(self, connected: bool, last_sync: float, error: str) -> None:
        """The source's connection state, passed on when it changes."""
        state = (connected, last_sync, error)
        if state != self.state:
            self.state = state
            self._send(("status", *state))

    def attach(self, i: int, conn: multiprocessing.connection.Connection) -> None:
        """Worker `i`'s (new) pipe, attached as it is forked: every change from now on."""
        old = self.channels.pop(i, None)
        if old is not None:
            old.close()
        ch = _Channel(conn, f"worker-{i}")
        ch.send(("status", *self.state))
        self.channels[i] = ch

    def stuck(self) -> list[int]:
        """Workers more than `max_backlog` messages behind (stopped, or too slow): the
        supervisor replaces them, so what waits for them stays bounded."""
        return [i for i, ch in self.channels.items() if ch.backlog() > self.max_backlog]

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()

    def forget(self) -> None:
        """In a forked worker: close the inherited ends of the supervisor's pipes."""
        for ch in self.channels.values():
            try:
                ch.conn.close()
            except OSError:
                pass
        self.channels.clear()

    def _send(self, msg: Message) -> None:
        for ch in self.channels.values():
            ch.send(msg)


class Tee:
    """--workers, in the supervisor: the source's lists and events go to its own Store and
    to the Hub, together (on the event loop), so that a worker forked at any moment holds
    exactly what its pipe continues from."""

    def __init__(self, store: Store, hub: Hub) -> None:
        self.store, self.hub = store, hub

    @property
    def imports(self) -> dict[Key, Any]:
        return self.store.imports

    @property
    def slices(self) -> dict[Key, Any]:
        return self.store.slices

    def replace(self, kind: str, objs: Iterable[Obj], applied: Iterable[Key] = ()) -> None:
        applied = list(applied)
        if not self.hub.channels:  # no worker yet: nothing to pack
            self.store.replace(kind, objs, applied)
            return
        blobs: list[bytes] = []
        self.store.replace(kind, list(_tap(objs, blobs, kind)), applied)  # all packed now
        self.hub.replace(kind, blobs, applied)

    def apply(self, upserts: Iterable[Obj], deletes: Iterable[tuple[str, Key]]) -> None:
        if not self.hub.channels:
            self.store.apply(upserts, deletes)
            return
        blobs: list[bytes] = []
        gone = list(deletes)
        self.store.apply(list(_tap(upserts, blobs)), gone)
        self.hub.apply(blobs, gone)


class RelaySource:
    """A worker's source: the supervisor's list+watch, applied to this worker's Store."""

    name = "kube"

    def __init__(self, store: Store, conn: multiprocessing.connection.Connection,
                 synced: bool = False) -> None:
        self.store = store
        self.conn = conn
        self.connected = False  # the supervisor's source: every watch established
        self.last_sync = 0.0
        self.last_error = ""
        self._synced = synced  # forked from a supervisor that had synced
        self._inbox: Inbox[Message] = Inbox(self._apply)
        self._thread: threading.Thread | None = None

    @property
    def synced(self) -> bool:
        return self._synced

    def publish(self, put: Put) -> None:
        """Nothing: the supervisor publishes its source's series once for all workers."""

    def configure(self) -> None:
        """Nothing to load: the supervisor's source did."""

    def reload(self) -> None:
        """Nothing: the supervisor's source relists on SIGHUP, and the changes arrive here."""

    def target(self) -> str:
        return "ServiceImports and EndpointSlices from the supervisor's Kubernetes API source"

    def pending(self) -> str:
        return "" if self._synced else "the supervisor's first sync" + (
            f": last error: {self.last_error}" if self.last_error else "")

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._inbox.attach(loop)
        self._thread = threading.Thread(target=self._read, daemon=True, name="relay-reader")
        self._thread.start()

    async def stop(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass

    def _read(self) -> None:
        """Receive and unpickle off the loop; the loop applies in arrival order."""
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return  # the supervisor is gone or closed the pipe: keep serving what we have
            if msg[0] == "replace":
                msg = ("replace", msg[1], [pickle.loads(b) for b in msg[2]], msg[3])
            elif msg[0] == "apply":
                msg = ("apply", [pickle.loads(b) for b in msg[1]], msg[2])
            if not self._inbox.post(msg):
                return  # the loop is closed: shutting down

    def _apply(self, batch: list[Message]) -> None:
        for msg in batch:
            what = msg[0]
            try:
                if what == "replace":
                    self.store.replace(msg[1], msg[2], msg[3])
                elif what == "apply":
                    self.store.apply(msg[1], msg[2])
                elif what == "synced" and not self._synced:
                    self._synced = True
                    log.info("initial sync complete (relayed): %d ServiceImports, %d EndpointSlices",
                             len(self.store.imports), len(self.store.slices),
                             extra={"event": "synced", "source": "kubernetes",
                                    "service_imports": len(self.store.imports),
                                    "endpoint_slices": len(self.store.slices)})
                elif what == "status":
                    self.connected, self.last_sync, self.last_error = msg[1], msg[2], msg[3]
            except Exception:  # pragma: no cover - the Store skips malformed objects itself
                log.exception("applying a relayed %s failed", what)
