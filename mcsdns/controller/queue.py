"""A de-duplicating work queue of (namespace, name) keys, as client-go's workqueue.

A key waiting in the queue is held once however often it is added. A key
being processed is never handed to a second worker: added meanwhile, it is
queued again when its worker calls `done`. `add_after` delays a key (retry
with backoff); `failures` counts consecutive failures per key for that backoff.
It keeps client-go's workqueue figures: adds, retries, how long keys wait before a
worker takes them (`waited`) and how long a worker holds one (`worked`, get to done).

`MemberQueues`: one such queue per member, so the writes to a member wait only for that
member. A service key that changes is queued in every member's queue (`add`); each member's
workers take keys off its own queue and write only into that member, so a slow, hung or
unreachable member holds up only its own queue; the figures of all are summed for the metrics.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable

from ..kube.apiclient.keys import Key

# Upper bounds (seconds) of the wait and work duration histograms.
BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Timings:
    """A histogram of durations: counts per bucket of `BOUNDS` (the last for +Inf) and their sum."""

    def __init__(self) -> None:
        self.buckets = [0] * (len(BOUNDS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect_left(BOUNDS, seconds)] += 1
        self.total += seconds


class WorkQueue:
    """De-duplicating queue of service keys, with per-key retry backoff."""

    def __init__(self, base_delay: float = 0.05, max_delay: float = 30.0) -> None:
        self.cond = threading.Condition()
        self.queue: deque[Key] = deque()
        self.waiting: set[Key] = set()  # in `queue`
        self.processing: set[Key] = set()
        self.dirty: set[Key] = set()  # added while processing
        self.delayed: list[tuple[float, Key]] = []
        self.failures: dict[Key, int] = {}
        self.base_delay, self.max_delay = base_delay, max_delay
        self.closed = False
        self.adds = 0  # keys queued (a key already waiting is not counted again)
        self.retries = 0
        self.queued_at: dict[Key, float] = {}  # waiting key -> when it was queued
        self.started_at: dict[Key, float] = {}  # processing key -> when a worker took it
        self.waited, self.worked = Timings(), Timings()

    def add(self, key: Key) -> None:
        with self.cond:
            self._add(key)

    def add_all(self, keys: Iterable[Key]) -> None:
        with self.cond:
            for k in keys:
                self._add(k)

    def _add(self, key: Key) -> None:
        if key in self.processing:
            self.dirty.add(key)
        elif key not in self.waiting:
            self.waiting.add(key)
            self.queue.append(key)
            self.adds += 1
            self.queued_at[key] = time.monotonic()
            self.cond.notify()

    def add_after(self, key: Key, delay: float) -> None:
        with self.cond:
            heapq.heappush(self.delayed, (time.monotonic() + delay, key))
            self.cond.notify()

    def retry(self, key: Key, least: float = 0.0) -> float:
        """Re-queue `key` after a jittered exponential delay, at least `least` s (a
        Retry-After); returns the delay."""
        with self.cond:
            n = self.failures.get(key, 0)
            self.failures[key] = n + 1
            self.retries += 1
        backoff = min(self.max_delay, self.base_delay * 2 ** min(n, 20)) * random.uniform(0.5, 1.0)
        delay: float = max(least, backoff)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        with self.cond:
            self.failures.pop(key, None)

    def _promote(self) -> float | None:
        """Move due delayed keys into the queue; seconds until the next one (None: none)."""
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            _, k = heapq.heappop(self.delayed)
            self._add(k)
        return self.delayed[0][0] - now if self.delayed else None

    def get(self, timeout: float | None = None) -> Key | None:
        """The next key (marked processing), or None on timeout or close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while True:
                nxt = self._promote()
                if self.closed:
                    return None
                if self.queue:
                    k = self.queue.popleft()
                    self.waiting.discard(k)
                    self.processing.add(k)
                    now = time.monotonic()
                    self.waited.observe(now - self.queued_at.pop(k, now))
                    self.started_at[k] = now
                    return k
                wait = nxt
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self.cond.wait(wait)

    def done(self, key: Key) -> None:
        with self.cond:
            self.processing.discard(key)
            started = self.started_at.pop(key, None)
            if started is not None:
                self.worked.observe(time.monotonic() - started)
            if key in self.dirty:
                self.dirty.discard(key)
                self._add(key)

    def depth(self) -> int:
        with self.cond:
            return len(self.queue) + len(self.delayed)

    def figures(self) -> tuple[int, int, int, Timings, Timings]:
        """(depth, adds, retries, waited, worked), copied under the lock."""
        with self.cond:
            copies = []
            for t in (self.waited, self.worked):
                c = Timings()
                c.buckets, c.total = list(t.buckets), t.total
                copies.append(c)
            return len(self.queue) + len(self.delayed), self.adds, self.retries, copies[0], copies[1]

    def idle(self) -> bool:
        """Nothing queued, delayed or being processed."""
        with self.cond:
            return not self.queue and not self.processing and not self.delayed

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


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
