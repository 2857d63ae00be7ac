"""The test API server's watch streams, as kube-apiserver's watch cache serves them: synthetic
ADDED events from resourceVersion 0, the retained window (410 Gone below it), bookmarks,
selectors and `timeoutSeconds`."""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable

from .resources import Resource, truthy
from .select import field_matcher, label_matcher
from .status import Obj, status
from .store import Event, Store, view

Send = Callable[[bytes], None]
NO_WATCH_LIST = ("a watch stream was requested by the client but the required storage feature "
                 "RequestWatchProgress is disabled")


def event_line(typ: str, obj: Obj) -> bytes:
    """One watch event as the line kube-apiserver streams."""
    return json.dumps({"type": typ, "object": obj}, separators=(",", ":")).encode() + b"\n"


class Watches:
    """Every watch stream of one API server: ended together (`end_all`), bookmarked together
    (`bookmark`), and the time each event was first streamed (`emitted`, for benchmarks)."""

    def __init__(self, store: Store, bookmark_interval: float) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval
        self.epoch = 0  # bumped by end_all() to end watch loops
        self.bookmark_epoch = 0
        self.emitted: dict[int, float] = {}
        self.watch_list = False  # serve streaming lists (a real server on an etcd with progress notify)

    def end_all(self) -> None:
        """End every watch loop (call with the store's lock held)."""
        self.epoch += 1
        self.store.cond.notify_all()

    def bookmark(self) -> None:
        """A BOOKMARK now on every watch that allowed them (call with the store's lock held)."""
        self.bookmark_epoch += 1
        self.store.cond.notify_all()

    def stream(self, send: Send, r: Resource, api_version: str, ns: str | None, q: dict[str, str],
               metadata_only: bool = False) -> None:
        """Stream events until timeoutSeconds, `end_all()` or a broken connection."""
        _Stream(self, send, r, api_version, ns, q, metadata_only).run()


class _Stream:
    """One watch request: its filters, its position (`rv`) and when its next bookmark is due."""

    def __init__(self, watches: Watches, send: Send, r: Resource, api_version: str, ns: str | None,
                 q: dict[str, str], metadata_only: bool = False) -> None:
        self.w, self.store, self.send = watches, watches.store, send
        self.metadata_only = metadata_only
        self.r, self.api_version, self.ns, self.q = r, api_version, ns, q
        self.labels = label_matcher(q.get("labelSelector", ""))
        self.fields = field_matcher(q.get("fieldSelector", ""), r)
        self.bookmarks = truthy(q.get("allowWatchBookmarks"))
        self.deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        self.rv = 0
        self.epoch = self.bm_epoch = 0
        self.next_bm = 0.0

    def view(self, o: Obj) -> Obj:
        """An object as this watch streams it: whole, or as a PartialObjectMetadata."""
        if self.metadata_only:
            return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"]}
        return view(o, self.api_version)

    def visible(self, o: Obj) -> bool:
        md = o["metadata"]
        return ((self.ns is None or md.get("namespace") == self.ns)
                and self.labels(md.get("labels") or {}) and self.fields(o))

    def run(self) -> None:
        initial = self._begin()
        if initial is None:
            return
        for b in initial:
            self.send(b)
        self.next_bm = time.monotonic() + self.w.bookmark_interval
        while (out := self._next()) is not None:
            for erv, b in out:
                self.send(b)
                if erv:
                    self.w.emitted.setdefault(erv, time.perf_counter())

    def streaming(self) -> bool:
        """Whether this watch is a streaming list: `sendInitialEvents=true`, or (as the server
        defaults it) bookmarks allowed from resourceVersion unset or 0."""
        send = self.q.get("sendInitialEvents")
        from_now = self.q.get("resourceVersion") in (None, "", "0")
        return truthy(send) or (send is None and self.bookmarks and from_now)

    def _initial(self) -> list[bytes] | None:
        """(lock held) The synthetic ADDED events of the current state (and, in a streaming list,
        the bookmark that ends them); None once the refusal of a streaming list is sent."""
        if self.streaming() and not self.w.watch_list:
            self.send(event_line("ERROR", status(500, "InternalError", NO_WATCH_LIST)))
            return None
        self.rv = self.store.rv
        out = [event_line("ADDED", self.view(o))
               for o in self.store.matching(self.r, lambda _ns, o: self.visible(o))]
        if self.streaming():
            out.append(event_line("BOOKMARK", self._bookmark({"k8s.io/initial-events-end": "true"})))
        return out

    def _bookmark(self, annotations: dict[str, str] | None = None) -> Obj:
        md: Obj = {"resourceVersion": str(self.store.rv)}
        if annotations:
            md["annotations"] = annotations
        return {"kind": self.r.kind, "apiVersion": self.api_version, "metadata": md}

    def _begin(self) -> list[bytes] | None:
        """The position to watch from and the synthetic ADDED events of resourceVersion 0;
        None once a 410 for a resourceVersion outside the window (or a refusal) is sent."""
        rv_s = self.q.get("resourceVersion") or "0"
        with self.store.cond:
            self.epoch, self.bm_epoch = self.w.epoch, self.w.bookmark_epoch
            if self.q.get("sendInitialEvents") == "false" and rv_s == "0":
                self.rv = self.store.rv
                return []
            if rv_s == "0" or truthy(self.q.get("sendInitialEvents")):
                return self._initial()
            try:
                self.rv = int(rv_s)
            except ValueError:
                self.rv = -1
            if self.rv < self.store.floor or self.rv > self.store.rv:
                self.send(event_line("ERROR", status(410, "Expired", f"too old resource version: {rv_s} "
                                                     f"({self.store.floor})")))
                return None
            return []

    def _next(self) -> list[tuple[int, bytes]] | None:
        """The next lines to send, each with its event's resourceVersion (0: a bookmark);
        None when the watch ends."""
        with self.store.cond:
            got = self._wait()
            if got is None:
                return None
            evs, want_bm, now = got
            self.bm_epoch = self.w.bookmark_epoch
            out = []
            for erv, g, p, typ, obj in evs:
                self.rv = erv
                if (g, p) == (self.r.group, self.r.plural) and self.visible(obj):
                    out.append((erv, event_line(typ, self.view(obj))))
            if want_bm:
                self.next_bm = now + self.w.bookmark_interval
                out.append((0, event_line("BOOKMARK", self._bookmark())))
                self.rv = self.store.rv
            return out

    def _wait(self) -> tuple[list[Event], bool, float] | None:
        """(lock held) Wait for events after `rv` or a due bookmark: (events, bookmark due, now);
        None when the watch ends (a 410 sent first if the window moved past `rv`)."""
        while True:
            now = time.monotonic()
            if self.w.epoch != self.epoch or now >= self.deadline:
                return None
            if self.rv < self.store.floor:
                self.send(event_line("ERROR", status(410, "Expired", f"too old resource version: {self.rv}")))
                return None
            i = bisect.bisect_right(self.store.events, self.rv, key=lambda e: e[0])
            evs = self.store.events[i:]
            want_bm = self.bookmarks and (now >= self.next_bm or self.w.bookmark_epoch != self.bm_epoch)
            if evs or want_bm:
                return evs, want_bm, now
            self.store.cond.wait(min(self.deadline, self.next_bm if self.bookmarks else self.deadline) - now)
