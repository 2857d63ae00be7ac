"""Local files read within bounds and replaced atomically.

`read_bounded` reads a regular file only, never more than its limit (so a
FIFO, a device or a file growing meanwhile cannot block or exhaust the
reader). `write_atomic` writes a temporary file with an unpredictable name,
created exclusively (O_EXCL: never through a symlink) with mode 0600, then
renames it over the target.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


class Refused(ValueError):
    """A file refused whole; `reason` (a fixed word) labels it in the metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; Refused (not_regular,
    too_large) otherwise, OSError if it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not_regular", "not a regular file")
        if st.st_size > max_bytes:
            raise Refused("too_large", f"{st.st_size} bytes, over the limit of {max_bytes}")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused("too_large", f"over the limit of {max_bytes} bytes")
    return data


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: temporary file (mode 0600), fsync, rename, fsync of
    the directory."""
    import tempfile  # not on the way to the first answer

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
