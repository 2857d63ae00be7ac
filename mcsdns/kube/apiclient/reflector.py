"""List+watch of one collection in a worker thread (the client-go reflector loop).

- list (paged) -> `on_list(items, deleted_keys)` with the complete set, then watch from the
  list's resourceVersion with bookmarks. As client-go's reflector, the first list asks
  for resourceVersion "0" (`Client.open_list`: a complete view, perhaps a moment old, which
  the watch then brings up to date); a relist after 410 Gone asks for the latest instead;
  the first page of the first list may have been asked for already (`first`);
  a watch that ends (timeoutSeconds, idle read timeout) resumes from the last
  resourceVersion; 410 Gone (HTTP status or ERROR event) relists;
- every ADDED/MODIFIED/DELETED event -> `on_event(type, obj)`;
- failed requests back off with full jitter (longer where a 429 or 5xx asks, with
  Retry-After, up to errors.RETRY_AFTER_MAX); a watch that did not run well (a line skipped, a
  line longer than MAX_LINE, or under a second without moving the resourceVersion) and a
  410 are followed only after client-go's watch backoff, 0.8 s doubling to 30 s, jittered;
  `on_health(ok, error)` reports each list/watch outcome;
- what does not decode is counted with `on_error` and skipped: a list item ("bad_item", the
  list served without it), a watch line ("bad_event"), a line too long ("long_line", the watch
  dropped); one warning per list and per watch.

The collection is a path read through the one client (`Client.open`, `Client.watch`), with an
optional label selector; `Reflector.request` is what RBAC must allow for it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...ops import load
from .client import Client
from .errors import ApiError, Expired, Request, WatchError, asked_wait, describe
from .keys import Key, key_of
from .listdecode import BATCH, decode_list
from .transport import Response
from .typedlist import Typed

log = logging.getLogger("mcsdns.kube")

Obj = dict[str, Any]


WATCH_BACKOFF = (0.8, 30.0)  # client-go's reflector: after a watch that did not run well
MAX_LINE = 6 << 20  # a watch event's line: twice the API server's 3 MiB object limit


@dataclass
class Backoff:
    """Exponential backoff, `base` doubling to `cap`: a delay in [0, d) (full jitter), or with
    `least` in [d, 2d) (client-go's jitter); never shorter than a Retry-After asked for
    (`errors.asked_wait`: up to RETRY_AFTER_MAX)."""

    base: float = 0.2
    cap: float = 10.0
    least: bool = False
    attempt: int = 0

    def next(self, asked: float | None = None) -> float:
        d = min(self.cap, self.base * 2 ** self.attempt)
        delay = d + random.uniform(0, d) if self.least else random.uniform(0, d)
        self.attempt = min(self.attempt + 1, 30)
        return max(delay, asked or 0.0)

    def reset(self) -> None:
        self.attempt = 0


class LineTooLong(ValueError):
    """A watch stream's line went on past MAX_LINE."""


def is_read_timeout(e: BaseException | None) -> bool:
    while e is not None:
        if isinstance(e, TimeoutError):  # transport.ReadTimeout is one
            return True
        e = e.__context__
    return False


def lines(resp: Response, limit: int = MAX_LINE) -> Iterator[bytes]:
    """Complete lines of a streamed response, as soon as each chunk arrives; LineTooLong when
    one goes on past `limit` bytes. Each byte is searched for and joined once."""
    parts: list[bytes] = []  # the line begun, not ended yet
    size = 0
    for chunk in resp.chunks():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line = b"".join((*parts, chunk[start:end])) if parts else chunk[start:end]
            parts, size, start = [], 0, end + 1
            if len(line) > limit:
                raise LineTooLong(f"a line of more than {limit} bytes")
            if line.strip():
                yield line
        if start < len(chunk):
            parts.append(chunk[start:])
            size += len(chunk) - start
            if size > limit:
                raise LineTooLong(f"a line of more than {limit} bytes")
    line = b"".join(parts)
    if line.strip():
        yield line


class Reflector:
    """One collection, listed then watched in its own daemon thread until `stop` is set."""

    def __init__(self, label: str, client: Client, path: str, selector: str | None = None, *,
                 on_list: Callable[[list[Obj], set[Key]], None],
                 on_event: Callable[[str, Obj], None],
                 on_health: Callable[[bool, BaseException | None], None] = lambda ok, e: None,
                 on_error: Callable[[str], None] = lambda kind: None,
                 stop: threading.Event | None = None, kind: str | None = None,
                 key: Callable[[Obj], Key] = key_of, page_size: int = 500,
                 watch_timeout: int = 300, idle_timeout: float = 75.0,
                 backoff: tuple[float, float] = (0.2, 10.0),
                 watch_backoff: tuple[float, float] = WATCH_BACKOFF,
                 transform: Callable[[Obj], None] | None = None, typed: Typed | None = None,
                 on_part: Callable[[list[Obj]], None] | None = None, part_size: int = 500,
                 accept: tuple[str, str] = ("application/json", "application/json"),
                 first: Callable[[str, str | None, int, str], Response | None] | None = None) -> None:
        self.label, self.kind, self.key = label, kind, key
        self.transform = transform  # applied to each object in this thread, as it is decoded
        self.typed = typed  # decodes each item of a list (listdecode.decode_list)
        # with `on_part`, a list's objects are handed on `part_size` at a time as they are
        # decoded, and `on_list` gets those left (its deletes are from all of them)
        self.on_part, self.part_size = on_part, part_size
        self._listed: set[Key] = set()
        self.accept = accept  # of the list and of the watch (client.METADATA_ONLY: metadata only)
        # (path, selector, limit, Accept) -> the response to that first page if it was asked for
        # already (ops/load.py, stage 1), else None; asked once, by the first list
        self.first = first
        self.client, self.path, self.selector = client, path, selector
        self.on_list, self.on_event, self.on_health = on_list, on_event, on_health
        self.on_error = on_error  # counted, not an outage: "expired", "bad_event", "bad_item", "long_line"
        self.stop = stop or threading.Event()
        self.page_size, self.watch_timeout, self.idle_timeout = page_size, watch_timeout, idle_timeout
        self.backoff, self.watch_backoff = backoff, watch_backoff
        self.rv: str | None = None
        self.latest = False  # the next list must be the latest state (after 410 Gone)
        self.known: set[Key] = set()
        self.relist = False
        self.lists = 0  # completed lists (the first one and every relist)
        self.begun = 0  # lists begun (a failed one included): which one `on_part` and `on_list` are of
        self.resp: Response | None = None  # the open watch response, to interrupt it
        self.thread: threading.Thread | None = None
        self.request = Request.of(path, ("list", "watch"))
        self._unreadable = 0  # lines of the current watch that were skipped

    def start(self, name: str | None = None) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True, name=name or f"reflector-{self.label}")
        self.thread.start()

    def request_relist(self) -> None:
        """Relist now, from the latest state (SIGHUP)."""
        self.relist = True
        self.latest = True
        self.interrupt()

    def interrupt(self) -> None:
        resp = self.resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def run(self) -> None:
        backoff = Backoff(*self.backoff)  # after a failed request
        watch_backoff = Backoff(*self.watch_backoff, least=True)  # after a watch that did not run well
        while not self.stop.is_set():
            try:
                if self.rv is None or self.relist:
                    self.relist = False
                    self._list()
                    backoff.reset()
                if self._watch():
                    backoff.reset()
                    watch_backoff.reset()
                elif not self.relist:
                    self.stop.wait(watch_backoff.next())  # never spin on a broken or hostile stream
            except Expired as e:
                self.on_error("expired")
                log.info("%s: %s; relisting", self.label, e)
                self.rv = None
                self.latest = True
                self.stop.wait(watch_backoff.next())  # a server that answers every watch with 410: no spin
            except Exception as e:  # noqa: BLE001 - nothing may kill the thread
                if self.stop.is_set():
                    return
                if self.relist:
                    continue
                if not isinstance(e, ApiError | OSError | ValueError | WatchError):
                    log.exception("%s: unexpected error", self.label)
                self.on_health(False, e)
                log.debug("%s: %s", self.label, describe(e))
                self.stop.wait(backoff.next(asked_wait(e)))

    def _list(self) -> None:
        items: list[Obj] = []
        dropped: list[str] = []  # why each item that did not decode was skipped
        self._listed = set()
        self.begun += 1
        try:
            meta = self._pages(items, dropped)
        finally:
            if dropped:
                log.warning("%s: skipped %d list item(s) that do not decode; the first: %s",
                            self.label, len(dropped), dropped[0])
        self.rv = str(meta.get("resourceVersion") or "")
        self.latest = False
        keys, self._listed = self._listed, set()
        deletes, self.known = self.known - keys, keys
        self.lists += 1
        self.on_health(True, None)
        self.on_list(items, deletes)
        log.debug("%s: listed %d at resourceVersion %s", self.label, len(items), self.rv)

    def _pages(self, items: list[Obj], dropped: list[str]) -> Obj:
        """Every page of the list, its items decoded into `items`; the last page's metadata."""
        cont: str | None = None
        first, self.first = self.first, None
        while True:
            resp = None
            if first is not None and not self.latest:
                resp = first(self.path, self.selector, self.page_size, self.accept[0])
                first = None
            try:
                if resp is None:
                    resp = self.client.open_list(self.path, self.selector, self.page_size, cont,
                                                 self.latest, self.accept[0])
            except Expired as e:
                raise Expired(f"list continue token expired: {e.reason}") from e
            try:
                # BATCH bytes a read (a real API server sends 2 KiB chunks; the decoder tries
                # every BATCH characters): http.client joins the chunks
                data = decode_list(iter(partial(resp.read, BATCH), b""), partial(self._item, items, dropped),
                                   typed=self.typed, on_bad=partial(self._dropped, dropped))
            finally:
                resp.release_conn()
            meta = data.get("metadata") or {}
            if not isinstance(meta, dict):
                raise ValueError(f"a list whose metadata is not an object: {str(meta)[:64]!r}")
            cont = meta.get("continue")
            if not cont:
                return meta

    def _dropped(self, dropped: list[str], why: str) -> None:
        """One item of a list that does not decode: counted (and logged with the list)."""
        self.on_error("bad_item")
        dropped.append(why)

    def _item(self, items: list[Obj], dropped: list[str], obj: Any) -> None:
        """One item of a list, as it is decoded (dropped unless an object with object metadata)."""
        meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            what = f"metadata {type(meta).__name__}" if isinstance(obj, dict) else type(obj).__name__
            self._dropped(dropped, f"not an object with metadata ({what})")
            return
        if self.kind is not None:
            obj["kind"] = self.kind
        if self.transform is not None:
            self.transform(obj)
        self._listed.add(self.key(obj))
        items.append(obj)
        if self.on_part is not None and len(items) >= self.part_size:
            self.on_part(items[:])
            items.clear()

    def _watch(self) -> bool:
        """Follow one watch request; whether it ran well: no line skipped, and it moved the
        resourceVersion or lasted a second or more (client-go's "very short watch")."""
        timeout = self.watch_timeout + random.randint(0, max(1, self.watch_timeout // 5))
        started, rv = time.monotonic(), self.rv
        try:
            resp = self.client.watch(self.path, self.rv, self.selector, timeout, self.idle_timeout,
                                     accept=self.accept[1])
        except Expired as e:
            raise Expired(f"watch from resourceVersion {self.rv}: {e.reason}") from e
        self.resp = resp
        if self.stop.is_set() or self.relist:
            resp.shutdown()
        self.on_health(True, None)
        self._unreadable = 0
        try:
            for line in lines(resp):
                self._event(line)
        except (Expired, WatchError):
            raise
        except LineTooLong as e:
            self.on_error("long_line")
            log.warning("%s: watch dropped: %s", self.label, e)
            return False
        except Exception as e:  # noqa: BLE001 - a broken stream is not an outage until a re-watch fails
            if is_read_timeout(e):
                log.debug("%s: watch idle for %.0f s; resuming", self.label, self.idle_timeout)
                return not self._unreadable
            log.debug("%s: watch stream broke: %s", self.label, e)
        finally:
            self.resp = None
            resp.release_conn()
        return not self._unreadable and (self.rv != rv or time.monotonic() - started >= 1.0)

    def _event(self, line: bytes) -> None:
        """One line of a watch."""
        try:
            ev = load.loads(line)
            typ, obj = ev["type"], ev["object"]
            meta = obj.get("metadata") or {}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            self._skip(f"an unreadable watch event ({type(e).__name__}): {line[:64]!r}")
            return
        if typ == "ERROR":
            if obj.get("code") == 410:
                raise Expired(f"watch: {obj.get('message') or 'resourceVersion expired'}")
            raise WatchError(f"watch error event: {obj.get('code')} {obj.get('message')}")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if rv:
            self.rv = str(rv)
        if typ == "BOOKMARK":
            self.on_health(True, None)
            return
        if typ not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(meta, dict):
            self._skip(f"a watch event of type {str(typ)[:64]!r}")
            return
        if self.kind is not None:
            obj["kind"] = self.kind
        key = self.key(obj)
        if typ == "DELETED":
            self.known.discard(key)
        else:
            self.known.add(key)
            if self.transform is not None:
                self.transform(obj)
        self.on_event(typ, obj)

    def _skip(self, what: str) -> None:
        """A watch line skipped: counted; the first of a watch logged as a warning."""
        self.on_error("bad_event")
        self._unreadable += 1
        level = logging.WARNING if self._unreadable == 1 else logging.DEBUG
        log.log(level, "%s: skipped %s", self.label, what)


def rv_int(obj: Obj | None) -> int | None:
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None
