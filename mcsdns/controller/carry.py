"""A member's counters kept across its reloads: a changed kubeconfig (a rotated credential) makes
a new Member, API client and probe, which count from 0. `Carry` remembers, per member name, the
objects it last read; when another one takes that name, the old one's counts are read a last
time and kept as a base, so a series of the member's never drops."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

Key = tuple[str, ...]


def raw(mc: Any) -> Counter[Key]:
    """What one MemberCaches (`informers.MemberCaches`) and its Member and client counted."""
    m, out = mc.member, Counter[Key]()
    with m.lock:
        for (resource, verb), n in m.write_counts.items():
            out[("attempt", resource, verb)] = n
            out[("landed", resource, verb)] = m.landed_counts.get((resource, verb), 0)
    for _ in range(10):  # the client's threads add keys while this copies
        try:
            out.update({("api", method, code): n for (method, code), n in
                        (m.client.counts.items() if m.client is not None else ())})
            break
        except RuntimeError:
            continue
    out[("unreachable",)] = mc.probe.unreachable
    return out


class Carry:
    """Counts per member name, summed over the objects that held the name."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}  # member name -> the MemberCaches last read
        self.base: dict[str, Counter[Key]] = {}
        self.lock = threading.Lock()

    def counts(self, mc: Any) -> dict[Key, int]:
        """`mc`'s counts plus those of the objects of its name before it."""
        name = mc.member.name
        with self.lock:
            prev = self.last.get(name)
            if prev is not None and prev is not mc:
                base = self.base.setdefault(name, Counter())
                for k, n in raw(prev).items():
                    base[k] += n
            self.last[name] = mc
            out = dict(self.base.get(name, {}))
        for k, n in raw(mc).items():
            out[k] = out.get(k, 0) + n
        return out
