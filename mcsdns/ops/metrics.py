"""Prometheus text exposition of `stats` snapshots.

Reads only the declared families (`stats.FAMILIES`) and snapshots; which
component counts what is for the components to say.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .stats import FAMILIES, Family, Snapshot, merge


def _family(fam: Family) -> Metric:
    if fam.kind == "histogram":
        return HistogramMetricFamily(fam.name, fam.help, labels=list(fam.labels))
    if fam.kind == "counter":
        return CounterMetricFamily(fam.name.removesuffix("_total"), fam.help, labels=list(fam.labels))
    return GaugeMetricFamily(fam.name, fam.help, labels=list(fam.labels))


class SnapshotCollector:
    """A prometheus_client collector of the snapshot `snap()` returns at each
    scrape: the declared families named in `only` (None: all of them)."""

    def __init__(self, snap: Callable[[], Snapshot], only: Collection[str] | None = None) -> None:
        self.snap = snap
        self.only = only

    def collect(self) -> Iterable[Metric]:
        declared = {n: f for n, f in FAMILIES.items() if self.only is None or n in self.only}
        fams: dict[str, Metric] = {name: _family(fam) for name, fam in declared.items()}
        hist: dict[str, dict[tuple[str, ...], tuple[list[tuple[str, float]], float]]] = {
            name: {} for name, fam in declared.items() if fam.kind == "histogram"}
        for (name, labels), v in self.snap().items():
            values = [val for _, val in labels]
            if name in hist:
                key, le = tuple(values[:-1]), values[-1]
                buckets, total = hist[name].get(key, ([], 0.0))
                if le == "sum":
                    total = v
                else:
                    buckets.append((le, v))
                hist[name][key] = (buckets, total)
            else:
                if name not in fams:  # published but not declared here (should not happen)
                    fams[name] = GaugeMetricFamily(name, "", labels=[k for k, _ in labels])
                fams[name].add_metric(values, v)  # type: ignore[attr-defined]
        for name, series in hist.items():
            for key, (buckets, total) in sorted(series.items()):
                buckets.sort(key=lambda b: float(b[0]))
                fams[name].add_metric(list(key), buckets, total)  # type: ignore[attr-defined]
        return list(fams.values())


def render(snaps: Iterable[Snapshot]) -> bytes:
    """Prometheus text for the merged snapshots of one or more processes."""
    reg = CollectorRegistry(auto_describe=False)
    snap = merge(snaps)
    reg.register(SnapshotCollector(lambda: snap))
    return bytes(generate_latest(reg))
