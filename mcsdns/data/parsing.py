"""The store's parsing of raw ServiceImports and EndpointSlices, in the reflector thread
(`prepare`), on the event loop or off it (`parse_all`; where each runs: ops/load.py): what
parsing one costs, and its model or why it is malformed."""

from __future__ import annotations

from typing import Any, TypeAlias

from ..kube.apiclient.keys import Key
from .objects import ENDPOINT_SLICE, SERVICE_IMPORT, EndpointSlice, Malformed, ServiceImport

Parsed: TypeAlias = ServiceImport | EndpointSlice
Deferred = tuple[str, Key, object, dict[str, Any], Parsed | None]  # kind, key, token, raw, stored


def _model(kind: str) -> type[ServiceImport] | type[EndpointSlice]:
    return ServiceImport if kind == SERVICE_IMPORT else EndpointSlice


PARSED = "\x00parsed"  # where `prepare` leaves its result in the raw object (no API field name)


def size(kind: str, obj: dict[str, Any]) -> int:
    """What parsing a raw ServiceImport or EndpointSlice still costs: its endpoints and
    ports (0 where malformed, or when `prepare` parsed it ahead)."""
    return 0 if PARSED in obj else _model(kind).size(obj)


def prepare(obj: dict[str, Any], whole: bool = False) -> None:
    """Parse a raw ServiceImport or EndpointSlice ahead, in the thread that decoded it (a
    list is parsed while the rest of it is still arriving); `parse` takes the result.
    Unless `whole` (the relay to --workers reads the raw fields), the raw object is then
    cut to what the store still reads of it (kind, name, namespace): the rest is freed at
    once, while its memory is still in the CPU's cache (freed later on the loop, 10k
    services cost about 0.1 s more). Other kinds are left alone."""
    kind = obj.get("kind")
    if kind not in (SERVICE_IMPORT, ENDPOINT_SLICE):
        return
    try:
        parsed: Parsed | Malformed = _model(kind).parse(obj)
    except Malformed as e:
        parsed = e
    if whole:
        obj[PARSED] = parsed
        return
    md = obj.get("metadata")
    key = {k: md[k] for k in ("name", "namespace") if k in md} if isinstance(md, dict) else md
    obj.clear()
    obj["kind"], obj["metadata"], obj[PARSED] = kind, key, parsed


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
    return new, old == new


def parse_all(job: list[Deferred]) -> list[tuple[Parsed | Malformed, bool]]:
    """`parse` of each deferred object, off the loop."""
    return [parse(kind, obj, old) for kind, _, _, obj, old in job]
