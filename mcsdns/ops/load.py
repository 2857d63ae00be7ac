"""The first load, and any large work after it: where each stage runs and when the cyclic GC
is held. The stages ask this module; none decides it for itself.

`mcsdns serve` with a Kubernetes source, from start to /ready and after; each stage: where it
runs; the cyclic GC meanwhile.

1. Ask for the lists (`reads_first`; sources.kubefirst): a thread per list, started once the
   flags and the kubeconfig are read, before serve imports asyncio, msgspec, uvloop and the
   rest (what cli, ops and sources import at their top is kept to that); the EndpointSlices
   at once, the ServiceImports after discovery; each reflector takes its answer (stage 2).
   The rest is imported while the API server prepares the lists. GC off (`gc_off`) until
   stage 6, at most GC_PAUSE_MAX seconds (`until_synced`).
2. Decode a list or a watch event (kube.apiclient.typedlist, .listdecode, .reflector): the collection's
   reflector thread; `hold` while decoding, and text over HOLD_BYTES gets a Python hook per
   object (the GIL handed back to the loop).
3. Parse each object (data.parsing.prepare): the same thread, as its item arrives. Until
   /ready, where nothing else reads the store (one process, no --state-dir), a listed
   slice whose endpoints' text is at most LATER_BYTES keeps it, unparsed (`parse_later`):
   they are parsed when the slice is first read (data.store `Store.service`: a query for
   its service, the digests or the background pass of stages 6-7), on the loop.
4. Store it (data.store): loop turns of TURN_ITEMS; an object over BIG_ITEMS (`on_loop`) in
   `executor()` (`in_executor`: held while there).
5. Note its services as changed (publish.builder): the loop.
6. /ready at the first full sync (roles.loader): the loop; each noted service marked
   unbuilt and digested once (the serial's input: `Pipeline.load`), what is alive frozen, the
   GC back on (`first_sync_done`). Where the first serial is new whatever the digest (no
   serial file, none given yet: `Versions.deferrable`), the digests follow after /ready,
   about PAY_ITEMS per loop turn (`Builder.settle`): /ready waits for decode, parse and store.
7. Build the records: in a query's turn, one service; the background pass FILL_ITEMS per
   loop turn, held until it ends, then the memory freed since the load handed back (`filled`).
8. A change after ready (publish.builder): the loop up to BIG_ITEMS, else `in_executor`, then
   swapped in SWAP_NAMES names per loop turn.

--workers: the supervisor loads as above from stage 2 (no stage 1); the workers are forked
after 6. --manifests: large files are decoded holding the GC (`loads`, `held`).

Why hold it: a full collection runs in whichever thread allocates past its threshold and
holds the GIL throughout; over a large load (a 100k-endpoint slice allocates about a million
objects) each paused answering for 200-280 ms, and at 10k services collections were half of
the load's time (0.9 s -> 0.4 s without). The load makes no cyclic garbage, so the last
`release` (and `first_sync_done`) freezes what is alive (gc.freeze: never scanned again,
still freed by reference counting) and turns collection back on.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # stage 1 imports this module before asyncio and the rest (see above)
    import asyncio
    from concurrent.futures import Executor

HOLD_BYTES = 1 << 20  # JSON or manifest text above which decoding it holds the GC off
LATER_BYTES = 1 << 15  # a listed slice's endpoints text kept unparsed until read (stage 3): ~1 ms to parse
BIG_ITEMS = 2000  # endpoints + ports above which one object is parsed, or a change built, off the loop
TURN_ITEMS = 1000  # endpoints + ports (+1 per object) the store parses on the loop per turn
PAY_ITEMS = 300  # items whose deferred digest a loop turn folds, their slices parsed (about 0.3 ms; stage 6)
FILL_ITEMS = 100  # items the background pass builds per loop turn (0.1-0.2 ms: what a query may wait for)
SWAP_NAMES = 10_000  # names a large change swaps in per loop turn (whole services: a larger one alone)
GC_PAUSE_MAX = 60.0  # seconds the cyclic GC may stay off while waiting for the first sync

T = TypeVar("T")


def reads_first(workers: int, manifests: str | None) -> bool:
    """Stage 1: one process with a Kubernetes source asks for its lists before it imports and
    sets up the rest (a real API server takes 0.3-1 s to send a 10,000-object list)."""
    return workers <= 1 and not manifests


def parse_later(text_bytes: int) -> bool:
    """Stage 3: whether a listed slice's endpoints, `text_bytes` of JSON, may be parsed when
    first read (on the loop) rather than now."""
    return text_bytes <= LATER_BYTES


def on_loop(items: int) -> bool:
    """Whether work of `items` (endpoints + ports) runs on the loop, in one step."""
    return items <= BIG_ITEMS


def executor() -> Executor:
    """Where large objects are parsed and large changes built: one thread of the process's
    own (one: the loop competes for the GIL with it alone)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, "mcsdns-apply")


def in_executor(loop: asyncio.AbstractEventLoop, pool: Executor | None,
                fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`fn(*args)` in `pool` (None: the loop's default) with the GC held until it is done; the
    release runs before any callback the caller adds."""
    hold()
    fut = loop.run_in_executor(pool, fn, *args)
    fut.add_done_callback(lambda _: release())
    return fut


_early = False  # stage 1 turned the GC off before the loop ran


def gc_off() -> None:
    """Stage 1: the GC off from now until the first sync (`until_synced` bounds it)."""
    global _early
    gc.disable()
    _early = True


def until_synced(loop: asyncio.AbstractEventLoop) -> None:
    """No cyclic GC while the first sync loads (turned off here unless something else had
    turned it off already); after GC_PAUSE_MAX seconds it comes back anyway."""
    global _early
    if _early or gc.isenabled():
        gc.disable()
        loop.call_later(GC_PAUSE_MAX, gc.enable)
    _early = False


def first_sync_done() -> None:
    """Stage 6: what is loaded moved out of the GC's sight (a full collection over a large
    zone would pause answers), the GC back on, freed memory handed back."""
    from . import process

    gc.freeze()
    gc.enable()
    process.release_free_memory()


def filled() -> None:
    """Stage 7's end: the hold of the background pass released, and the memory freed since
    the load (kept endpoints' text, parsed by now) handed back."""
    from . import process

    release()
    process.release_free_memory()


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def loads(data: str | bytes, pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """json.loads (with `pairs_hook` as its object_pairs_hook); a large document is decoded
    with the GC held off and a Python-level hook per object, so that the GIL is handed back
    to the loop every switch interval (one plain json.loads of 8 MB held it for 75-100 ms)."""
    if len(data) <= HOLD_BYTES:
        return json.loads(data, object_pairs_hook=pairs_hook)
    with held():
        if pairs_hook is not None:
            return json.loads(data, object_pairs_hook=pairs_hook)
        return json.loads(data, object_hook=_same)


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


@contextlib.contextmanager
def held() -> Iterator[None]:
    """`hold` for the block."""
    hold()
    try:
        yield
    finally:
        release()


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
