"""The controller's Prometheus metrics: declared once with `ops.stats.define`, as the
server's are, and published from the Manager at scrape time."""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry, generate_latest

from ..ops import process
from ..ops.metrics import SnapshotCollector
from ..ops.stats import Put, Stats, define
from .kinds import ENDPOINT_SLICES
from .locality import WARNINGS
from .manager import Manager

RECONCILES = define("mcsdns_controller_reconciles_total", "counter",
                    "Reconciles of one service key, by result (ok, retry: a write failed and the key was "
                    "re-queued, error).", ("result",))
QUEUE_DEPTH = define("mcsdns_controller_queue_depth", "gauge", "Service keys waiting (queued or delayed).")
WRITES = define("mcsdns_controller_writes_total", "counter", "API writes by member, resource and verb.",
                ("cluster", "resource", "verb"))
REACHABLE = define("mcsdns_controller_member_reachable", "gauge",
                   "1 while every watch on the member is healthy.", ("cluster",))
LAST_SYNC = define("mcsdns_controller_member_last_sync_timestamp_seconds", "gauge",
                   "Unix time of the member's last list, watch event or bookmark.", ("cluster",))
UNSERVED = define("mcsdns_controller_unserved_ports", "gauge",
                  "Exported ports that no port of their merged service serves (their endpoints get no "
                  "traffic), by exporting member.", ("cluster",))
LOCALITY = define("mcsdns_controller_locality_degraded", "gauge",
                  "Services that set trafficDistribution but get no locality hints in the member, by why "
                  "(unlabeled-nodes, too-many-zones, endpoints-without-zone, nodes-unreadable).",
                  ("cluster", "reason"))
LEADER = define("mcsdns_controller_leader", "gauge", "1 while this replica may write.")
READY = define("mcsdns_controller_ready", "gauge", "1 after the first full sync.")
NAMES = (RECONCILES, QUEUE_DEPTH, WRITES, REACHABLE, LAST_SYNC, UNSERVED, LOCALITY, LEADER, READY)


def publish(mgr: Manager, put: Put) -> None:
    """The controller's samples, read from `mgr` now."""
    for result in ("ok", "retry", "error"):
        put(RECONCILES, mgr.results[result], result=result)
    put(QUEUE_DEPTH, mgr.queue.depth())
    with mgr.rec.unserved_lock:
        per_member = [u for by_member in mgr.rec.unserved.values() for u in by_member.items()]
    for mc in mgr.caches:
        m = mc.member
        with m.lock:
            counts = sorted(m.write_counts.items())
        for (resource, verb), n in counts:
            put(WRITES, n, cluster=m.name, resource=resource, verb=verb)
        put(REACHABLE, 1.0 if mc.reachable else 0.0, cluster=m.name)
        put(LAST_SYNC, mc.last_sync, cluster=m.name)
        put(UNSERVED, sum(len(ports) for name, ports in per_member if name == m.name), cluster=m.name)
    degraded = ENDPOINT_SLICES.verdicts.degraded()
    for mc in mgr.caches:
        for reason in WARNINGS:
            put(LOCALITY, degraded.get((mc.member.name, reason), 0), cluster=mc.member.name, reason=reason)
    put(LEADER, 1.0 if mgr.leading() else 0.0)
    put(READY, 1.0 if mgr.ready.is_set() else 0.0)


def registry(mgr: Manager) -> CollectorRegistry:
    """The controller's series, then mcsdns_build_info and process_* (mcsdns.ops.process)."""
    reg = CollectorRegistry(auto_describe=False)
    stats = Stats()
    stats.register(partial(publish, mgr))
    stats.register(process.publish)
    reg.register(SnapshotCollector(stats.snapshot, NAMES + process.NAMES))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
