"""Is a controller running? Checked when any member exports something. A running controller
holds its leader Lease (`mcsdns-controller` of `--leader-elect`: mcsdns.controller.lease)
and keeps it fresh: a holder is named and renewTime + leaseDurationSeconds is not past. The
member Leases (`mcsdns-member-<name>`, the Endpoint TTL clock) outlive the controller and
never count. A released Lease (no holder: a clean stop, no other replica took it) and an
expired one are "not running"; so are deploy/'s controller pods when none is Running and
Ready. A controller without `--leader-elect` holds no Lease: only its pods can tell."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

from ..controller.lease import LEASE_NAMESPACES, MemberLeases
from ..kube.permissions import needed
from .checks import FAIL, OK, WARN, Obj, Result
from .collect import Snapshot

ELECTION = "mcsdns-controller"  # the controller's default --lease-name (cli_controller)


def _spec(lease: Obj) -> Obj:
    spec = lease.get("spec")
    return spec if isinstance(spec, dict) else {}


def _renewed(lease: Obj) -> float | None:
    """Unix time of the Lease's renewTime."""
    ts = str(_spec(lease).get("renewTime") or "")
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _expires(lease: Obj) -> float | None:
    """Unix time the holder's claim ends: renewTime + leaseDurationSeconds."""
    t, d = _renewed(lease), _spec(lease).get("leaseDurationSeconds")
    if t is None or isinstance(d, bool) or not isinstance(d, int | float):
        return None
    return t + float(d)


def _holder(lease: Obj) -> str:
    return str(_spec(lease).get("holderIdentity") or "")


def _held(lease: Obj, now: float) -> bool:
    """Held and fresh: a holder, and its claim not past."""
    end = _expires(lease)
    return bool(_holder(lease)) and end is not None and now <= end


def _name(lease: Obj) -> str:
    return str((lease.get("metadata") or {}).get("name") or "")


def _running(pod: Obj) -> bool:
    status = pod.get("status") or {}
    conds = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    return status.get("phase") == "Running" and ready


def _pod_text(pod: Obj) -> str:
    status = pod.get("status") or {}
    why = next((str(w["reason"]) for cs in status.get("containerStatuses") or []
                if (w := (cs.get("state") or {}).get("waiting")) and w.get("reason")), None)
    return f"{(pod.get('metadata') or {}).get('name')} {why or status.get('phase') or 'Unknown'}"


def _ago(t: float | None, now: float) -> str:
    return f"{now - t:.0f}s ago" if t is not None else "never"


def _lease_text(lease: Obj, now: float) -> str:
    meta = lease.get("metadata") or {}
    where = f"Lease {meta.get('namespace')}/{meta.get('name')}"
    holder, t, end = _holder(lease), _renewed(lease), _expires(lease)
    if not holder:
        return f"{where} released {_ago(t, now)} (no holder: the controller stopped and no replica took it)"
    if end is not None and now <= end:
        return f"{where} held by {holder}, renewed {_ago(t, now)} (expires in {end - now:.0f}s)"
    past = f"expired {now - end:.0f}s ago" if end is not None else "no valid renewTime"
    return f"{where} held by {holder}, renewed {_ago(t, now)}: {past}"


def _fresh_member(live: list[Snapshot], now: float) -> tuple[Snapshot, Obj] | None:
    """The last renewed member Lease still within its TTL, if any."""
    found = [(s, ls) for s in live for ls in s.leases
             if _name(ls).startswith(MemberLeases.PREFIX) and _held(ls, now)]
    return max(found, key=lambda x: _renewed(x[1]) or 0.0, default=None)


def controller_checks(snaps: list[Snapshot], clusterset: bool, now: float | None = None) -> Iterator[Result]:
    """One line on whether a controller runs, when any export needs one."""
    live = [s for s in snaps if s.error is None]
    if not any(s.exports for s in live):
        return
    now = time.time() if now is None else now
    leases = sorted(((s, ls) for s in live for ls in s.leases if _name(ls) == ELECTION),
                    key=lambda x: (_held(x[1], now), _renewed(x[1]) or 0.0), reverse=True)
    pods = [(s, p) for s in live for p in s.pods]
    up = any(_running(p) for _, p in pods)
    pod_line = f"; controller pods: {', '.join(_pod_text(p) for _, p in pods)}" if pods else ""
    if leases and _held(leases[0][1], now) and (up or not pods):
        s, lease = leases[0]
        yield Result(OK, "controller", s.name, "", f"running: {_lease_text(lease, now)}{pod_line}")
    elif pods and not up:
        s, _ = pods[0]
        yield Result(FAIL, "controller", s.name, "", f"not running: no controller pod is running and "
                     f"ready{pod_line}")
    elif leases:
        s, lease = leases[0]
        yield Result(FAIL, "controller", s.name, "", f"not running: {_lease_text(lease, now)}{pod_line}; "
                     "nothing brings the imports up to date")
    elif up:
        s, _ = pods[0]
        yield Result(OK, "controller", s.name, "", f"running (no leader Lease {ELECTION}: "
                     f"without --leader-elect only its pods tell){pod_line}")
    elif all("leases" in s.optional_unread for s in live):
        s = live[0]
        yield Result(WARN, "controller", s.name, "", f"cannot read Leases ({s.optional_unread['leases']}): "
                     f"whether a controller runs is not checked (needs {needed('leases')} in "
                     f"{' and '.join(LEASE_NAMESPACES)})")
    elif clusterset and (fresh := _fresh_member(live, now)) is not None:
        s, lease = fresh
        yield Result(WARN, "controller", s.name, "", f"not known: no leader Lease {ELECTION}, and the member "
                     f"{_lease_text(lease, now)} outlives the controller (its Endpoint TTL): run the "
                     "controller with --leader-elect so that its Lease tells")
    elif clusterset:
        yield Result(FAIL, "controller", "", "", f"not running: exports exist but no member has the leader "
                     f"Lease {ELECTION} in {' or '.join(LEASE_NAMESPACES)}: nothing imports them or keeps "
                     "their imports up to date")
    else:
        yield Result(WARN, "controller", live[0].name, "", "no controller Lease in this cluster: they are in "
                     "the controller's --lease-cluster; diagnose every member with --cluster (or give "
                     "--members-secret) to see it runs")
