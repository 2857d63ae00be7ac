"""`mcsdns show`'s output: two aligned tables (services, then members), or one JSON object.
A table cell holds the short form (a verdict's first clause); JSON holds every word."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from .inventory import Inventory, Member, Service


def _short(message: str) -> str:
    """A verdict's first clause: `Conflict=True (PortConflict)`, `active`, `not active`."""
    return message.split(": ")[0].strip()


def _table(head: Sequence[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in (list(head), *rows)) for i in range(len(head))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in (list(head), *rows)]


def _conflicts(s: Service) -> str:
    """`Conflict=True (PortConflict) in a, c`: each kind once, with the members that report it."""
    by: dict[str, list[str]] = {}
    for c in s.conflicts:
        by.setdefault(_short(c["message"]), []).append(c["member"])
    return "; ".join(f"{what} in {', '.join(ms)}" if any(ms) else what for what, ms in by.items())


def _service_row(s: Service) -> list[str]:
    ips = " ".join(f"{m}={','.join(v) or '-'}" for m, v in s.ips.items()) if s.type != "Headless" else "-"
    return [f"{s.namespace}/{s.name}", s.type or "-", ", ".join(s.exported_by) or "-",
            ", ".join(s.imported_in) or "-", ips or "-",
            _conflicts(s) or "-",
            " ".join(f"{m}={_short(v)}" for m, v in s.locality.items()) or "-"]


def _member_row(m: Member) -> list[str]:
    state = f"{m.state} ({m.version})" if m.reachable and m.version else m.state
    cred = (m.credential + (" (renew it)" if m.credential_due else "")) if m.credential else "-"
    return [m.name, m.cluster_id or "-", m.server, state, cred, str(m.exports), str(m.imports)]


def table(inv: Inventory) -> str:
    lines = _table(("SERVICE", "TYPE", "EXPORTED BY", "IMPORTED IN", "CLUSTERSET IPS", "CONFLICTS",
                    "LOCALITY"), [_service_row(s) for s in inv.services])
    if not inv.services:
        lines.append("(no service is exported or imported)")
    lines += [""] + _table(("MEMBER", "CLUSTER ID", "API SERVER", "REACHABLE", "CREDENTIAL", "EXPORTS",
                            "IMPORTS"), [_member_row(m) for m in inv.members])
    for m in inv.members:
        lines += [f"{m.name}: cannot read {p}" for p in m.problems]
    return "\n".join(lines) + "\n"


def as_json(inv: Inventory) -> str:
    return json.dumps(asdict(inv), indent=2) + "\n"
