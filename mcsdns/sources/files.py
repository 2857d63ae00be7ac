"""Manifest-directory source: YAML/JSON files of Kubernetes objects.

The directory is scanned by (mtime, size, inode) when inotify reports a change
(Linux) and every 0.25 s regardless; only changed files are re-read, in a
worker thread, and only objects whose content changed reach the Store. A file
that fails to parse is reported and its last good content kept, so a
half-saved edit never blanks answers. A directory that cannot be listed is an
error at start (OSError from `start`); later, it is treated like an API outage:
the last good objects stay served, `connected` turns False, each failed scan
counts as error "dir_unreadable", and a warning is logged once (and a notice
once it is readable again).

Each file is read by `manifest.load_file` (bounded, safe types only).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from ..data.objects import KINDS
from ..data.store import Store
from ..ops import load
from ..ops.errors import os_reason
from ..ops.fileio import Refused
from ..ops.inotify import dir_watch
from ..ops.stats import Put
from . import publish_source
from .limits import MANIFEST_MAX_BYTES
from .manifest import load_file

log = logging.getLogger("mcsdns.files")

SUFFIXES = (".yaml", ".yml", ".json")
FullKey = tuple[str, str, str]  # kind, namespace, name
Sig = tuple[int, int, int]


def _full_key(obj: dict[str, Any]) -> FullKey | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    kind, ns = obj.get("kind"), meta.get("namespace", "default")
    if not isinstance(ns, str):
        return None
    return (kind if isinstance(kind, str) else "", ns, meta["name"])


class FileSource:
    """A directory of manifests, polled and woken by inotify where it has it, re-read on change."""

    name = "files"

    def __init__(self, store: Store, directory: str, interval: float = 0.25,
                 max_bytes: int = MANIFEST_MAX_BYTES) -> None:
        self.store = store
        self.dir = Path(directory)
        self.interval = interval
        self.max_bytes = max_bytes
        self.sigs: dict[Path, Sig] = {}
        self.contents: dict[Path, dict[FullKey, dict[str, Any]]] = {}
        self.errors: Counter[str] = Counter()
        self.connected = True  # metrics: False while the directory cannot be listed
        self.last_sync = 0.0  # unix time of the last completed poll
        self.last_error = ""  # why the directory could not be listed, last time it could not
        self._synced = False
        self._task: asyncio.Task[None] | None = None
        self._watch = dir_watch()  # wakes the poller at once on Linux
        self._wake = asyncio.Event()

    @property
    def synced(self) -> bool:
        return self._synced

    def publish(self, put: Put) -> None:
        publish_source(put, self.name, self.connected, self.last_sync, self.errors)

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._watch is not None:
            loop.add_reader(self._watch.fd, self._on_inotify)
        await self.poll(loop, first=True)
        self._synced = True
        self._task = loop.create_task(self._run(loop))

    def _on_inotify(self) -> None:
        if self._watch is not None and self._watch.drain():
            self._wake.set()

    def configure(self) -> None:
        """Nothing to load: the directory is checked when the flag is parsed, and at start."""

    def reload(self) -> None:
        """Re-read every file at the next poll."""
        self.sigs.clear()

    def target(self) -> str:
        return f"the manifests in {self.dir}"

    def pending(self) -> str:
        return "" if self._synced else f"the first read of the manifests in {self.dir}"

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._watch is not None:
            asyncio.get_running_loop().remove_reader(self._watch.fd)
            self._watch.close()
            self._watch = None

    async def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
                await asyncio.sleep(0.002)  # let a burst of events (a multi-file copy) settle
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.poll(loop)
            except Exception:
                log.exception("manifest poll failed")

    def _scan(self) -> dict[Path, Sig]:
        """Signatures of the manifest files; OSError when the directory, or one below it,
        cannot be listed (then nothing is known about the files it holds)."""
        sigs: dict[Path, Sig] = {}
        failed: list[OSError] = []
        for root, dirs, files in os.walk(self.dir, onerror=failed.append):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if self._watch is not None:
                self._watch.add(os.path.realpath(root))
            for f in files:
                if f.endswith(SUFFIXES) and not f.startswith("."):
                    p = Path(root, f)
                    try:
                        st = p.stat()
                    except OSError:
                        continue
                    sigs[p] = (st.st_mtime_ns, st.st_size, st.st_ino)
        if failed:
            raise failed[0]
        return sigs

    def _read(self, changed: list[Path]) -> dict[Path, dict[FullKey, dict[str, Any]] | None]:
        out: dict[Path, dict[FullKey, dict[str, Any]] | None] = {}
        for p in changed:
            try:
                objs: dict[FullKey, dict[str, Any]] = {}
                unnamed = 0
                for o in load_file(p, self.max_bytes):
                    k = _full_key(o)
                    if k is None or k[0] not in KINDS:
                        unnamed += k is None
                        continue
                    objs[k] = o
                if unnamed:
                    self.errors["object"] += unnamed
                    log.warning("%s: skipped %d objects: metadata.name or namespace not a string", p, unnamed)
                out[p] = objs
            except FileNotFoundError:
                out[p] = {}
            except Refused as e:
                self.errors[f"file_{e.reason}"] += 1
                log.warning("%s: skipped manifest file: %s", p, e)
                out[p] = None
            except (OSError, ValueError, yaml.YAMLError, UnicodeDecodeError) as e:
                self.errors["file"] += 1
                log.warning("%s: skipped unreadable manifest file: %s", p, e)
                out[p] = None
        return out

    async def poll(self, loop: asyncio.AbstractEventLoop, first: bool = False) -> None:
        """Apply what changed since the last poll. The first poll raises OSError when the
        directory cannot be listed; later ones keep the last good objects."""
        try:
            sigs = await loop.run_in_executor(None, self._scan)
        except OSError as e:
            if first:
                raise
            self.errors["dir_unreadable"] += 1
            self.last_error = f"{self.dir}: {os_reason(e)}"
            if self.connected:
                self.connected = False
                log.warning("manifest directory %s cannot be read (%s): serving the last good "
                            "data and retrying", self.dir, os_reason(e))
            return
        if not self.connected:
            self.connected = True
            log.info("manifest directory %s can be read again", self.dir)
        changed = [p for p, s in sigs.items() if self.sigs.get(p) != s]
        removed = [p for p in self.sigs if p not in sigs]
        self.last_sync = time.time()
        if not changed and not removed:
            return
        big = sum(sigs[p][1] for p in changed) > load.HOLD_BYTES
        if big:
            load.hold()
        try:
            upserts, deletes = await loop.run_in_executor(None, self._changes, changed, removed, sigs)
        finally:
            if big:
                load.release()
        self.store.apply(upserts, deletes)

    def _changes(self, changed: list[Path], removed: list[Path],
                 sigs: dict[Path, Sig]) -> tuple[list[dict[str, Any]], list[tuple[str, tuple[str, str]]]]:
        """Off the loop (one poll at a time): read the changed files, fold them into
        `contents`, and return the objects to upsert and the keys to delete, in time
        linear in the objects."""
        read = self._read(changed)
        touched: set[FullKey] = set()
        for p in removed:
            touched |= self.contents.pop(p, {}).keys()
            del self.sigs[p]
        for p, objs in read.items():
            self.sigs[p] = sigs[p]
            if objs is None:
                continue  # keep the last good content of a broken file
            old = self.contents.get(p, {})
            touched |= {k for k in old.keys() | objs.keys() if old.get(k) != objs.get(k)}
            self.contents[p] = objs
        first: dict[FullKey, dict[str, Any]] = {}  # the first file's object of each touched key
        for c in self.contents.values():
            for k in c.keys() & touched:
                first.setdefault(k, c[k])
        upserts = [first[k] for k in touched if k in first]
        deletes = [(k[0], (k[1], k[2])) for k in touched if k not in first]
        return upserts, deletes
