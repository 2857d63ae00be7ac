"""The controller's kinds, one contract each (`contract.Contract`), and the order in which a
member's sync and removal go through them. Each export's status (`ServiceExport`) follows,
once every member is done."""

from __future__ import annotations

from collections.abc import Callable

from ..contract import Contract, Target
from ..engine import Engine
from .derivedservice import DerivedService
from .endpointslice import EndpointSlices
from .serviceexport import ServiceExport
from .serviceimport import ServiceImport

Step = Callable[[Engine, Target], bool]  # False: stop this member's sync

SERVICE_IMPORT, SERVICE, ENDPOINT_SLICES = ServiceImport(), DerivedService(), EndpointSlices()
SERVICE_EXPORT = ServiceExport()
KINDS: tuple[Contract, ...] = (SERVICE_IMPORT, SERVICE, ENDPOINT_SLICES, SERVICE_EXPORT)


# A member's sync: each step in turn; a step returning False stops the rest.
MEMBER_SYNC: tuple[Step, ...] = (
    SERVICE_IMPORT.claim,  # ours, or someone else's: stop
    SERVICE.claim,  # someone else's Service where the derived one goes: named, not a stop
    SERVICE_IMPORT.sync,  # created or updated, or stop: it owns the rest
    SERVICE.sync,  # its ClusterIPs go to the import
    SERVICE_IMPORT.resync,  # with them
    SERVICE_IMPORT.sync_status,
    ENDPOINT_SLICES.sync,
)
# Nothing of the service belongs in a member: ours deleted, what the import owns first.
MEMBER_REMOVAL: tuple[Callable[[Engine], None], ...] = (
    ENDPOINT_SLICES.remove, SERVICE.remove, SERVICE_IMPORT.remove)


__all__ = ["KINDS", "MEMBER_SYNC", "MEMBER_REMOVAL", "SERVICE_EXPORT"]
