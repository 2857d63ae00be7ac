from typing import Any

from ..data.objects import EndpointSlice, ServiceImport
from .rrsets import Names

def setup(si: type, es: type, ep: type, port: type, rrset: type, one: type, empty: Any, a: int, aaaa: int,
          srv: int, safe_count: int, /) -> None: ...
def clustersetip(si: ServiceImport, zone: bytes, /) -> Names | None: ...
def headless(si: ServiceImport, slices: list[EndpointSlice], zone: bytes, fallback: bool,
             /) -> Names | None: ...
