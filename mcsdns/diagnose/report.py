"""The report of `mcsdns diagnose`: aligned text lines, or one JSON object."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict

from .checks import FAIL, OK, WARN, Result


def summary(results: list[Result]) -> dict[str, int]:
    counts = Counter(r.status for r in results)
    return {s: counts[s] for s in (OK, WARN, FAIL)}


def text(results: list[Result]) -> str:
    """`STATUS  CLUSTER  CHECK  SUBJECT  message` per result, then a summary line."""
    cw = max((len(r.cluster) for r in results), default=0)
    kw = max((len(r.check) for r in results), default=0)
    lines = []
    for r in results:
        subject = f"{r.subject}: " if r.subject else ""
        lines.append(f"{r.status:<4}  {r.cluster:<{cw}}  {r.check:<{kw}}  {subject}{r.message}")
    s = summary(results)
    lines.append(f"{s[OK]} OK, {s[WARN]} WARN, {s[FAIL]} FAIL")
    return "\n".join(lines) + "\n"


def as_json(results: list[Result]) -> str:
    return json.dumps({"results": [asdict(r) for r in results], "summary": summary(results)}, indent=2) + "\n"
