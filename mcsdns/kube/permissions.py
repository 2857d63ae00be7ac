"""What `mcsdns serve` and `mcsdns controller` may do in a cluster: the rules of their
ClusterRoles in deploy/ (a test holds the two equal), checked by `mcsdns diagnose`."""

from __future__ import annotations

from .resources import (
    CLUSTER_PROPERTIES,
    ENDPOINT_SLICES,
    NAMESPACES,
    NODES,
    SERVICE_EXPORTS,
    SERVICE_IMPORTS,
    SERVICES,
    Resource,
)

Rule = tuple[str, str, tuple[str, ...]]  # (API group, resource[/subresource], verbs)

READ = ("get", "list", "watch")
WRITE = ("create", "update", "delete")


def rule(r: Resource, verbs: tuple[str, ...], subresource: str = "") -> Rule:
    return r.group, r.plural + (f"/{subresource}" if subresource else ""), verbs


SERVER: tuple[Rule, ...] = (
    rule(SERVICE_IMPORTS, READ),
    rule(ENDPOINT_SLICES, READ),
    rule(CLUSTER_PROPERTIES, READ),
)

CONTROLLER: tuple[Rule, ...] = (
    rule(NAMESPACES, READ),
    rule(SERVICES, READ + WRITE),
    rule(ENDPOINT_SLICES, READ + WRITE),
    rule(SERVICE_EXPORTS, READ),
    rule(SERVICE_EXPORTS, ("update",), "status"),
    rule(SERVICE_IMPORTS, READ + WRITE),
    rule(SERVICE_IMPORTS, ("update",), "status"),
    rule(CLUSTER_PROPERTIES, ("get",)),
    rule(NODES, ("list", "watch")),  # their zone labels, metadata only (locality hints)
)


def show(group: str, resource: str, verb: str) -> str:
    """`list serviceimports.multicluster.x-k8s.io`, as kubectl auth can-i takes it."""
    return f"{verb} {resource.split('/')[0]}{'.' + group if group else ''}" + (
        f" (subresource {resource.split('/')[1]})" if "/" in resource else "")
