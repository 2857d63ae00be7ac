"""`--workers N` with a Kubernetes source: one list+watch in the supervisor, relayed to
every worker over a pipe, so that the API server sees one watch per pod, not N.

- `Hub` (supervisor): what the `KubeSource` feeds instead of a Store. It keeps every
  object once, only the fields the Store reads (`objects.essentials`), pickled, and
  sends each list (`replace`) and batch of events (`apply`) to every worker's channel,
  in order; `synced` follows the source's first full sync, and `status` its connection
  state. A channel added later (a restarted worker) first gets the whole current view,
  then what follows.
- `RelaySource` (worker): a Source that applies what arrives to the worker's own Store,
  on the event loop; it is synced once the supervisor's source is.

Each channel is written by its own thread, so a slow or dead worker never stalls the
supervisor's loop; the pipe's buffer bounds what is in flight, the channel's queue holds
the rest (at most one view plus the changes since).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing.connection
import pickle
import queue
import threading
from collections.abc import Iterable
from typing import Any

from ..data.objects import essentials
from ..data.store import ENDPOINT_SLICE, SERVICE_IMPORT, ObjKey, Store, obj_key
from ..ops.stats import Put

log = logging.getLogger("mcsdns.relay")

Obj = dict[str, Any]
Message = tuple[Any, ...]
_STOP: Message = ("stop",)


class _Channel:
    """One worker's pipe, written in order by its own thread."""

    def __init__(self, conn: multiprocessing.connection.Connection, name: str) -> None:
        self.conn = conn
        self.queue: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"relay-{name}")
        self.thread.start()

    def send(self, msg: Message) -> None:
        self.queue.put(msg)

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


def _pack(obj: Obj) -> bytes:
    """What the workers' Stores read of an object, pickled."""
    return pickle.dumps(essentials(obj), pickle.HIGHEST_PROTOCOL)


class Hub:
    """The supervisor's copy of the source's objects, fanned out to the workers' channels.

    Invariant: every channel receives, in order, a complete view of each kind listed so
    far and then every change after it, so each worker's Store equals the supervisor's
    view (a kind not listed yet is not sent: a worker keeps its restored state of it)."""

    def __init__(self) -> None:
        self.objs: dict[str, dict[ObjKey, bytes]] = {}  # by kind, once a list of it came
        self.channels: dict[int, _Channel] = {}
        self.synced = False
        self.state: tuple[bool, float, str] = (False, 0.0, "")

    # --- what KubeSource calls (as on a Store) --------------------------------------------
    @property
    def imports(self) -> dict[ObjKey, bytes]:
        return self.objs.get(SERVICE_IMPORT, {})

    @property
    def slices(self) -> dict[ObjKey, bytes]:
        return self.objs.get(ENDPOINT_SLICE, {})

    def replace(self, kind: str, objs: Iterable[Obj]) -> None:
        fresh = {obj_key(o): _pack(o) for o in objs}
        self.objs[kind] = fresh
        self._send(("replace", kind, list(fresh.values())))

    def apply(self, upserts: Iterable[Obj], deletes: Iterable[tuple[str, ObjKey]]) -> None:
        blobs = []
        for o in upserts:
            b = _pack(o)
            self.objs.setdefault(str(o.get("kind")), {})[obj_key(o)] = b
            blobs.append(b)
        gone = list(deletes)
        for kind, k in gone:
            self.objs.get(kind, {}).pop(k, None)
        self._send(("apply", blobs, gone))

    # --- the supervisor's side ------------------------------------------------------------
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
        """Worker `i`'s (new) pipe: the current view first, then every change."""
        old = self.channels.pop(i, None)
        if old is not None:
            old.close()
        ch = _Channel(conn, f"worker-{i}")
        for kind, objs in self.objs.items():
            ch.send(("replace", kind, list(objs.values())))
        if self.synced:
            ch.send(("synced",))
        ch.send(("status", *self.state))
        self.channels[i] = ch

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()

    def _send(self, msg: Message) -> None:
        for ch in self.channels.values():
            ch.send(msg)


class RelaySource:
    """A worker's source: the supervisor's list+watch, applied to this worker's Store."""

    name = "kube"

    def __init__(self, store: Store, conn: multiprocessing.connection.Connection) -> None:
        self.store = store
        self.conn = conn
        self.connected = False  # the supervisor's source: every watch established
        self.last_sync = 0.0
        self.last_error = ""
        self._synced = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._queue: list[Message] = []
        self._flush_pending = False
        self._thread: threading.Thread | None = None

    @property
    def synced(self) -> bool:
        return self._synced

    def publish(self, put: Put) -> None:
        """Nothing: the supervisor publishes its source's series once for all workers."""

    def target(self) -> str:
        return "ServiceImports and EndpointSlices from the supervisor's Kubernetes API source"

    def pending(self) -> str:
        return "" if self._synced else "the supervisor's first sync" + (
            f": last error: {self.last_error}" if self.last_error else "")

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
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
                msg = ("replace", msg[1], [pickle.loads(b) for b in msg[2]])
            elif msg[0] == "apply":
                msg = ("apply", [pickle.loads(b) for b in msg[1]], msg[2])
            with self._lock:
                self._queue.append(msg)
                if self._flush_pending:
                    continue
                self._flush_pending = True
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._flush)
            except RuntimeError:  # the loop is closed: shutting down
                return

    def _flush(self) -> None:
        with self._lock:
            batch, self._queue, self._flush_pending = self._queue, [], False
        for msg in batch:
            what = msg[0]
            try:
                if what == "replace":
                    self.store.replace(msg[1], msg[2])
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
