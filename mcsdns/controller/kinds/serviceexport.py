"""A ServiceExport's status: the Valid, Ready and Conflict conditions of one reconcile."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

from ...kube.resources import SERVICE_EXPORTS
from ..contract import Contract, Kind, Obj, Reads
from ..engine import Engine
from ..exports import SERVICE_READS, ExportState
from ..member.client import MemberClient
from ..merge import Merged, unserved_message

log = logging.getLogger("mcsdns.controller")

OURS = ("Valid", "Ready", "Conflict")  # the condition types we set; others' are kept
Condition = tuple[str, str, str, str]  # type, status, reason, message


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(ex: ExportState, m: Merged | None, failed: list[str] | None) -> list[Condition]:
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


def _conditions(obj: Obj) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


class ServiceExport(Contract):
    """Its status only: our conditions, their lastTransitionTime kept while their status holds."""

    kind = Kind.SERVICE_EXPORT
    api = SERVICE_EXPORTS
    # all of an export (the status write's body starts from it), and what `read_export` reads of its Service
    reads: ClassVar[Reads] = {"serviceexports": None, "services": SERVICE_READS}
    # the export's own fields, and when a condition last changed: only our conditions are compared
    unviewed = (*Contract.unviewed, "metadata", "spec", "status.conditions.lastTransitionTime")

    def desired(self, m: MemberClient, ex: ExportState, want: list[Condition]) -> Obj:
        gen = (ex.obj.get("metadata") or {}).get("generation")
        new = []
        for typ, status, reason, msg in want:
            c: dict[str, Any] = {"type": typ, "status": status, "reason": reason, "message": msg,
                                 "lastTransitionTime": now_rfc3339()}
            if gen is not None:
                c["observedGeneration"] = gen
            new.append(c)
        # list items carry no apiVersion/kind; a real API server wants them in a PUT body
        return dict(ex.obj, apiVersion=m.mcs_api_version(), kind="ServiceExport",
                    status=dict(ex.obj.get("status") or {}, conditions=new))

    def view(self, obj: Obj) -> dict[Any, tuple[Any, ...]]:
        """Our conditions by type, without their lastTransitionTime."""
        return {c.get("type"): tuple(c.get(f) for f in ("status", "reason", "message", "observedGeneration"))
                for c in _conditions(obj) if c.get("type") in OURS}

    def merge(self, have: Obj, want: Obj) -> Obj:
        old = {c.get("type"): c for c in _conditions(have)}
        new = []
        for c in _conditions(want):
            before = old.pop(c["type"], None)
            if before is not None and before.get("status") == c["status"]:
                c = dict(c, lastTransitionTime=before.get("lastTransitionTime") or c["lastTransitionTime"])
            new.append(c)
        new.extend(c for t, c in old.items() if t not in OURS)
        return dict(have, apiVersion=want["apiVersion"], kind="ServiceExport",
                    status=dict(have.get("status") or {}, conditions=new))

    def sync(self, eng: Engine, ex: ExportState, merged: Merged | None) -> None:
        """Written when our conditions changed; its failure does not fail the import."""
        m = eng.mc.member
        want = conditions(ex, merged, eng.r.failed)
        body = self.desired(m, ex, want)
        if self.view(ex.obj) == self.view(body):
            return
        log.info("cluster %s: ServiceExport %s/%s status: %s", m.name, *eng.key,
                 ", ".join(f"{t}={s}({r})" for t, s, r, _ in want))
        eng.status(self, eng.key, self.merge(ex.obj, body))
