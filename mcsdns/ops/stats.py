"""Counters and gauges published by components, read at scrape time.

The bottom layer of the metrics: it imports nothing of mcsdns. A module
declares its series once with `define()`; a component instance registers a
publisher (`publish(put)`) on its process's `Stats`, and `Stats.snapshot()`
calls every publisher. The query path itself only bumps plain integers that
its publisher turns into samples. Snapshots of several worker processes merge
with `merge()`: counters and histograms are summed, gauges take the maximum
unless declared otherwise (process_* memory and fds are summed, the start time
is the earliest: the supervisor's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Labels = tuple[tuple[str, str], ...]
Snapshot = dict[tuple[str, Labels], float]
Kind = Literal["counter", "gauge", "histogram"]
Merge = Literal["sum", "max", "min"]


class Put(Protocol):
    """Publishes one sample of a declared family."""

    def __call__(self, name: str, value: float, /, **labels: str) -> None: ...


Publisher = Callable[[Put], None]


@dataclass(frozen=True)
class Family:
    """One metric: its full name, kind, help text and label names (histograms:
    without `le`, which their samples carry last, "sum" for the sum) and how
    `merge` combines processes' samples."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    merge: Merge = "sum"


FAMILIES: dict[str, Family] = {}


def define(name: str, kind: Kind, help: str, labels: tuple[str, ...] = (),
           merge: Merge | None = None) -> str:
    """Declare a metric (once per name; a second identical declaration is a no-op).
    `merge` defaults to sum for counters and histograms, max for gauges."""
    fam = Family(name, kind, help, labels, merge or ("max" if kind == "gauge" else "sum"))
    old = FAMILIES.setdefault(name, fam)
    if old != fam:
        raise ValueError(f"metric {name} declared twice differently")
    return name


class Stats:
    """The publishers of one process."""

    def __init__(self) -> None:
        self.publishers: list[Publisher] = []

    def register(self, publisher: Publisher) -> None:
        self.publishers.append(publisher)

    def snapshot(self) -> Snapshot:
        s: Snapshot = {}

        def put(name: str, value: float, /, **labels: str) -> None:
            s[(name, tuple(labels.items()))] = value

        for publish in self.publishers:
            publish(put)
        return s


def put_histogram(put: Put, name: str, bounds: Sequence[float], buckets: Sequence[int],
                  total: float, **labels: str) -> None:
    """Publish a histogram from non-cumulative bucket counts (one more than
    `bounds`, the last for +Inf) and the sum of the observations."""
    acc = 0
    for bound, n in zip((*bounds, float("inf")), buckets, strict=True):
        acc += n
        put(name, acc, **labels, le="+Inf" if bound == float("inf") else f"{bound:g}")
    put(name, total, **labels, le="sum")


def merge(snaps: Iterable[Snapshot]) -> Snapshot:
    """One snapshot from several processes' (each family as its `merge` says;
    undeclared: the maximum)."""
    out: Snapshot = {}
    for snap in snaps:
        for key, v in snap.items():
            fam = FAMILIES.get(key[0])
            how = "max" if fam is None else fam.merge
            if how == "sum":
                out[key] = out.get(key, 0) + v
            elif how == "max":
                out[key] = max(out.get(key, v), v)
            else:
                out[key] = min(out.get(key, v), v)
    return out
