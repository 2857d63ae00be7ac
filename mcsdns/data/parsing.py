"""The store's parsing of raw ServiceImports and EndpointSlices, on the event loop or off
it (`parse_all` runs in an executor): what parsing one costs, and its model or why it is
malformed."""

from __future__ import annotations

from typing import Any, TypeAlias

from ..kube.keys import Key
from .objects import SERVICE_IMPORT, EndpointSlice, Malformed, ServiceImport

Parsed: TypeAlias = ServiceImport | EndpointSlice
Deferred = tuple[str, Key, object, dict[str, Any], Parsed | None]  # kind, key, token, raw, stored


def _model(kind: str) -> type[ServiceImport] | type[EndpointSlice]:
    return ServiceImport if kind == SERVICE_IMPORT else EndpointSlice


def size(kind: str, obj: dict[str, Any]) -> int:
    """Endpoints and ports of a raw ServiceImport or EndpointSlice (0 where malformed)."""
    return _model(kind).size(obj)


def parse(kind: str, obj: dict[str, Any], old: Parsed | None) -> tuple[Parsed | Malformed, bool]:
    """(the parsed object or why it is malformed, whether it equals `old`)."""
    try:
        new: Parsed = _model(kind).parse(obj)
    except Malformed as e:
        return e, False
    return new, old == new


def parse_all(job: list[Deferred]) -> list[tuple[Parsed | Malformed, bool]]:
    """`parse` of each deferred object, off the loop."""
    return [parse(kind, obj, old) for kind, _, _, obj, old in job]
