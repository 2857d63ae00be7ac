"""The controller's Prometheus metrics, read from the Manager at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..ops import process
from ..ops.metrics import SnapshotCollector
from ..ops.stats import Stats
from .manager import Manager


class _Collector:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr

    def collect(self) -> Iterator[Metric]:
        mgr = self.mgr
        rec = CounterMetricFamily("mcsdns_controller_reconciles", "Reconciles of one service key, by result "
                                  "(ok, retry: a write failed and the key was re-queued, error).",
                                  labels=["result"])
        for result in ("ok", "retry", "error"):
            rec.add_metric([result], mgr.results[result])
        yield rec
        yield GaugeMetricFamily("mcsdns_controller_queue_depth", "Service keys waiting (queued or delayed).",
                                value=mgr.queue.depth())
        writes = CounterMetricFamily("mcsdns_controller_writes", "API writes by member, resource and verb.",
                                     labels=["cluster", "resource", "verb"])
        reach = GaugeMetricFamily("mcsdns_controller_member_reachable",
                                  "1 while every watch on the member is healthy.", labels=["cluster"])
        last = GaugeMetricFamily("mcsdns_controller_member_last_sync_timestamp_seconds",
                                 "Unix time of the member's last list, watch event or bookmark.",
                                 labels=["cluster"])
        unserved = GaugeMetricFamily("mcsdns_controller_unserved_ports",
                                     "Exported ports that no port of their merged service serves "
                                     "(their endpoints get no traffic), by exporting member.",
                                     labels=["cluster"])
        with mgr.rec.unserved_lock:
            per_member = [u for by_member in mgr.rec.unserved.values() for u in by_member.items()]
        for mc in mgr.caches:
            m = mc.member
            unserved.add_metric([m.name], sum(len(ports) for name, ports in per_member if name == m.name))
            with m.lock:
                counts = sorted(m.write_counts.items())
            for (resource, verb), n in counts:
                writes.add_metric([m.name, resource, verb], n)
            reach.add_metric([m.name], 1.0 if mc.reachable else 0.0)
            last.add_metric([m.name], mc.last_sync)
        yield writes
        yield reach
        yield last
        yield unserved
        yield GaugeMetricFamily("mcsdns_controller_leader", "1 while this replica may write.",
                                value=1.0 if mgr.leading() else 0.0)
        yield GaugeMetricFamily("mcsdns_controller_ready", "1 after the first full sync.",
                                value=1.0 if mgr.ready.is_set() else 0.0)


def registry(mgr: Manager) -> CollectorRegistry:
    """The controller's series, then mcsdns_build_info and process_* (mcsdns.ops.process)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(mgr))
    stats = Stats()
    stats.register(process.publish)
    reg.register(SnapshotCollector(stats.snapshot, process.NAMES))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
