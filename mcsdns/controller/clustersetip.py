"""Where a ClusterSetIP import's `ips` come from: a strategy contributing to the kinds.

`Derived` (the default): each importing member's derived Service (`kinds.derivedservice`,
its name and annotation); it names the Service (`Target.service`), annotates the import and
labels the imported slices with it, and takes the Service's ClusterIPs. `Cidr`: one address
per family from --clusterset-cidr, the same in every member. Either runs once per key
(`for_key`) and once per member (`plan`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Protocol

from ..flags import CIDR
from ..kube.apiclient.keys import Key
from .contract import Target
from .exports import SERVICE_NAME, is_ours
from .ipam import Allocator, Exhausted
from .kinds.derivedservice import DERIVED_ANNOTATION, cluster_ips, derived_name
from .member.view import MemberView
from .merge import CLUSTERSET_IP, Merged

log = logging.getLogger("mcsdns.controller")

IPs = tuple[list[str], list[str]]  # (ips, ipFamilies)


class Strategy(Protocol):
    """How ClusterSetIPs are found (see the module docstring)."""

    service_keys: dict[Key, Key]  # (namespace, Service name) -> the key of the import it serves

    def adopt(self, members: Sequence[MemberView]) -> None: ...

    def for_key(self, key: Key, merged: Merged | None) -> IPs | None: ...

    def plan(self, mc: MemberView, key: Key, t: Target) -> None: ...


class Derived:
    """Each member's derived Service gives the import its ips there."""

    def __init__(self) -> None:
        self.service_keys: dict[Key, Key] = {}

    def adopt(self, members: Sequence[MemberView]) -> None:
        pass

    def for_key(self, key: Key, merged: Merged | None) -> IPs | None:
        if merged is not None:
            self.service_keys[(key[0], derived_name(key))] = key
        return None

    def plan(self, mc: MemberView, key: Key, t: Target) -> None:
        if t.merged.type != CLUSTERSET_IP:
            return
        name = derived_name(key)
        svc = mc.service((key[0], name))
        if svc is not None and not is_ours(svc):
            t.blocked = svc
            return
        t.service = name
        t.annotations[DERIVED_ANNOTATION] = name
        t.slice_labels[SERVICE_NAME] = name
        if svc is not None:
            t.ips = cluster_ips(svc)


class Cidr:
    """One allocation per key from --clusterset-cidr, the same in every member."""

    def __init__(self, alloc: Allocator) -> None:
        self.alloc = alloc
        self.lock = threading.Lock()
        self.service_keys: dict[Key, Key] = {}

    def adopt(self, members: Sequence[MemberView]) -> None:
        """Keep the ClusterSetIPs our existing ServiceImports have (after a restart)."""
        with self.lock:
            for mc in members:
                if not mc.synced:
                    continue
                for k, si in mc.imports():
                    if is_ours(si) and not self.alloc.by_key.get(k):
                        self.alloc.adopt(k, (si.get("spec") or {}).get("ips") or [])

    def for_key(self, key: Key, merged: Merged | None) -> IPs | None:
        with self.lock:
            if merged is None or merged.type != CLUSTERSET_IP:
                self.alloc.release(key)
                return None
            cidr_fams = self.alloc.families()
            fams = [f for f in merged.ip_families if f in cidr_fams] or cidr_fams
            try:
                return self.alloc.get(key, fams), fams
            except Exhausted as e:
                log.error("%s/%s: %s", key[0], key[1], e)
                return [], []

    def plan(self, mc: MemberView, key: Key, t: Target) -> None:
        pass


def strategy(mode: str, alloc: Allocator | None) -> Strategy:
    """The strategy of a --clusterset-ip mode (cidr needs the allocator)."""
    if mode == CIDR:
        assert alloc is not None, "cidr mode needs an allocator"
        return Cidr(alloc)
    return Derived()
