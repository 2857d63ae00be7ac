"""An informer cache on top of a Reflector: one collection's objects, kept packed.

Each object is held as its compact JSON encoding (about a third of the memory of the
decoded dicts) with its resourceVersion and index value beside it; every read decodes a
fresh copy, so a caller may change what it gets without touching the cache.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from .client import Client
from .keys import Key, key_of
from .reflector import Obj, Reflector, rv_int

GONE_KEPT = 4096  # deletions remembered (key -> resourceVersion) against late write results
_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
_decode = json.loads


class Entry:
    """One cached object: its resourceVersion (as an integer where it is one), its index
    value and its compact JSON."""

    __slots__ = ("rv", "iv", "raw")

    def __init__(self, rv: int | None, iv: Hashable | None, raw: bytes) -> None:
        self.rv, self.iv, self.raw = rv, iv, raw

    def obj(self) -> Obj:
        out: Obj = _decode(self.raw)
        return out


OnChange = Callable[[Key, Entry | None, Entry | None], None]


class Cache:
    """A thread-safe map of one collection's objects, kept by a Reflector.

    `on_change(key, old, new)` runs on the reflector thread after every change, with the
    old and new `Entry` (new is None on delete; a relist reports only what differs). `transform`
    trims objects in place before they are kept (managedFields never are). `index(obj)`,
    when given, files every object under one index value (None: not indexed),
    read back with `indexed`. `note_written` puts an object one of our writes
    returned into the cache, so a reconcile racing its own watch event does not
    write twice; an event not newer than what is held is ignored when
    resourceVersions compare as integers (they do on etcd-backed servers). A deleted key
    keeps its deletion's resourceVersion (the last `GONE_KEPT` of them), so a write's
    result that arrives after the DELETED event does not bring the object back.
    """

    def __init__(self, label: str, client: Client, path: str, on_change: OnChange, stop: threading.Event,
                 on_health: Callable[[bool, BaseException | None], None] = lambda ok, e: None,
                 index: Callable[[Obj], Hashable | None] | None = None,
                 transform: Callable[[Obj], None] | None = None, **reflector_kw: Any) -> None:
        self.objs: dict[Key, Entry] = {}
        self.by_index: dict[Hashable, dict[Key, Entry]] = {}
        self.gone: OrderedDict[Key, int] = OrderedDict()  # deleted key -> its deletion's resourceVersion
        self.index = index
        self.transform = transform
        self.lock = threading.Lock()
        self.on_change = on_change
        self.synced = threading.Event()
        self.reflector = Reflector(label, client, path, on_list=self._on_list, on_event=self._on_event,
                                   on_health=on_health, stop=stop, **reflector_kw)

    def start(self) -> None:
        self.reflector.start()

    # --- reads: each returns fresh copies -----------------------------------------------
    def get(self, key: Key) -> Obj | None:
        e = self.objs.get(key)
        return None if e is None else e.obj()

    def items(self) -> list[tuple[Key, Obj]]:
        with self.lock:
            entries = list(self.objs.items())
        return [(k, e.obj()) for k, e in entries]

    def keys(self) -> list[Key]:
        with self.lock:
            return list(self.objs)

    def indexed(self, value: Hashable) -> list[Obj]:
        with self.lock:
            entries = list((self.by_index.get(value) or {}).values())
        return [e.obj() for e in entries]

    def indexed_keys(self, value: Hashable) -> list[Key]:
        with self.lock:
            return list(self.by_index.get(value) or ())

    def index_values(self) -> list[Hashable]:
        with self.lock:
            return list(self.by_index)

    # --- writes -------------------------------------------------------------------------
    def _pack(self, obj: Obj) -> Entry:
        md = obj.get("metadata")
        if isinstance(md, dict):
            md.pop("managedFields", None)
        if self.transform is not None:
            self.transform(obj)
        iv = self.index(obj) if self.index is not None else None
        return Entry(rv_int(obj), iv, _encode(obj).encode())

    def _put(self, key: Key, new: Entry | None) -> Entry | None:
        """Replace one entry (lock held); returns the old one."""
        old = self.objs.pop(key, None) if new is None else self.objs.get(key)
        if new is not None:
            self.objs[key] = new
        if old is not None and old.iv is not None:
            bucket = self.by_index.get(old.iv)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self.by_index[old.iv]
        if new is not None and new.iv is not None:
            self.by_index.setdefault(new.iv, {})[key] = new
        return old

    def _set(self, key: Key, new: Obj | None, force: bool,
             gone_rv: int | None = None) -> tuple[Entry | None, Entry | None, bool]:
        """(the previous entry, the new one, whether it was applied: not when not newer than
        what is held, or than the key's deletion). A forced delete remembers `gone_rv` (or
        the deleted entry's resourceVersion)."""
        entry = None if new is None else self._pack(new)
        with self.lock:
            old = self.objs.get(key)
            if not force and entry is not None and entry.rv is not None:
                held = old.rv if old is not None else self.gone.get(key)
                if held is not None and entry.rv <= held:
                    return old, entry, False  # not newer than what we already hold (or deleted)
            self._put(key, entry)
            if entry is not None:
                self.gone.pop(key, None)
            elif (rv := gone_rv if gone_rv is not None else old.rv if old is not None else None) is not None:
                self._gone(key, rv)
        return old, entry, True

    def _gone(self, key: Key, rv: int) -> None:
        """(lock held) Remember `key`'s deletion at `rv`; the oldest beyond GONE_KEPT forgotten."""
        self.gone[key] = max(rv, self.gone.pop(key, rv))
        if len(self.gone) > GONE_KEPT:
            self.gone.popitem(last=False)

    def _on_list(self, items: list[Obj], deletes: set[Key]) -> None:
        changes: list[tuple[Key, Entry | None, Entry | None]] = []
        fresh: dict[Key, Entry] = {}
        while items:  # packed as they come: each decoded object is freed at once
            o = items.pop()
            fresh[key_of(o)] = self._pack(o)
        with self.lock:
            for k in list(self.objs):
                if k not in fresh:
                    gone = self._put(k, None)
                    changes.append((k, gone, None))
                    if gone is not None and gone.rv is not None:
                        self._gone(k, gone.rv)
            for k, e in fresh.items():
                self.gone.pop(k, None)
                old = self.objs.get(k)
                if old is None or old.rv is None or old.rv != e.rv:
                    changes.append((k, old, e))
                self._put(k, e)
        self.synced.set()
        for k, old, new in changes:
            self.on_change(k, old, new)

    def _on_event(self, typ: str, obj: Obj) -> None:
        k = key_of(obj)
        deleted = typ == "DELETED"
        old, new, applied = self._set(k, None if deleted else obj, deleted, rv_int(obj) if deleted else None)
        if applied and not (old is None and deleted):
            self.on_change(k, old, new)

    def note_written(self, obj: Obj | None, key: Key | None = None) -> None:
        """Record the result of our own write (None with `key`: deleted)."""
        if obj is None:
            if key is not None:
                self._set(key, None, True)
            return
        self._set(key_of(obj), obj, False)
