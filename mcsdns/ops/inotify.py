"""Linux inotify through ctypes: a non-blocking fd that becomes readable when a file
in watched directories is closed after writing, moved, created, deleted or changes
attributes. Wakes the manifest poller at once (polling stays the fallback), and a
worker when another one allocated a serial."""

from __future__ import annotations

import ctypes
import os
import struct

IN_ATTRIB, IN_CLOSE_WRITE = 0x004, 0x008
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x040, 0x080, 0x100, 0x200
_EVENT = struct.Struct("iIII")  # struct inotify_event before its name
MASK = IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE


class DirWatch:
    """Watches directories (not recursively: call `add` for each one)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library the interpreter runs on
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.watched: set[str] = set()

    def add(self, directory: str) -> None:
        if directory not in self.watched and self._add(self.fd, os.fsencode(directory), MASK) >= 0:
            self.watched.add(directory)

    def drain(self) -> bool:
        """Read pending events; True if there were any."""
        got = False
        while True:
            try:
                if not os.read(self.fd, 65536):
                    return got
                got = True
            except BlockingIOError:
                return got

    def changed_names(self) -> set[str]:
        """Read pending events; the names of the files they are about."""
        names: set[str] = set()
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return names
            if not buf:
                return names
            i = 0
            while i + _EVENT.size <= len(buf):
                _wd, _mask, _cookie, n = _EVENT.unpack_from(buf, i)
                i += _EVENT.size
                names.add(os.fsdecode(buf[i:i + n].rstrip(b"\0")))
                i += n

    def close(self) -> None:
        os.close(self.fd)


def dir_watch() -> DirWatch | None:
    """A DirWatch, or None where inotify is not available."""
    try:
        return DirWatch()
    except (OSError, AttributeError):
        return None
