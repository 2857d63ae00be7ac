"""Reading one member cluster: its exports (ServiceExport + Service + EndpointSlices) and our imports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .clusters import Member
from .merge import CLUSTERSET_IP, HEADLESS, Export, ports_from_service

MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
APP_MANAGED_BY = "app.kubernetes.io/managed-by"
CONTROLLER = "mcsdns-controller"
SERVICE_NAME = "kubernetes.io/service-name"
MCS_SERVICE_NAME = "multicluster.kubernetes.io/service-name"
SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"

Key = tuple[str, str]  # (namespace, name)

SLICES = "/apis/discovery.k8s.io/v1/endpointslices"


def key_of(obj: dict[str, Any]) -> Key:
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


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


@dataclass
class Snapshot:
    """Everything the controller needs from one member, read in one pass."""

    namespaces: set[str]
    exports: dict[Key, ExportState]
    imports: dict[Key, dict[str, Any]]  # all ServiceImports (ours or not)
    our_slices: dict[Key, dict[str, Any]]  # (namespace, slice name) -> slice


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
    created = str((se.get("metadata") or {}).get("creationTimestamp") or "")
    exp = Export(cluster=cluster_id, created=created, type=typ, ports=ports_from_service(spec),
                 session_affinity=str(spec.get("sessionAffinity") or "None"),
                 session_affinity_config=spec.get("sessionAffinityConfig") or None,
                 ip_families=tuple(spec.get("ipFamilies") or ()))
    return ExportState(se, exp, None)


def read(member: Member) -> Snapshot:
    """List what we need from a member (raises Unreachable)."""
    assert member.cluster_id is not None
    namespaces = {key_of(n)[1] for n in member.items("/api/v1/namespaces")
                  if not (n.get("metadata") or {}).get("deletionTimestamp")}
    exports: dict[Key, ExportState] = {}
    imports: dict[Key, dict[str, Any]] = {}
    our_slices: dict[Key, dict[str, Any]] = {}
    if member.mcs_version is None:
        member.discover()
    if member.mcs_version is not None:
        services = {key_of(s): s for s in member.items("/api/v1/services")}
        source: dict[Key, list[dict[str, Any]]] = {}
        for sl in member.items(SLICES, SERVICE_NAME):
            if is_ours(sl):
                continue
            ns = key_of(sl)[0]
            source.setdefault((ns, labels(sl)[SERVICE_NAME]), []).append(sl)
        for se in member.items(member.mcs_path("serviceexports")):
            if (se.get("metadata") or {}).get("deletionTimestamp"):
                continue
            k = key_of(se)
            st = read_export(member.cluster_id, se, services.get(k))
            if st.export is not None:
                st.slices = sorted(source.get(k, []), key=lambda s: key_of(s)[1])
            exports[k] = st
        imports = {key_of(si): si for si in member.items(member.mcs_path("serviceimports"))}
        our_slices = {key_of(s): s for s in member.items(SLICES, f"{MANAGED_BY}={CONTROLLER}")}
    return Snapshot(namespaces, exports, imports, our_slices)
