"""One work queue per member: the writes to a member wait only for that member.

A service key that changes is queued in every member's queue (`add`); each member's
workers take keys off its own queue and write only into that member, so a slow, hung or
unreachable member holds up only its own queue. Each queue is a `WorkQueue` (de-duplicating,
per-key backoff); the figures of all are summed for the metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..kube.apiclient.keys import Key
from .queue import Timings, WorkQueue


class MemberQueues:
    """A `WorkQueue` per member name, fed together."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queues: dict[str, WorkQueue] = {}

    def open(self, name: str) -> WorkQueue:
        """The queue of member `name` (made on first use)."""
        with self.lock:
            q = self.queues.get(name)
            if q is None:
                q = self.queues[name] = WorkQueue()
            return q

    def drop(self, name: str) -> None:
        """Member `name` left: its queue closes (its workers stop)."""
        with self.lock:
            q = self.queues.pop(name, None)
        if q is not None:
            q.close()

    def _all(self) -> list[WorkQueue]:
        with self.lock:
            return list(self.queues.values())

    def add(self, key: Key) -> None:
        for q in self._all():
            q.add(key)

    def add_all(self, keys: Iterable[Key]) -> None:
        ks = list(keys)
        for q in self._all():
            q.add_all(ks)

    def add_to(self, names: Iterable[str], key: Key) -> None:
        """Queue `key` for the members named (those without a queue are skipped)."""
        with self.lock:
            qs = [self.queues[n] for n in names if n in self.queues]
        for q in qs:
            q.add(key)

    def idle(self) -> bool:
        """Nothing queued, delayed or processing in any member's queue. A worker may queue a
        key for other members (`add_to`) between two queues' looks: the adds counted before
        and after the look must agree."""
        qs = self._all()
        before = sum(q.adds for q in qs)
        quiet = all(q.idle() for q in qs)
        return quiet and sum(q.adds for q in qs) == before

    def failing(self) -> bool:
        """Whether some key's last reconcile in some member failed."""
        return any(q.failures for q in self._all())

    def depths(self) -> dict[str, int]:
        with self.lock:
            items = list(self.queues.items())
        return {name: q.depth() for name, q in items}

    def figures(self) -> tuple[int, int, int, Timings, Timings]:
        """(depth, adds, retries, waited, worked) summed over the members' queues."""
        depth = adds = retries = 0
        waited, worked = Timings(), Timings()
        for q in self._all():
            d, a, r, w1, w2 = q.figures()
            depth, adds, retries = depth + d, adds + a, retries + r
            for into, t in ((waited, w1), (worked, w2)):
                into.buckets = [x + y for x, y in zip(into.buckets, t.buckets, strict=True)]
                into.total += t.total
        return depth, adds, retries, waited, worked

    def close(self) -> None:
        for q in self._all():
            q.close()
