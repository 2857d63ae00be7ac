"""What a reconcile sees of one member: `MemberView`, read from the informer caches
(`informers.MemberCaches`) in the controller and from plain dicts in unit tests; its
writes go through its `client.MemberClient`."""

from __future__ import annotations

from typing import Any, Protocol

from ...kube.apiclient.keys import Key
from ..locality import NodeZones
from .client import MemberClient

Obj = dict[str, Any]


class MemberView(Protocol):
    """One member's objects as a reconcile reads them, and where its writes' results go.

    Invariant: after `note_written`, the reads return the written object (or, for a
    delete, no object) until a newer event replaces it."""

    reachable: bool
    last_ok: float | None

    @property
    def member(self) -> MemberClient: ...

    @property
    def synced(self) -> bool: ...

    def has_namespace(self, ns: str) -> bool: ...

    def export(self, k: Key) -> Obj | None: ...

    def service(self, k: Key) -> Obj | None: ...

    def service_import(self, k: Key) -> Obj | None: ...

    def source_slices(self, k: Key) -> list[Obj]: ...

    def our_slices(self, k: Key) -> list[Obj]: ...

    def our_services(self, k: Key) -> list[Obj]: ...

    def imports(self) -> list[tuple[Key, Obj]]: ...

    def keys(self) -> set[Key]: ...

    def zones(self) -> NodeZones | None: ...

    def note_written(self, kind: str, obj: Obj | None, k: Key | None = None) -> None: ...
