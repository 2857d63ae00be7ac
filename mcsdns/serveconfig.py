"""What `mcsdns serve` was told (`Config`).

The roles that act on it (one process, the --workers supervisor and its workers) are in
`mcsdns.roles`; the zone they serve is a `publish.pipeline.Pipeline`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .dns import tsig
from .nameserver import CACHE_BYTES
from .transport.tcpconns import TCPLimits
from .zone.locality import OFF, Locality


@dataclass
class Config:
    """Everything `mcsdns serve` was told (flags, or a test's choices); the same for every
    role: what a role does differently (bind later, write the state, share the serial)
    the role decides."""

    listen: list[tuple[str, int]] = field(default_factory=lambda: [("0.0.0.0", 53)])
    zone: str = "clusterset.local"
    ttl: int = 5
    manifests: str | None = None
    max_manifest_bytes: int | None = None  # manifest files larger are skipped (None: MANIFEST_MAX_BYTES)
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)
    health: tuple[str, int] | None = None
    metrics: tuple[str, int] | None = None
    workers: int = 1
    reuse_port: bool = False  # share the port; then bind only once the zone is loaded
    lameduck: float = 5.0  # after SIGTERM: /ready 503, still answering (0: stop at once)
    log_queries: bool = False
    cache_mib: int = CACHE_BYTES >> 20  # response cache budget (--cache-size)
    tcp_limits: TCPLimits = field(default_factory=TCPLimits)
    locality: Locality = OFF
    serial: int = field(default_factory=lambda: int(time.time()) & 0xFFFFFFFF)  # SOA, same in every worker
    state_dir: str | None = None  # --state-dir: last synced objects, SOA serial (DIR/serial)
    state_interval: float = 10.0  # at most one snapshot write per this many seconds
    allow_transfer: list[str] = field(default_factory=list)  # CIDRs allowed AXFR/IXFR
    notify: list[tuple[str, int]] = field(default_factory=list)  # NOTIFY targets
    tsig_keys: list[tsig.Key] = field(default_factory=list)  # verify with any; NOTIFY signed with the first

    def serial_path(self) -> str | None:
        """The serial state kept across restarts: STATE_DIR/serial."""
        return os.path.join(self.state_dir, "serial") if self.state_dir else None
