"""Who owns an object (our managed-by labels), and what one cluster's ServiceExport and its
Service contribute (`read_export`, with the Service fields it reads declared)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .merge import CLUSTERSET_IP, HEADLESS, Export, PortSpec, ports_from_service

MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
APP_MANAGED_BY = "app.kubernetes.io/managed-by"
CONTROLLER = "mcsdns-controller"
SERVICE_NAME = "kubernetes.io/service-name"

# What `read_export` reads of the exporting cluster's Service.
SERVICE_READS = ("spec.type", "spec.clusterIP", "spec.ports.name", "spec.ports.protocol",
                 "spec.ports.port", "spec.ports.appProtocol", "spec.sessionAffinity",
                 "spec.sessionAffinityConfig", "spec.ipFamilies", "spec.trafficDistribution")


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def is_ours(obj: dict[str, Any]) -> bool:
    lb = labels(obj)
    return lb.get(MANAGED_BY) == CONTROLLER or lb.get(APP_MANAGED_BY) == CONTROLLER


@dataclass
class ExportState:
    """One ServiceExport as read, and what it contributes when valid."""

    obj: dict[str, Any]
    export: Export | None  # None when invalid
    invalid: tuple[str, str] | None  # (reason, message)
    slices: list[dict[str, Any]] = field(default_factory=list)  # the Service's own EndpointSlices
    serving: dict[str, PortSpec | None] = field(default_factory=dict)  # see merge.serving_ports

    def unserved(self) -> list[PortSpec]:
        """The export's ports that no merged port serves."""
        return [p for p in self.export.ports if self.serving.get(p.name, p) is None] if self.export else []


def service_type(svc: dict[str, Any]) -> tuple[str | None, tuple[str, str] | None]:
    """ServiceImport type for a Service, or an invalid (reason, message)."""
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return None, ("InvalidServiceType", "ExternalName services cannot be exported.")
    return (HEADLESS if spec.get("clusterIP") == "None" else CLUSTERSET_IP), None


def read_export(cluster_id: str, se: dict[str, Any], svc: dict[str, Any] | None) -> ExportState:
    """Validate one ServiceExport against its name-mapped Service."""
    if svc is None:
        return ExportState(se, None, ("NoService", "Service not found."))
    typ, invalid = service_type(svc)
    if typ is None:
        return ExportState(se, None, invalid)
    spec = svc.get("spec") or {}
    if typ == CLUSTERSET_IP and not ports_from_service(spec):
        return ExportState(se, None, ("NoPorts", "The Service has no ports; a ClusterSetIP service "
                                      "needs at least one."))
    created = str((se.get("metadata") or {}).get("creationTimestamp") or "")
    exp = Export(cluster=cluster_id, created=created, type=typ, ports=ports_from_service(spec),
                 session_affinity=str(spec.get("sessionAffinity") or "None"),
                 session_affinity_config=spec.get("sessionAffinityConfig") or None,
                 ip_families=tuple(spec.get("ipFamilies") or ()),
                 traffic_distribution=spec.get("trafficDistribution") or None)
    return ExportState(se, exp, None)
