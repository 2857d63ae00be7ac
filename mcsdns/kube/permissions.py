"""What `mcsdns serve` and `mcsdns controller` may do in a cluster, the one list: the rules
of their ClusterRoles and of the controller's Lease Role in deploy/ (a test holds them
equal), the ClusterRole `mcsdns join` creates in a member (`policy_rules`), and what
`mcsdns diagnose` checks with SelfSubjectAccessReviews. `DIAGNOSE` is what diagnose
reads beyond them (controller Leases and pods, the DNS ConfigMaps); no deployed identity
has it: an identity without it gets a WARN naming the check it could not make."""

from __future__ import annotations

from .resources import (
    CLUSTER_PROPERTIES,
    CONFIG_MAPS,
    ENDPOINT_SLICES,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
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
    rule(EVENTS, ("create", "update")),  # Events on ServiceExports (controller/events.py)
    rule(NODES, ("list", "watch")),  # their zone labels, metadata only (locality hints)
)


# A reader: `mcsdns controller --local` in every other member reads what their exports need
# (informers.MemberCaches.READ_KINDS), the cluster ID and, with its probe, namespace `default`;
# `mcsdns join --read-only` binds this ClusterRole. It writes nothing there.
READER: tuple[Rule, ...] = (
    rule(NAMESPACES, ("get",)),
    rule(SERVICES, READ),
    rule(ENDPOINT_SLICES, READ),
    rule(SERVICE_EXPORTS, READ),
    rule(CLUSTER_PROPERTIES, ("get",)),
)


# In the controller's Lease namespace of its --lease-cluster only (a Role): leader election
# and one Lease per member (the Endpoint TTL clock).
CONTROLLER_LEASES: tuple[Rule, ...] = (rule(LEASES, ("get", "create", "update")),)

# `mcsdns diagnose`'s reads beyond the role it checks: is a controller running (its Leases
# and pods in the Lease namespace), and do CoreDNS and NodeLocal DNSCache forward the zone
# (their ConfigMaps in kube-system).
DIAGNOSE: tuple[Rule, ...] = (rule(LEASES, ("list",)), rule(PODS, ("list",)), rule(CONFIG_MAPS, ("get",)))


def needed(plural: str, rules: tuple[Rule, ...] = DIAGNOSE) -> str:
    """What `rules` ask of resource `plural`, as `show` writes it: `list leases.coordination.k8s.io`."""
    return ", ".join(show(g, r, v) for g, r, verbs in rules if r.split("/")[0] == plural for v in verbs)


def policy_rules(rules: tuple[Rule, ...]) -> list[dict[str, list[str]]]:
    """The `rules` of a ClusterRole or Role granting exactly `rules`, one per resource."""
    return [{"apiGroups": [g], "resources": [r], "verbs": list(v)} for g, r, v in rules]


def show(group: str, resource: str, verb: str) -> str:
    """`list serviceimports.multicluster.x-k8s.io`, as kubectl auth can-i takes it."""
    return f"{verb} {resource.split('/')[0]}{'.' + group if group else ''}" + (
        f" (subresource {resource.split('/')[1]})" if "/" in resource else "")
