"""Kubernetes Events on ServiceExports (core v1 `Event`, what `kubectl describe` and
`kubectl events` show), in the member cluster the export lives in; and on a member's
Lease (`about=LEASE`), where the member's reachability is told.

`export_events` says what a reconcile tells about one export: Ready turned True (Normal
`Exported`), a port conflict (Warning `PortConflict`), a conflict between exports (Warning,
the Conflict condition's reason), an invalid export (Warning, the Valid condition's
reason), and writes that failed in the export's own member (Warning `SyncFailed`, on every
reconcile that has them; a failure in another member is not told to the healthy ones).
`Recorder` writes them as client-go's recorder does: off the reconcile path (a bounded
queue and one thread), the same event again is the same Event object with
`count` + 1 and a new `lastTimestamp` (an update, which Events allow without a
resourceVersion; a new one when it was deleted meanwhile), and each object gets at most
`burst` events, then one per `refill` seconds (client-go's spam filter: 25, one per 5 min).
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections import Counter, OrderedDict
from datetime import UTC, datetime
from typing import Any

from ..kube.apiclient.errors import ApiError, NotFound
from ..kube.resources import EVENTS, LEASES
from .member.client import MemberClient

log = logging.getLogger("mcsdns.controller")

Obj = dict[str, Any]
Event = tuple[str, str, str]  # type (Normal, Warning), reason, message
About = tuple[str, str] | None  # the involved object's (apiVersion, kind); None: a ServiceExport
LEASE: About = (LEASES.api_version(), LEASES.kind)
COMPONENT = "mcsdns-controller"
NORMAL, WARNING = "Normal", "Warning"
MESSAGE_LIMIT = 1024  # kube-apiserver's limit of an Event's note
CACHE = 4096  # events and objects remembered (client-go's LRU size)


def _conditions(obj: Obj | None) -> dict[str, tuple[str, str, str]]:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return {str(c.get("type")): (str(c.get("status")), str(c.get("reason")), str(c.get("message")))
            for c in conds}


def export_events(before: Obj | None, after: Obj | None, failed: list[str]) -> list[Event]:
    """The events of one reconcile of an export: its conditions' changes from `before` to
    `after` (the export as read, and as written), and the writes that failed."""
    old, new = _conditions(before), _conditions(after)
    out: list[Event] = []
    for typ in ("Valid", "Ready", "Conflict"):
        c = new.get(typ)
        if c is None or c == old.get(typ):
            continue
        status, reason, message = c
        if typ == "Ready" and status == "True":
            out.append((NORMAL, reason, message))
        elif (typ == "Ready" and reason == "PortConflict") or (typ == "Conflict" and status == "True") or (
                typ == "Valid" and status == "False"):
            out.append((WARNING, reason, message))
    if failed:
        out.append((WARNING, "SyncFailed", "; ".join(sorted(set(failed)))))
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recorder:
    """Writes Events for objects of member clusters (see the module)."""

    def __init__(self, burst: int = 25, refill: float = 300.0, queue_size: int = 1000,
                 instance: str | None = None) -> None:
        self.burst, self.refill = burst, refill
        self.instance = instance or socket.gethostname()
        self.pending: queue.Queue[tuple[MemberClient, Obj, Event, About] | None] = queue.Queue(queue_size)
        self.seen: OrderedDict[tuple[str, ...], Obj] = OrderedDict()  # event key -> the Event sent
        self.tokens: OrderedDict[tuple[str, ...], tuple[float, float]] = OrderedDict()  # object -> (n, when)
        self.written: Counter[tuple[str, str, str]] = Counter()  # (member, type, reason)
        self.dropped: Counter[tuple[str, str]] = Counter()  # (member, why: rate, queue, error)
        self.lock = threading.Lock()  # the counters, read at scrape time
        self._thread: threading.Thread | None = None
        self._last_ns = 0

    # --- the reconcile side -------------------------------------------------------------
    def export(self, m: MemberClient, before: Obj, after: Obj | None, failed: list[str]) -> None:
        """Queue the events of one reconcile of the export `before` in member `m`."""
        for ev in export_events(before, after, failed):
            self.emit(m, after or before, ev)

    def emit(self, m: MemberClient, obj: Obj, ev: Event, about: About = None) -> None:
        """Queue one event about `obj`; dropped (and counted) when the queue is full."""
        with self.lock:  # one writer thread, started by the first event
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="events")
                self._thread.start()
        try:
            self.pending.put_nowait((m, obj, ev, about))
        except queue.Full:
            self._drop(m.name, "queue")

    def close(self) -> None:
        """Stop the writer once what is queued is written (or 2 s have passed)."""
        if self._thread is not None:
            try:
                self.pending.put(None, timeout=1.0)
            except queue.Full:
                pass
            self._thread.join(2.0)

    # --- the writer ---------------------------------------------------------------------
    def _run(self) -> None:
        while (item := self.pending.get()) is not None:
            try:
                self.record(*item)
            except Exception:  # never lose the writer to one event
                log.exception("event not written")

    def _drop(self, member: str, why: str) -> None:
        with self.lock:
            self.dropped[(member, why)] += 1

    def _allow(self, obj_key: tuple[str, ...]) -> bool:
        """The object's token bucket: `burst` tokens, one more each `refill` seconds."""
        now = time.monotonic()
        n, when = self.tokens.pop(obj_key, (float(self.burst), now))
        n = min(float(self.burst), n + (now - when) / self.refill)
        ok = n >= 1.0
        self.tokens[obj_key] = (n - 1.0 if ok else n, now)
        while len(self.tokens) > CACHE:
            self.tokens.popitem(last=False)
        return ok

    def record(self, m: MemberClient, obj: Obj, ev: Event, about: About = None) -> Obj | None:
        """Write one event now (the writer thread's step): created, or the same one counted
        again; None when rate-limited or refused."""
        md = obj.get("metadata") or {}
        ns, name, uid = str(md.get("namespace") or ""), str(md.get("name") or ""), str(md.get("uid") or "")
        typ, reason, message = ev
        obj_key = (m.name, ns, name, uid)
        if not self._allow(obj_key):
            self._drop(m.name, "rate")
            return None
        key = (*obj_key, typ, reason, message)
        prev, now = self.seen.pop(key, None), _now()
        sent = self._new(m, obj, ev, now, about) if prev is None else dict(prev, count=prev["count"] + 1,
                                                                      lastTimestamp=now)
        try:
            out = self._create(m, ns, sent) if prev is None else self._update(m, ns, sent)
        except ApiError as e:
            log.info("cluster %s: event %s on %s %s/%s not written: %s", m.name, reason,
                     (about or ("", "ServiceExport"))[1], ns, name, e)
            self._drop(m.name, "error")
            return None
        self.seen[key] = sent  # what was sent, not the answer (its managedFields): the next update
        while len(self.seen) > CACHE:
            self.seen.popitem(last=False)
        with self.lock:
            self.written[(m.name, typ, reason)] += 1
        return out

    def _new(self, m: MemberClient, obj: Obj, ev: Event, now: str, about: About = None) -> Obj:
        md = obj.get("metadata") or {}
        self._last_ns = max(self._last_ns + 1, time.time_ns())
        api_version, kind = about or (m.mcs_api_version(), "ServiceExport")
        ref = {"apiVersion": api_version, "kind": kind, "namespace": md.get("namespace"),
               "name": md.get("name"), "uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")}
        return {"apiVersion": EVENTS.api_version(), "kind": "Event",
                "metadata": {"name": f"{md.get('name')}.{self._last_ns:x}", "namespace": md.get("namespace")},
                "involvedObject": {k: v for k, v in ref.items() if v},
                "type": ev[0], "reason": ev[1], "message": ev[2][:MESSAGE_LIMIT],
                "count": 1, "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT, "reportingInstance": self.instance[:128]}

    @staticmethod
    def _create(m: MemberClient, ns: str, ev: Obj) -> Obj:
        out: Obj = m.request("POST", EVENTS.path(ns), body=ev)
        return out

    def _update(self, m: MemberClient, ns: str, ev: Obj) -> Obj:
        """PUT without a resourceVersion (Events allow it); created again when it is gone."""
        try:
            out: Obj = m.request("PUT", EVENTS.path(ns, ev["metadata"]["name"]), body=ev)
        except NotFound:
            out = self._create(m, ns, ev)
        return out

    # --- metrics ------------------------------------------------------------------------
    def figures(self) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str], int]]:
        """(events written by (member, type, reason), events dropped by (member, why))."""
        with self.lock:
            return dict(self.written), dict(self.dropped)
