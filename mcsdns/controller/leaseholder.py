"""Which member holds the controller's Leases: the same one for every replica, whatever the order
of its flags.

`--lease-cluster NAME` when given; else the member that is the cluster this process runs in
(in a pod: a member whose server is `https://kubernetes.default.svc[.cluster.local]` or
$KUBERNETES_SERVICE_HOST); else the only `--cluster` member (--members-dir members are remote
and come and go). With --leader-elect anything else is ambiguous: ConfigError (exit 2).
Without it, the Endpoint TTL Leases go to the first member, as before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from ..ops.errors import ConfigError
from .member.client import Member

IN_CLUSTER_HOSTS = ("kubernetes.default.svc", "kubernetes.default.svc.cluster.local")


def in_cluster(server: str, env: Mapping[str, str]) -> bool:
    """Whether `server` is the API server of the cluster whose pod has environment `env`."""
    host = env.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return False
    try:
        name = (urlsplit(server).hostname or "").lower().rstrip(".")
    except ValueError:
        return False
    return name in IN_CLUSTER_HOSTS or name == host.strip("[]").lower()


def _server(m: Member) -> str:
    return m.client.host if m.client is not None else ""


def lease_member(members: Sequence[Member], flagged: int, explicit: str, leader_elect: bool,
                 env: Mapping[str, str] | None = None) -> Member:
    """The member holding the Leases (see the module); `flagged`: how many of `members`
    (the first ones) came from --cluster."""
    if explicit:
        return next(m for m in members if m.name == explicit)
    here = [m for m in members if in_cluster(_server(m), os.environ if env is None else env)]
    if len(here) == 1:
        return here[0]
    if flagged == 1:
        return members[0]
    if leader_elect:
        names = ", ".join(sorted(m.name for m in members[:flagged] or members))
        raise ConfigError(f"--leader-elect: which member holds the Lease is ambiguous ({names}); name it "
                          "with --lease-cluster NAME, the same in every replica")
    return members[0]
