"""The store's parsing of raw ServiceImports and EndpointSlices, in the reflector thread
(`prepare`), on the event loop or off it (`parse_all`; where each runs: ops/load.py): what
parsing one costs, and its model or why it is malformed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from ..kube.apiclient.keys import Key, key_of
from .objects import ENDPOINT_SLICE, SERVICE_IMPORT, EndpointSlice, Malformed, ServiceImport

Parsed: TypeAlias = ServiceImport | EndpointSlice
Deferred = tuple[str, Key, object, dict[str, Any], Parsed | None]  # kind, key, token, raw, stored


def _model(kind: str) -> type[ServiceImport] | type[EndpointSlice]:
    return ServiceImport if kind == SERVICE_IMPORT else EndpointSlice


PARSED = "\x00parsed"  # where `prepare` leaves its result in the raw object (no API field name)
KEYED = "\x00key"  # and the object's key (`obj_key`), worked out once


def obj_key(obj: dict[str, Any]) -> Key:
    """An object's key in the store: as kubectl applies manifests, an object that names no
    namespace is in "default" (the key `prepare` left in it, if it did)."""
    key: Key | None = obj.get(KEYED)
    return key if key is not None else key_of(obj, "default")


def size(kind: str, obj: dict[str, Any]) -> int:
    """What parsing a raw ServiceImport or EndpointSlice still costs: its endpoints and
    ports (0 where malformed, or when `prepare` parsed it ahead)."""
    return 0 if PARSED in obj else _model(kind).size(obj)


def prepare(obj: dict[str, Any], whole: bool = False, later: Callable[[], bool] | None = None) -> None:
    """Parse a raw ServiceImport or EndpointSlice ahead, in the thread that decoded it (a
    list is parsed while the rest of it is still arriving); `parse` takes the result.
    Unless `whole` (the relay to --workers reads the raw fields), the raw object is then
    cut to what the store still reads of it (kind, key): the rest is freed at once, while
    its memory is still in the CPU's cache (freed later on the loop, 10k services cost
    about 0.1 s more). `later`: whether a slice's endpoints kept as text may stay so for
    now (ops/load.py, stage 3). Other kinds are left alone."""
    kind = obj.get("kind")
    if kind not in (SERVICE_IMPORT, ENDPOINT_SLICE):
        return
    try:
        parsed: Parsed | Malformed = (ServiceImport.parse(obj) if kind == SERVICE_IMPORT else
                                      EndpointSlice.parse(obj, later is not None and later()))
    except Malformed as e:
        parsed = e
    if whole:
        obj[PARSED] = parsed
        return
    key = obj_key(obj)
    obj.clear()
    obj["kind"], obj[KEYED], obj[PARSED] = kind, key, parsed


def parse(kind: str, obj: dict[str, Any], old: Parsed | None) -> tuple[Parsed | Malformed, bool]:
    """(the parsed object or why it is malformed, whether it equals `old`)."""
    new = obj.pop(PARSED, None)
    if new is None:
        try:
            new = _model(kind).parse(obj)
        except Malformed as e:
            return e, False
    elif isinstance(new, Malformed):
        return new, False
    return new, old is not None and old == new


def parse_all(job: list[Deferred]) -> list[tuple[Parsed | Malformed, bool]]:
    """`parse` of each deferred object, off the loop."""
    return [parse(kind, obj, old) for kind, _, _, obj, old in job]
