"""The cyclic GC held off while a large object is decoded, parsed or built off the loop.

A full collection runs in whichever thread allocates past its threshold and holds the
GIL throughout: during a large build (a 100k-endpoint slice allocates about a million
objects) each one over the new objects paused answering for 200-280 ms. The build makes
no cyclic garbage, so `hold` turns automatic collection off and the last `release`
freezes what is alive (gc.freeze: never scanned again, still freed by reference
counting) and turns it back on, as the first sync does.
"""

from __future__ import annotations

import gc
import json
import os
import threading
from collections.abc import Callable
from typing import Any

HOLD_BYTES = 1 << 20  # JSON or manifest text above which decoding it holds the GC off


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def loads(data: str | bytes, pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """json.loads (with `pairs_hook` as its object_pairs_hook); a large document is decoded
    with the GC held off and a Python-level hook per object, so that the GIL is handed back
    to the loop every switch interval (one plain json.loads of 8 MB held it for 75-100 ms)."""
    if len(data) <= HOLD_BYTES:
        return json.loads(data, object_pairs_hook=pairs_hook)
    hold()
    try:
        if pairs_hook is not None:
            return json.loads(data, object_pairs_hook=pairs_hook)
        return json.loads(data, object_hook=_same)
    finally:
        release()


_lock = threading.Lock()
_holds = 0
_was_enabled = False


def hold() -> None:
    """Automatic collection off until the matching `release` (any thread)."""
    global _holds, _was_enabled
    with _lock:
        if _holds == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holds += 1


def release() -> None:
    """End one `hold`; the last freezes what is alive and restores collection."""
    global _holds
    with _lock:
        _holds -= 1
        if _holds == 0:
            _resume()


def _resume() -> None:
    """What the last `release` does: freeze what is alive, collect as before the hold."""
    gc.freeze()
    if _was_enabled:
        gc.enable()


def _after_fork() -> None:
    """In a forked child: the parent's holders did not come along (their threads are
    gone; what they held is redone there), so none is held."""
    global _lock, _holds
    _lock = threading.Lock()
    if _holds:
        _holds = 0
        _resume()


os.register_at_fork(after_in_child=_after_fork)
