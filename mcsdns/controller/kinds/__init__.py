"""The controller's kinds, one contract each (`contract.Contract`), and the order in which a
member's sync and removal go through them.

Member sync: the ServiceImport (ours, or stop), the derived Service's claim, the import
written (or stop: it owns the rest), the derived Service (its ClusterIPs go to the import),
the import again with them, its status, the imported EndpointSlices. Removal: the slices,
the derived Services, the import. Each export's status follows, once every member is done.
"""

from __future__ import annotations

from collections.abc import Callable

from ..contract import Contract, Target
from ..engine import Engine
from .endpointslice import EndpointSlices
from .service import DerivedService
from .serviceexport import ServiceExport
from .serviceimport import ServiceImport

Step = Callable[[Engine, Target], bool]  # False: stop this member's sync

SERVICE_IMPORT, SERVICE, ENDPOINT_SLICES = ServiceImport(), DerivedService(), EndpointSlices()
KINDS: tuple[Contract, ...] = (SERVICE_IMPORT, SERVICE, ENDPOINT_SLICES, ServiceExport())


def member_sync() -> tuple[Step, ...]:
    return (SERVICE_IMPORT.claim, SERVICE.claim, SERVICE_IMPORT.sync, SERVICE.sync, SERVICE_IMPORT.resync,
            SERVICE_IMPORT.sync_status, ENDPOINT_SLICES.sync)


def member_removal() -> tuple[Callable[[Engine], None], ...]:
    return ENDPOINT_SLICES.remove, SERVICE.remove, SERVICE_IMPORT.remove


__all__ = ["KINDS", "ServiceExport", "member_sync", "member_removal"]
