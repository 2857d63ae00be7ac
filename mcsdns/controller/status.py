"""A ServiceExport's status: the Valid, Ready and Conflict conditions of one reconcile."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from ..kube.keys import Key
from .exports import ExportState
from .member import MemberView
from .merge import Merged, unserved_message
from .writes import Result, put_status, write

log = logging.getLogger("mcsdns.controller")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(ex: ExportState, m: Merged | None, failed: list[str] | None,
                ) -> list[tuple[str, str, str, str]]:
    if ex.invalid is not None or m is None:
        reason, msg = ex.invalid or ("Pending", "Not merged yet.")
        return [("Valid", "False", reason, msg),
                ("Ready", "False", "Pending", "The ServiceExport is not valid.")]
    out = [("Valid", "True", "Valid", "The ServiceExport and its Service are exportable.")]
    if ex.unserved():
        msg = unserved_message(ex.unserved(), m.ports)
        if failed:
            msg += " " + "; ".join(sorted(set(failed)))
        out.append(("Ready", "False", "PortConflict", msg))
    elif failed:
        out.append(("Ready", "False", "Pending", "; ".join(sorted(set(failed)))))
    else:
        out.append(("Ready", "True", "Exported", "The service has been exported."))
    c = m.conflict_condition()
    if c is None:
        out.append(("Conflict", "False", "NoConflicts", "No conflicts."))
    else:
        out.append(("Conflict", "True", c[0], c[1]))
    return out


def sync_status(mc: MemberView, k: Key, ex: ExportState, merged: Merged | None,
                 r: Result) -> None:
    m = mc.member
    want = conditions(ex, merged, r.failed)
    gen = (ex.obj.get("metadata") or {}).get("generation")
    have = list((ex.obj.get("status") or {}).get("conditions") or [])
    by_type = {c.get("type"): c for c in have}
    new, changed = [], False
    for typ, status, reason, msg in want:
        old = by_type.pop(typ, None)
        c = {"type": typ, "status": status, "reason": reason, "message": msg,
             "lastTransitionTime": now_rfc3339()}
        if gen is not None:
            c["observedGeneration"] = gen
        if old is not None and old.get("status") == status:
            c["lastTransitionTime"] = old.get("lastTransitionTime") or c["lastTransitionTime"]
        if old is None or any(old.get(f) != c.get(f) for f in
                              ("status", "reason", "message", "observedGeneration")):
            changed = True
        new.append(c)
    if by_type:  # conditions of ours that no longer apply (Conflict on an invalid export)
        changed = changed or any(t in ("Valid", "Ready", "Conflict") for t in by_type)
        new.extend(c for t, c in by_type.items() if t not in ("Valid", "Ready", "Conflict"))
    if not changed:
        return
    log.info("cluster %s: ServiceExport %s/%s status: %s", m.name, k[0], k[1],
             ", ".join(f"{t}={s}({r})" for t, s, r, _ in want))
    # list items carry no apiVersion/kind; a real API server wants them in a PUT body
    body = dict(ex.obj, apiVersion=m.mcs_api_version(), kind="ServiceExport",
                status=dict(ex.obj.get("status") or {}, conditions=new))

    def put() -> None:
        out = put_status(m, m.mcs_path("serviceexports", k[0], k[1]), body)
        mc.note_written("serviceexports", out)

    write(mc, r, k, "ServiceExport status", put)
