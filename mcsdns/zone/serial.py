"""SOA serials: RFC 1982 arithmetic, and one serial sequence shared by every worker.

A serial names zone *content*: `SerialClock.assign(digest, prev)` returns the
serial for a content digest. The same digest gets the same serial in every
process, and a new digest gets a new serial, max(current + 1, unix time), so
serials stay time-based and always increase. With a file (DIR/serial, shared
by the workers of one server and kept across restarts) the decision is made
under an exclusive flock; without one, in memory.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..ops.fileio import read_bounded, write_atomic

log = logging.getLogger("mcsdns.serial")

HALF = 1 << 31
MOD = 1 << 32
HISTORY = 64  # recent (digest, serial) pairs kept so lagging workers find theirs
MAX_BYTES = 64 * 1024  # the serial file is about 6 kB with a full HISTORY


def serial_lt(a: int, b: int) -> bool:
    """a < b in RFC 1982 serial number arithmetic (32 bits); undefined pairs are False."""
    return a != b and ((a < b and b - a < HALF) or (a > b and a - b > HALF))


def serial_add(s: int, n: int) -> int:
    """s + n (0 <= n < 2**31) in serial arithmetic."""
    return (s + n) % MOD


def next_serial(cur: int | None, now: float | None = None) -> int:
    """The serial after `cur`: the unix time when that is later, else cur + 1."""
    t = int(time.time() if now is None else now) % MOD
    if cur is None:
        return t
    nxt = serial_add(cur, 1)
    return t if serial_lt(nxt, t) else nxt


def _serial(v: Any) -> bool:
    """v is a serial number: an int (not a bool) in [0, 2**32)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MOD


class SerialClock:
    """Assigns serials to content digests; `path` shares them between processes."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._mem: dict[str, Any] = {"serial": None, "digest": "", "history": []}
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def assign(self, digest: bytes, prev: int | None) -> tuple[int, bool]:
        """(serial for `digest`, whether it was newly allocated). Never a serial
        below `prev`, this caller's current one."""
        if not self.path:
            return self._decide(self._mem, digest.hex(), prev)
        with open(self.path + ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._read()
            before = json.dumps(state, sort_keys=True)
            out = self._decide(state, digest.hex(), prev)
            if json.dumps(state, sort_keys=True) != before:
                self._write(state)
            return out

    def fresh(self) -> bool:
        """No serial allocated yet and none shared (no file): the first is a new one whatever
        the content's digest, so it need not wait for the digest (`adopt`)."""
        return not self.path and self._mem["serial"] is None

    def adopt(self, digest: bytes, serial: int) -> None:
        """In memory: `serial`, allocated before the content's digest was known (`fresh`), is
        that of `digest` (what it was allocated for is forgotten)."""
        state = self._mem
        hist = {d: s for d, s in state["history"] if s != serial}
        hist[digest.hex()] = serial
        state["history"] = list(hist.items())[-HISTORY:]
        if state["serial"] == serial:
            state["digest"] = digest.hex()

    def current(self) -> int | None:
        """The newest serial allocated (None before the first)."""
        state = self._read() if self.path else self._mem
        s = state.get("serial")
        return s if isinstance(s, int) else None

    @staticmethod
    def _decide(state: dict[str, Any], digest: str, prev: int | None) -> tuple[int, bool]:
        cur: int | None = state["serial"]
        hist: dict[str, int] = dict(state["history"])
        if cur is not None and digest == state["digest"] and (prev is None or not serial_lt(cur, prev)):
            return cur, False
        old = hist.get(digest)
        if old is not None and (prev is None or not serial_lt(old, prev)):
            # another worker got to this content first, or this caller still holds the
            # content it has the serial for (it has not applied a newer change yet)
            return old, False
        base = cur if prev is None or (cur is not None and serial_lt(prev, cur)) else prev
        s = next_serial(base)
        state["serial"], state["digest"] = s, digest
        hist.pop(digest, None)
        hist[digest] = s
        state["history"] = list(hist.items())[-HISTORY:]
        return s, True

    def _read(self) -> dict[str, Any]:
        assert self.path
        empty: dict[str, Any] = {"serial": None, "digest": "", "history": []}
        try:
            state = json.loads(read_bounded(Path(self.path), MAX_BYTES))
        except FileNotFoundError:
            return empty
        except (OSError, ValueError, RecursionError) as e:  # Refused is a ValueError
            log.warning("ignoring unreadable serial state %s: %s", self.path, e)
            return empty
        ok = (isinstance(state, dict) and (state.get("serial") is None or _serial(state["serial"]))
              and isinstance(state.get("digest"), str) and isinstance(state.get("history"), list)
              and all(isinstance(h, list) and len(h) == 2 and isinstance(h[0], str)
                      and _serial(h[1]) for h in state["history"]))
        if not ok:
            log.warning("ignoring malformed serial state %s", self.path)
            return empty
        out: dict[str, Any] = state
        return out

    def _write(self, state: dict[str, Any]) -> None:
        assert self.path
        try:
            write_atomic(Path(self.path), json.dumps(state).encode())
        except OSError as e:
            log.warning("cannot write serial state %s: %s", self.path, e)
