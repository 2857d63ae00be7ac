"""The informer set of one API server: discover what it serves, watch a set of
collections, combine their health, tell each problem once. `mcsdns serve`
(sources/kube.py) and each member of `mcsdns controller` (controller/informers.py) run one.

- `discover(step)` calls `step` until it returns True, backing off (full jitter, or the
  Retry-After of a 429 or 5xx) while it raises, each failure a problem of DISCOVERY; after
  False it waits the backoff's cap;
- `watch` / `cache` add collections (a Reflector, or a Cache on one); `start` starts
  those not started yet. Add a batch before starting it: the set is healthy while every
  collection's last list/watch outcome was good (and there is one);
- every outcome calls `on_health(healthy, changed)`; a new problem (`errors.Problems`:
  the same explanation, or kind of failure to get an answer, is one problem however many
  collections have it) calls `on_problem(who, text)` once; `errors` counts failures by
  kind, `last_error` and `last_sync` are for metrics and readiness."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from .cache import Cache, OnChange
from .client import Client
from .errors import Problems, asked_wait, error_kind, explain
from .reflector import Backoff, Reflector

DISCOVERY = "discovery"


class Informers:
    """Collections of one API server, with their combined health."""

    def __init__(self, client: Client, stop: threading.Event, *, backoff: tuple[float, float] = (0.2, 10.0),
                 on_health: Callable[[bool, bool], None] = lambda ok, changed: None,
                 on_problem: Callable[[str, str], None] = lambda who, text: None,
                 errors: Counter[str] | None = None) -> None:
        self.client, self.stop, self.backoff = client, stop, backoff
        self.on_health, self.on_problem = on_health, on_problem
        self.reflectors: dict[str, Reflector] = {}  # by label, in the order added
        self.ok: dict[str, bool] = {}  # by label: the last outcome of each
        self.healthy = False
        self.errors: Counter[str] = Counter() if errors is None else errors
        self.last_error = ""  # the explanation of the last failure
        self.last_sync = 0.0  # unix time of the last good outcome
        self.problems = Problems()
        self.lock = threading.Lock()

    # --- discovery -----------------------------------------------------------------------
    def discover(self, step: Callable[[], bool]) -> bool:
        """Call `step` until it returns True; False when `stop` was set first."""
        backoff = Backoff(*self.backoff)
        while not self.stop.is_set():
            try:
                done = step()
            except Exception as e:  # noqa: BLE001 - any failure is retried
                self.report(DISCOVERY, False, e)
                self.stop.wait(backoff.next(asked_wait(e)))
                continue
            backoff.reset()
            self.problems.update(DISCOVERY, None)
            if done:
                return True
            self.stop.wait(self.backoff[1])
        return False

    # --- collections ---------------------------------------------------------------------
    def watch(self, label: str, path: str, selector: str | None = None, **kw: Any) -> Reflector:
        """Add a collection read by a Reflector (keyword arguments: the Reflector's)."""
        r = Reflector(label, self.client, path, selector, stop=self.stop, backoff=self.backoff,
                      on_health=partial(self.report, label), on_error=self.count, **kw)
        self._add(label, r)
        return r

    def cache(self, label: str, path: str, on_change: OnChange, **kw: Any) -> Cache:
        """Add a collection kept in a Cache (keyword arguments: the Cache's and Reflector's)."""
        c = Cache(label, self.client, path, on_change, self.stop, on_health=partial(self.report, label),
                  backoff=self.backoff, on_error=self.count, **kw)
        self._add(label, c.reflector)
        return c

    def _add(self, label: str, r: Reflector) -> None:
        with self.lock:
            self.reflectors[label] = r
            self.ok[label] = False

    def start(self) -> None:
        for r in list(self.reflectors.values()):
            if r.thread is None:
                r.start()

    def labels(self) -> list[str]:
        with self.lock:
            return list(self.reflectors)

    def relist(self) -> None:
        """Relist every collection now, from the latest state."""
        for r in list(self.reflectors.values()):
            r.request_relist()

    def interrupt(self) -> list[threading.Thread]:
        """Interrupt every open watch (after setting `stop`); the threads to join."""
        out = []
        for r in list(self.reflectors.values()):
            r.interrupt()
            if r.thread is not None:
                out.append(r.thread)
        return out

    # --- health --------------------------------------------------------------------------
    def count(self, kind: str) -> None:
        """A counted error that is no outage ("expired", "bad_event", "bad_item", "long_line")."""
        self.errors[kind] += 1

    def report(self, who: str, ok: bool, err: BaseException | None = None) -> None:
        """One outcome of collection `who` (or of DISCOVERY)."""
        failed = None if ok else err or Exception("unknown error")
        text = ""
        if failed is not None:
            self.errors[error_kind(failed)] += 1
            r = self.reflectors.get(who)
            text = explain(failed, r.request if r is not None else None)
            self.last_error = text if who == DISCOVERY else f"{who}: {text}"
        new = self.problems.update(who, failed, text)
        with self.lock:
            if who in self.ok:
                self.ok[who] = ok
            now = ok and bool(self.ok) and all(self.ok.values())
            changed, self.healthy = now != self.healthy, now
        if ok:
            self.last_sync = time.time()
        self.on_health(now, changed)
        if new:
            self.on_problem(who, text)
