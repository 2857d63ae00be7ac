"""`--members-dir`: member kubeconfigs in a directory, one file each, the file name the
member's name, as a mounted Secret lays out its keys (`west -> ..data/west`, `..data` a
symlink swapped on every update; names starting with "." are skipped). Only regular files of
at most MAX_FILE bytes (a Secret's limit) whose path resolves inside the directory are read;
anything else (a FIFO, a device, a symlink out of the directory, a bigger file) is skipped
with one warning, without blocking or reading it whole. Each look compares
the files' contents with the last look: a file added, removed or changed is a member
added, removed or reloaded. Inotify wakes the look early; it runs every POLL s anyway."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass, field

from ...kube.names import is_dns_label
from ...ops.inotify import dir_watch

log = logging.getLogger("mcsdns.controller")

POLL = 2.0  # seconds between looks without an inotify event
MAX_FILE = 1 << 20  # bytes of one member file at most: a Secret's size limit


class Unfit(Exception):
    """A directory entry that is not a member file we read; the message says why."""


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
                out[name] = hashlib.sha256(self.read(name)).hexdigest()
            except IsADirectoryError:
                continue
            except Unfit as e:
                if name not in self.skipped:
                    self.skipped.add(name)
                    log.warning("--members-dir %s: skipping %s: %s", self.path, name, e)
                continue
            except OSError as e:
                log.warning("--members-dir %s: %s: %s", self.path, name, e.strerror)
                continue
            self.skipped.discard(name)
        return out

    def read(self, name: str) -> bytes:
        """The bytes of member file `name`: `Unfit` unless it resolves inside the directory to
        a regular file of at most MAX_FILE bytes. Opened without blocking (a FIFO)."""
        top = os.path.realpath(self.path)
        real = os.path.realpath(self.file(name))
        if os.path.commonpath([top, real]) != top:
            raise Unfit("a symlink to outside the directory")
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(name)
            if not stat.S_ISREG(st.st_mode):
                raise Unfit("not a regular file")
            data = bytearray()
            while st.st_size <= MAX_FILE and len(data) <= MAX_FILE:  # it may grow meanwhile
                part = os.read(fd, MAX_FILE + 1 - len(data))
                if not part:
                    break
                data += part
        finally:
            os.close(fd)
        if st.st_size > MAX_FILE or len(data) > MAX_FILE:
            raise Unfit(f"larger than {MAX_FILE} bytes (a Secret's limit)")
        return bytes(data)

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
