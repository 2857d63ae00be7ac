"""One writer per member: which controller wrote each object of ours, and yielding to another.

Every object the controller creates or updates carries `mcsdns.io/writer: <identity>`
(`identity`: with --leader-elect the Lease, so every replica and restart of one deployment
is the same writer; else the member set) and `mcsdns.io/writer-members: <count>:<hash>`.
Another identity on an object of ours is another controller. It counts as writing whenever
we see an object it stamped that is new to us or changed (a resourceVersion not of our
writes; at start every object is new), and for `grace` seconds after. While it writes, a member's objects of a
service that it stamped are left to it (no update, delete or status; nor the ServiceExport
status there), and that is said once per writer in the log, in a gauge and in a Warning
`WriterConflict` Event on the service's ServiceExports in that member. Once it has been
quiet for `grace` seconds, its objects are ours again (a replaced or reconfigured controller).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from ..kube.apiclient.keys import Key
from .events import WARNING, Event

log = logging.getLogger("mcsdns.controller")

WRITER = "mcsdns.io/writer"
WRITER_MEMBERS = "mcsdns.io/writer-members"
REASON = "WriterConflict"
GRACE = 30.0  # seconds another writer stays "writing" after its last observed write
WRITERS_MAX = 64  # other writers remembered (the least recently active dropped first)
OBJECTS_MAX = 200_000  # other writers' objects whose resourceVersion is remembered
IDENTITY_MAX = 253

Obj = dict[str, Any]


def lease_identity(cluster: str, namespace: str, name: str) -> str:
    """The writer of a leader-elected deployment: its Lease."""
    return f"lease:{cluster}/{namespace}/{name}"[:IDENTITY_MAX]


def members_hash(names: Iterable[str]) -> str:
    """`<count>:<12 hex of sha256>` of the sorted member names."""
    ordered = sorted(set(names))
    return f"{len(ordered)}:{hashlib.sha256(chr(0).join(ordered).encode()).hexdigest()[:12]}"


def members_identity(names: Iterable[str]) -> str:
    """The writer of a controller without leader election: its member set."""
    return f"members:{members_hash(names)}"


def writer_of(obj: Obj) -> str | None:
    """The identity an object carries; None when absent or not a plausible identity."""
    w = ((obj.get("metadata") or {}).get("annotations") or {}).get(WRITER)
    if not isinstance(w, str) or not w or len(w) > IDENTITY_MAX or not w.isprintable():
        return None
    return w


def conflict_event(me: str, other: str) -> Event:
    return (WARNING, REASON, f"Another controller, writer {other!r}, writes this service's objects in "
                             f"this cluster; this one, writer {me!r}, leaves them to it while it does. "
                             "Run one controller per clusterset, or --leader-elect replicas sharing a Lease.")


class Writers:
    """This controller's identity, the other writers seen, and whether to yield (see the module)."""

    def __init__(self, identity: str, members: str, grace: float = GRACE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.me, self.members, self.grace, self.clock = identity[:IDENTITY_MAX], members, grace, clock
        self.lock = threading.Lock()
        self.active: OrderedDict[str, float] = OrderedDict()  # other writer -> last write seen
        self.known: OrderedDict[tuple[str, ...], tuple[str, str]] = OrderedDict()  # object -> (writer, rv)
        self.yielding: dict[tuple[str, str], float] = {}  # (member, other writer) -> last yield
        self.told: set[tuple[str, str]] = set()  # (member, other writer) logged while it writes
        self.evented: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()  # (member, ns, name, w)

    # --- our writes -----------------------------------------------------------------------
    def stamp(self, body: Obj) -> Obj:
        """`body` with our identity in its annotations (a copy; `body` is not changed)."""
        md = dict(body.get("metadata") or {})
        ours = {WRITER: self.me, WRITER_MEMBERS: self.members}
        md["annotations"] = dict(md.get("annotations") or {}, **ours)
        return dict(body, metadata=md)

    def note(self, member: str, resource: str, obj: Obj | None) -> None:
        """The object as our write left it: its new resourceVersion is not another's write."""
        if obj is None:
            return
        k, w = self._key(member, resource, obj), writer_of(obj)
        with self.lock:
            if w is None or w == self.me:
                self.known.pop(k, None)
            else:
                self._remember(k, w, str((obj.get("metadata") or {}).get("resourceVersion") or ""))

    # --- what others write ----------------------------------------------------------------
    def holder(self, member: str, objs: Iterable[tuple[str, Obj]]) -> str | None:
        """Observe `objs` ((resource, object) of one service in `member`); the other writer
        that writes now and stamped one of them, or None (then they are ours to write)."""
        now, found = self.clock(), None
        with self.lock:
            for resource, obj in objs:
                w = writer_of(obj)
                k = self._key(member, resource, obj)
                if w is None or w == self.me:
                    self.known.pop(k, None)
                    continue
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if self.known.get(k) != (w, rv):
                    self.active[w] = now  # new to us, or it wrote this object since we last looked
                    self.active.move_to_end(w)
                    while len(self.active) > WRITERS_MAX:
                        self.active.popitem(last=False)
                self._remember(k, w, rv)
                if now - self.active[w] < self.grace:
                    found = found or w
            if found is not None:
                self.yielding[(member, found)] = now
        return found

    def wait(self, other: str) -> float:
        """Seconds until `other` has been quiet for the grace period."""
        with self.lock:
            return max(0.0, self.grace - (self.clock() - self.active.get(other, 0.0)))

    def first(self, member: str, other: str) -> bool:
        """Whether yielding to `other` in `member` is news (log it): once while it writes."""
        with self.lock:
            self._expire()
            if (member, other) in self.told:
                return False
            self.told.add((member, other))
            return True

    def first_event(self, member: str, key: Key, other: str) -> bool:
        """Whether to put an Event on the service's exports in `member` (once per writer)."""
        k = (member, key[0], key[1], other)
        with self.lock:
            if k in self.evented:
                return False
            self.evented[k] = None
            while len(self.evented) > 4096:
                self.evented.popitem(last=False)
            return True

    def conflicts(self, member: str) -> int:
        """Other writers this controller yields to in `member` now."""
        with self.lock:
            self._expire()
            return sum(1 for (m, _) in self.yielding if m == member)

    # --- internals ------------------------------------------------------------------------
    @staticmethod
    def _key(member: str, resource: str, obj: Obj) -> tuple[str, ...]:
        md = obj.get("metadata") or {}
        return (member, resource, str(md.get("namespace") or ""), str(md.get("name") or ""))

    def _remember(self, k: tuple[str, ...], w: str, rv: str) -> None:
        self.known[k] = (w, rv)
        self.known.move_to_end(k)
        while len(self.known) > OBJECTS_MAX:
            self.known.popitem(last=False)

    def _expire(self) -> None:
        """Forget yields to writers quiet for the grace period (they may be told again)."""
        now = self.clock()
        for mw in [mw for mw, t in self.yielding.items() if now - t >= self.grace
                   or now - self.active.get(mw[1], 0.0) >= self.grace]:
            del self.yielding[mw]
            self.told.discard(mw)
            for k in [k for k in self.evented if (k[0], k[3]) == mw]:
                del self.evented[k]
