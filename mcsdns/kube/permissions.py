"""What `mcsdns serve` and `mcsdns controller` may do in a cluster: the rules of their
ClusterRoles in deploy/ (a test holds the two equal), checked by `mcsdns diagnose`."""

from __future__ import annotations

Rule = tuple[str, str, tuple[str, ...]]  # (API group, resource[/subresource], verbs)

READ = ("get", "list", "watch")
WRITE = ("create", "update", "delete")

SERVER: tuple[Rule, ...] = (
    ("multicluster.x-k8s.io", "serviceimports", READ),
    ("discovery.k8s.io", "endpointslices", READ),
    ("about.k8s.io", "clusterproperties", READ),
)

CONTROLLER: tuple[Rule, ...] = (
    ("", "namespaces", READ),
    ("", "services", READ + WRITE),
    ("discovery.k8s.io", "endpointslices", READ + WRITE),
    ("multicluster.x-k8s.io", "serviceexports", READ),
    ("multicluster.x-k8s.io", "serviceexports/status", ("update",)),
    ("multicluster.x-k8s.io", "serviceimports", READ + WRITE),
    ("multicluster.x-k8s.io", "serviceimports/status", ("update",)),
    ("about.k8s.io", "clusterproperties", ("get",)),
)


def show(group: str, resource: str, verb: str) -> str:
    """`list serviceimports.multicluster.x-k8s.io`, as kubectl auth can-i takes it."""
    return f"{verb} {resource.split('/')[0]}{'.' + group if group else ''}" + (
        f" (subresource {resource.split('/')[1]})" if "/" in resource else "")
