"""Two controllers writing one clusterset (mcsdns.controller.writers): a controller that finds
another writer's objects leaves them to it and says so in a `WriterConflict` Event on the
ServiceExport. One such Event seen within `WINDOW` seconds is a FAIL naming both writers."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime

from ..controller.writers import REASON
from .checks import FAIL, Obj, Result
from .collect import Snapshot

WINDOW = 600.0  # seconds: a conflict older than this is history (Events live an hour)
PAIR = re.compile(r"writer '([^']*)'.*writer '([^']*)'")  # (the other writer, the one telling)


def _when(ev: Obj) -> float | None:
    for f in ("lastTimestamp", "eventTime", "firstTimestamp"):
        ts = str(ev.get(f) or "")
        try:
            return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return None


def writer_checks(snaps: list[Snapshot], now: float | None = None) -> Iterator[Result]:
    """A FAIL per cluster and pair of writers with a recent `WriterConflict` Event."""
    now = time.time() if now is None else now
    for s in snaps:
        seen: dict[tuple[str, str], tuple[float, int, str]] = {}  # pair -> (last, events, export)
        for ev in s.writer_events:
            t, m = _when(ev), PAIR.search(str(ev.get("message") or ""))
            if ev.get("reason") != REASON or t is None or now - t > WINDOW or m is None:
                continue
            obj = ev.get("involvedObject") or {}
            pair, n = (m.group(1), m.group(2)), int(ev.get("count") or 1)
            last, total, export = seen.get(pair, (0.0, 0, ""))
            if t >= last:
                last, export = t, f"{obj.get('namespace')}/{obj.get('name')}"
            seen[pair] = (last, total + n, export)
        for (other, teller), (last, total, export) in sorted(seen.items()):
            yield Result(FAIL, "writers", s.name, "",
                         f"two controllers write this cluster's objects: writer {other!r} and writer "
                         f"{teller!r}, which leaves them to the first ({total} WriterConflict Events, the "
                         f"last {now - last:.0f}s ago on ServiceExport {export}); run one controller per "
                         "clusterset, or --leader-elect replicas sharing one Lease (one --lease-cluster)")
