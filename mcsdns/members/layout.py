"""What `mcsdns join` creates, named once: in the member, a namespace, a ServiceAccount,
the controller's ClusterRole and a ClusterRoleBinding; in the controller's cluster, a key
of the members Secret (mounted as `mcsdns controller --members-dir`)."""

from __future__ import annotations

NAMESPACE = "mcsdns-system"
SERVICE_ACCOUNT = "mcsdns-member"  # the controller's identity in the member
CLUSTER_ROLE = "mcsdns-controller"  # the rules of mcsdns.kube.permissions.CONTROLLER (as in deploy/)
BINDING = "mcsdns-member"
READER = "mcsdns-reader"  # join --read-only: its ServiceAccount, ClusterRole (permissions.READER), binding
LEASE_ROLE = "mcsdns-member-lease"  # Role and RoleBinding in the Lease namespace (--lease-namespace)
OLD_LEASE_ROLE = "mcsdns-controller-lease"  # their name before 0.2.0: deploy/'s own Role's name too
SECRET = "mcsdns-members"  # in NAMESPACE of the controller's cluster: one kubeconfig per member
PART_OF = {"app.kubernetes.io/part-of": "mcsdns"}
CREATED = "mcsdns.io/created-by"  # label of a namespace join created (leave deletes only those)
JOIN = "mcsdns-join"
MEMBER = "mcsdns.io/member"  # label of everything join makes in a member: the member's name


def user(namespace: str, account: str = SERVICE_ACCOUNT) -> str:
    """The ServiceAccount's user name, as RBAC and audit logs show it."""
    return f"system:serviceaccount:{namespace}:{account}"


def labels(member: str) -> dict[str, str]:
    """The labels of an object join makes for `member`."""
    return {**PART_OF, MEMBER: member}
