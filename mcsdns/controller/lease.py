"""Leader election with a coordination.k8s.io/v1 Lease (as client-go does it).

A candidate takes the Lease when it does not exist or when its record has not
changed for leaseDurationSeconds as seen by this process's own clock (so
clocks need not agree), or has no holder; the holder renews it every
duration/3, the others look at it every RETRY_PERIOD s at most. Every write
carries the resourceVersion read, so two candidates never both win. On
shutdown the holder releases it (as client-go's ReleaseOnCancel).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..kube.apiclient.errors import ApiError, Conflict, NotFound
from ..kube.resources import LEASES
from .member.client import Member

log = logging.getLogger("mcsdns.controller.lease")

RETRY_PERIOD = 2.0  # client-go's default RetryPeriod
LEASE_NAMESPACES = ("mcsdns-system", "kube-system")  # deploy/'s --lease-namespace, and the default
MEMBER_PREFIX = "mcsdns-member-"


def member_lease(member: str) -> str:
    """The name of member `member`'s Lease (MemberLeases)."""
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in member.lower()).strip("-.")
    return (MEMBER_PREFIX + safe)[:253]


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it."""

    def __init__(self, member: Member, namespace: str, name: str, identity: str,
                 duration: float = 15.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.member, self.namespace, self.name, self.identity = member, namespace, name, identity
        self.duration = duration
        self.clock = clock
        self.leader = False
        self.renewed_at = 0.0  # our clock, last successful acquire/renew
        self._seen: tuple[Any, ...] | None = None  # last observed record
        self._seen_at = 0.0

    @property
    def path(self) -> str:
        return LEASES.path(self.namespace)

    def _spec(self, transitions: int, acquire: str | None) -> dict[str, Any]:
        now = _micro_now()
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": acquire or now, "renewTime": now, "leaseTransitions": transitions}

    @property
    def period(self) -> float:
        """Seconds between steps: renewals, or attempts to take the lease."""
        return self.duration / 3 if self.leader else min(self.duration / 3, RETRY_PERIOD)

    def is_leader(self) -> bool:
        """Leader now: acquired/renewed less than a lease duration ago."""
        return self.leader and self.clock() - self.renewed_at < self.duration

    def step(self) -> bool:
        """Try to acquire or renew once; returns whether we lead."""
        try:
            self._step()
        except ApiError as e:
            log.info("lease %s/%s: %s", self.namespace, self.name, e)
            if self.leader and not self.is_leader():
                log.warning("lost leadership (could not renew lease)")
                self.leader = False
        return self.is_leader()

    def _step(self) -> None:
        m = self.member
        try:
            lease = m.get(f"{self.path}/{self.name}")
        except NotFound:
            body = {"apiVersion": LEASES.api_version(), "kind": LEASES.kind,
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(0, None)}
            m.request("POST", self.path, body=body)
            self._won()
            return
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("acquireTime"),
                  (lease.get("metadata") or {}).get("resourceVersion"))
        now = self.clock()
        if record != self._seen:
            self._seen, self._seen_at = record, now
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
            if now - self._seen_at < duration:
                if self.leader:
                    log.warning("lost leadership to %s", holder)
                self.leader = False
                return
            log.info("lease held by %s expired; taking it", holder)
        mine = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        body = dict(lease, spec=self._spec(transitions, spec.get("acquireTime") if mine else None))
        m.request("PUT", f"{self.path}/{self.name}", body=body)
        self._won()

    def _won(self) -> None:
        if not self.leader:
            log.info("became leader (%s)", self.identity)
        self.leader, self.renewed_at = True, self.clock()

    def release(self) -> None:
        """Give the lease up on shutdown so that another replica takes it at its next
        look: no holder, a 1 s duration, renewed now (as client-go does)."""
        if not self.leader:
            return
        try:
            lease = self.member.get(f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                now = _micro_now()
                spec = dict(lease["spec"], holderIdentity="", leaseDurationSeconds=1,
                            acquireTime=now, renewTime=now)
                self.member.request("PUT", f"{self.path}/{self.name}", body=dict(lease, spec=spec))
                log.info("released lease %s/%s", self.namespace, self.name)
        except Exception as e:  # best effort
            log.info("releasing lease: %s", e)
        self.leader = False


def _parse_micro(ts: str) -> float | None:
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(ts, fmt).replace(tzinfo=UTC).timestamp()
        except (TypeError, ValueError):
            continue
    return None


class MemberLeases:
    """KEP "Endpoint TTL": when each member was last reachable, in Leases that outlive the controller.

    Lease `mcsdns-member-<member name>` in one cluster (the leader-election
    Lease's) has renewTime = the last time the controller reached that member;
    it is renewed while the member is reachable, never while it is not. A
    restarted controller reads the Leases to learn how long a member that is
    unreachable now has already been gone.
    """

    PREFIX = MEMBER_PREFIX

    def __init__(self, member: Member, namespace: str, identity: str, ttl: float,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.member, self.namespace, self.identity, self.ttl = member, namespace, identity, ttl
        self.clock, self.wall = clock, wall
        self.objs: dict[str, dict[str, Any]] = {}

    @property
    def path(self) -> str:
        return LEASES.path(self.namespace)

    def name(self, member: str) -> str:
        return member_lease(member)

    def load(self, member: str) -> float | None:
        """The monotonic time the member was last reachable per its Lease (None: unknown)."""
        try:
            lease = self.member.get(f"{self.path}/{self.name(member)}")
        except NotFound:
            return None
        except ApiError as e:
            log.info("member lease %s: %s", self.name(member), e)
            return None
        self.objs[member] = lease
        seen = _parse_micro(str((lease.get("spec") or {}).get("renewTime") or ""))
        if seen is None:
            return None
        return self.clock() - max(0.0, self.wall() - seen)

    def renew(self, member: str, last_ok: float) -> bool:
        """Record `last_ok` (monotonic) as the member's last contact; False when the write failed."""
        seen = datetime.fromtimestamp(self.wall() - max(0.0, self.clock() - last_ok), UTC)
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.ttl)),
                "renewTime": seen.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        have = self.objs.get(member)
        try:
            if have is None:
                body = {"apiVersion": LEASES.api_version(), "kind": LEASES.kind,
                        "metadata": {"name": self.name(member), "namespace": self.namespace},
                        "spec": dict(spec, acquireTime=spec["renewTime"])}
                try:
                    self.objs[member] = self.member.request("POST", self.path, body=body)
                    return True
                except Conflict:  # it exists: read it, update it next time
                    self.objs[member] = self.member.get(f"{self.path}/{self.name(member)}")
                    return False
            body = dict(have, spec=dict(have.get("spec") or {}, **spec))
            self.objs[member] = self.member.request("PUT", f"{self.path}/{self.name(member)}", body=body)
            return True
        except Conflict:
            self.objs.pop(member, None)
        except NotFound:
            self.objs.pop(member, None)
        except ApiError as e:
            log.info("member lease %s: %s", self.name(member), e)
        return False

    def drop(self, member: str) -> None:
        """Delete the Lease of a member that left (best effort: a failure is logged)."""
        self.objs.pop(member, None)
        try:
            self.member.request("DELETE", f"{self.path}/{self.name(member)}")
            log.info("member lease %s/%s deleted: %s left", self.namespace, self.name(member), member)
        except NotFound:
            pass
        except ApiError as e:
            log.warning("member lease %s/%s of %s, who left: not deleted: %s", self.namespace,
                        self.name(member), member, e)
