"""Imports held across a controller restart while a member is still away.

A restarted controller has not read a member that is down: it does not know that member's
exports. While such a member is within its import grace (its last contact known from its
Lease), an existing import of ours that no member read since the start claims (none of the
clusters in its status.clusters is one of theirs) is held: its ServiceImport and derived
Service stay, as the import grace keeps them for a member lost while the controller ran;
its slices go, as the endpoint TTL has run out for a member not read yet when the gate opens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..kube.apiclient.keys import Key
from .exports import is_ours
from .member.view import MemberView


def unread_within_grace(members: Sequence[MemberView], now: float, grace: float) -> bool:
    """Whether a member not read since the start was last reached less than `grace` ago."""
    return any(not mc.synced and mc.last_ok is not None and now - mc.last_ok < grace for mc in members)


def held(members: Sequence[MemberView], key: Key, clock: Callable[[], float], grace: float) -> bool:
    """Whether the import of `key`, which no member read exports, is held (the module docstring)."""
    if not unread_within_grace(members, clock(), grace):
        return False
    read = {mc.member.cluster_id for mc in members if mc.synced}
    ours = [si for mc in members if mc.synced and mc.reachable
            for si in [mc.service_import(key)] if si is not None and is_ours(si)]
    return bool(ours) and not any(str(c.get("cluster")) in read for si in ours
                                  for c in (si.get("status") or {}).get("clusters") or []
                                  if isinstance(c, dict))
