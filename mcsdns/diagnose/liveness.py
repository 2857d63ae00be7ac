"""Is a controller running? Checked when any member exports something: a controller keeps
its Leases fresh (leader election `mcsdns-controller`, and `mcsdns-member-<name>` per
member: mcsdns.controller.lease) in its Lease namespace, and in the cluster running it
its pods (deploy/'s labels) are Running and Ready. Exports with neither: FAIL, since
nothing will bring their imports up to date (their conditions may be old)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

from ..controller.lease import MemberLeases
from ..kube.permissions import needed
from .checks import FAIL, OK, WARN, Obj, Result
from .collect import LEASE_NAMESPACES, Snapshot

ELECTION = "mcsdns-controller"  # the controller's default --lease-name
SLACK = 30.0  # seconds a renewal may be late (clocks, a busy controller)


def _renewed(lease: Obj) -> float | None:
    """Unix time of the Lease's renewTime."""
    ts = str((lease.get("spec") or {}).get("renewTime") or "")
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _fresh(lease: Obj, now: float) -> bool:
    t = _renewed(lease)
    duration = float((lease.get("spec") or {}).get("leaseDurationSeconds") or 15)
    return t is not None and now - t <= max(SLACK, 2 * duration)


def _ours(lease: Obj) -> bool:
    name = str((lease.get("metadata") or {}).get("name") or "")
    return name == ELECTION or name.startswith(MemberLeases.PREFIX)


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


def _lease_text(lease: Obj, now: float) -> str:
    meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
    t = _renewed(lease)
    age = f"{now - t:.0f}s ago" if t is not None else "never"
    holder = spec.get("holderIdentity") or "-"
    return f"Lease {meta.get('namespace')}/{meta.get('name')} renewed {age} by {holder}"


def controller_checks(snaps: list[Snapshot], clusterset: bool, now: float | None = None) -> Iterator[Result]:
    """One line on whether a controller runs, when any export needs one."""
    live = [s for s in snaps if s.error is None]
    if not any(s.exports for s in live):
        return
    now = time.time() if now is None else now
    leases = sorted(((s, ls) for s in live for ls in s.leases if _ours(ls)),
                    key=lambda x: -(_renewed(x[1]) or 0.0))
    fresh = [(s, ls) for s, ls in leases if _fresh(ls, now)]
    pods = [(s, p) for s in live for p in s.pods]
    down = not any(_running(p) for _, p in pods)
    pod_line = f"; controller pods: {', '.join(_pod_text(p) for _, p in pods)}" if pods else ""
    if fresh and not (pods and down):
        s, lease = fresh[0]
        yield Result(OK, "controller", s.name, "", f"running: {_lease_text(lease, now)}{pod_line}")
    elif fresh:
        s, _ = pods[0]
        yield Result(FAIL, "controller", s.name, "", f"no controller pod is running and ready{pod_line}")
    elif leases:
        s, lease = leases[0]
        yield Result(FAIL, "controller", s.name, "", "no controller: exports exist but its "
                     f"{_lease_text(lease, now)} (stale){pod_line}: nothing brings the imports up to date")
    elif pods and down:
        s, _ = pods[0]
        yield Result(FAIL, "controller", s.name, "", f"no controller pod is running and ready{pod_line}")
    elif all("leases" in s.optional_unread for s in live):
        s = live[0]
        yield Result(WARN, "controller", s.name, "", f"cannot read Leases ({s.optional_unread['leases']}): "
                     f"whether a controller runs is not checked (needs {needed('leases')} in "
                     f"{' and '.join(LEASE_NAMESPACES)})")
    elif clusterset:
        yield Result(FAIL, "controller", "", "", "no controller: exports exist but no member has its Leases "
                     f"({ELECTION}, {MemberLeases.PREFIX}*) in {' or '.join(LEASE_NAMESPACES)}: nothing "
                     "imports them or keeps their imports up to date")
    else:
        yield Result(WARN, "controller", live[0].name, "", "no controller Lease in this cluster: they are in "
                     "the controller's --lease-cluster; diagnose every member with --cluster to see it "
                     "runs")
