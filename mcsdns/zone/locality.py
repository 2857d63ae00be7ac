"""Where this server runs, and how that orders headless answers.

Tiers: 0 = an endpoint in this server's cluster, 10 = a cluster in the same
region (from the cluster -> region map), 20 = anywhere else. Headless A/AAAA
answers list lower tiers first (rotating within a tier) and SRV priorities
are the tier, so RFC 2782 clients try local backends first and fail over on
their own. With `only-when-available`, a service with at least one answerable
endpoint in this cluster answers with those alone. Without a cluster ID,
locality is off and every endpoint is tier 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LOCAL, REGION, REMOTE = 0, 10, 20
ORDER, ONLY_WHEN_AVAILABLE = "order", "only-when-available"
POLICIES = (ORDER, ONLY_WHEN_AVAILABLE)


@dataclass(frozen=True)
class Locality:
    """Where this server runs and how that orders answers (--cluster-id, --region, --prefer-local...)."""

    cluster_id: str = ""
    region: str = ""
    zone: str = ""  # this server's topology zone: its own cluster's endpoints there come first
    cluster_regions: dict[str, str] = field(default_factory=dict)
    policy: str = ORDER
    # Answer serving+terminating endpoints when none is ready (as kube-proxy falls back);
    # off by default: the spec says NXDOMAIN when no endpoint is ready.
    terminating_fallback: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.cluster_id)

    def region_of(self, cluster: str) -> str:
        if cluster == self.cluster_id and self.region:
            return self.region
        return self.cluster_regions.get(cluster, "")

    def tier(self, cluster: str) -> int:
        if not self.cluster_id or cluster == self.cluster_id:
            return LOCAL
        region = self.region_of(cluster)
        own = self.region or self.cluster_regions.get(self.cluster_id, "")
        return REGION if region and region == own else REMOTE

    def rank(self, cluster: str, zone: str) -> tuple[int, int]:
        """Sort key of an endpoint: its tier, then 0 if in this server's zone."""
        tier = self.tier(cluster)
        return tier, 0 if (tier == LOCAL and self.zone and zone == self.zone) else 1

    def __hash__(self) -> int:
        return hash((self.cluster_id, self.region, self.zone, self.policy,
                     tuple(sorted(self.cluster_regions.items())), self.terminating_fallback))


OFF = Locality()
