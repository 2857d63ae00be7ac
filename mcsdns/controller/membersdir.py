"""`--members-dir`: member kubeconfigs in a directory, one file each, the file name the
member's name, as a mounted Secret lays out its keys (`west -> ..data/west`, `..data` a
symlink swapped on every update; names starting with "." are skipped). Each look compares
the files' contents with the last look: a file added, removed or changed is a member
added, removed or reloaded. Inotify wakes the look early; it runs every POLL s anyway."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field

from ..kube.names import is_dns_label
from ..ops.inotify import dir_watch

log = logging.getLogger("mcsdns.controller")

POLL = 2.0  # seconds between looks without an inotify event


@dataclass
class Changes:
    """What one look found, by member name."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


class MembersDir:
    """The member kubeconfigs of one directory, and their changes since the last look."""

    def __init__(self, path: str, poll: float = POLL) -> None:
        self.path, self.poll = path, poll
        self.watch = dir_watch()
        if self.watch is not None:
            self.watch.add(path)
        self.seen: dict[str, str] = {}  # member -> digest of its file
        self.skipped: set[str] = set()  # names warned about once
        self.last = 0.0

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def scan(self) -> dict[str, str]:
        """Member name -> the sha256 of its file, for every readable file with a valid name."""
        out: dict[str, str] = {}
        try:
            names = sorted(os.listdir(self.path))
        except OSError as e:
            log.warning("--members-dir %s: %s", self.path, e.strerror)
            return dict(self.seen)  # keep the members while the directory cannot be read
        for name in names:
            if name.startswith("."):
                continue
            if not is_dns_label(name):
                if name not in self.skipped:
                    self.skipped.add(name)
                    log.warning("--members-dir %s: skipping %s: a member's name is a DNS label",
                                self.path, name)
                continue
            try:
                with open(self.file(name), "rb") as f:
                    out[name] = hashlib.sha256(f.read()).hexdigest()
            except IsADirectoryError:
                continue
            except OSError as e:
                log.warning("--members-dir %s: %s: %s", self.path, name, e.strerror)
        return out

    def look(self) -> Changes:
        """Read the directory now; the changes since the last look."""
        now = self.scan()
        old = self.seen
        ch = Changes(added=sorted(now.keys() - old.keys()), removed=sorted(old.keys() - now.keys()),
                     changed=sorted(n for n in now.keys() & old.keys() if now[n] != old[n]))
        self.seen = now
        return ch

    def due(self, now: float) -> bool:
        """Whether to look now: inotify saw something, or POLL s have passed."""
        woke = self.watch is not None and self.watch.drain()
        if woke or now - self.last >= self.poll:
            self.last = now
            return True
        return False
