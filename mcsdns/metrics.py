"""Prometheus metrics.

The query path only bumps plain integers; `snapshot(app)` turns them into
samples at scrape time, and `render(snapshots)` merges the snapshots of one
or more worker processes (counters are summed, gauges take the maximum).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from . import __version__
from .handler import SIZE_BOUNDS
from .wire import RCODE_NAMES, TYPE_NAMES

if TYPE_CHECKING:
    from .app import App
    from .notify import Notifier

Labels = tuple[tuple[str, str], ...]
Snapshot = dict[tuple[str, Labels], float]

# name -> (counter?, help, label names)
METRICS: dict[str, tuple[bool, str, tuple[str, ...]]] = {
    "mcsdns_dns_responses_total": (True, "DNS responses by transport, query type and rcode.",
                                   ("proto", "type", "rcode")),
    "mcsdns_dns_slow_path_total": (True, "Queries off the fast path, by outcome "
                                   "(parsed, formerr, notimp, badvers, dropped).", ("outcome",)),
    "mcsdns_dns_response_size_bytes": (True, "Size of the responses counted in "
                                       "mcsdns_dns_responses_total.", ("proto",)),
    "mcsdns_cache_hits_total": (True, "Responses served whole from the response cache.", ()),
    "mcsdns_cache_misses_total": (True, "Fast-path responses assembled from pre-rendered answers.", ()),
    "mcsdns_tcp_connections_rejected_total": (True, "TCP connections closed at the limit.", ()),
    "mcsdns_tcp_connections_timed_out_total": (True, "TCP connections closed idle or slow.", ()),
    "mcsdns_tcp_connections": (False, "Open TCP connections.", ()),
    "mcsdns_skipped_objects_total": (True, "Malformed Kubernetes objects or parts skipped.", ("kind",)),
    "mcsdns_watch_events_total": (True, "Object events applied to the store.", ("kind",)),
    "mcsdns_services": (False, "ServiceImports served.", ()),
    "mcsdns_zone_names": (False, "Names in the zone.", ()),
    "mcsdns_zone_changes_total": (True, "Service changes applied to the zone.", ()),
    "mcsdns_ready": (False, "1 once every source has completed its first full sync.", ()),
    "mcsdns_source_connected": (False, "1 while the source is connected.", ("source",)),
    "mcsdns_source_last_sync_timestamp_seconds": (False, "Unix time of the last successful sync.",
                                                  ("source",)),
    "mcsdns_source_errors_total": (True, "Source errors by kind.", ("source", "error")),
    "mcsdns_build_info": (False, "Build information.", ("version",)),
    "mcsdns_zone_serial": (False, "SOA serial served (0 before the first sync).", ()),
    "mcsdns_zone_transfers_total": (True, "AXFR/IXFR requests by type and outcome "
                                    "(axfr, ixfr: what was sent; refused, notauth, servfail, formerr).",
                                    ("type", "outcome")),
    "mcsdns_notify_total": (True, "NOTIFY messages by target and outcome "
                            "(sent, answered, error, unanswered).", ("target", "outcome")),
}


def _type(t: int) -> str:
    return TYPE_NAMES.get(t, f"TYPE{t}")


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else f"{bound:g}"


def snapshot(app: App) -> Snapshot:
    s: Snapshot = {}

    def put(name: str, value: float, **labels: str) -> None:
        s[(name, tuple(labels.items()))] = value

    for proto, is_tcp in (("udp", False), ("tcp", True)):
        for (qtype, rcode), n in app.handler.counts(is_tcp).items():
            put("mcsdns_dns_responses_total", n, proto=proto, type=_type(qtype),
                rcode=RCODE_NAMES.get(rcode, str(rcode)))
    for proto, is_tcp in (("udp", False), ("tcp", True)):
        buckets, total = app.handler.size_histogram(is_tcp)
        acc = 0
        for bound, n in zip((*SIZE_BOUNDS, float("inf")), buckets, strict=True):
            acc += n
            put("mcsdns_dns_response_size_bytes", acc, proto=proto, le=_le(bound))
        put("mcsdns_dns_response_size_bytes", total, proto=proto, le="sum")
    put("mcsdns_cache_hits_total", app.handler.cache_hits())
    put("mcsdns_cache_misses_total", app.handler.cache_misses)
    for k, v in list(app.handler.slow_count.items()):
        put("mcsdns_dns_slow_path_total", v, outcome=k)
    tcp = getattr(app, "tcp_state", None)
    if tcp is not None:
        put("mcsdns_tcp_connections_rejected_total", tcp.rejected)
        put("mcsdns_tcp_connections_timed_out_total", tcp.timed_out)
        put("mcsdns_tcp_connections", len(tcp.conns))
    for k, v in list(app.store.skipped.items()):
        put("mcsdns_skipped_objects_total", v, kind=k)
    for k, v in list(app.store.events.items()):
        put("mcsdns_watch_events_total", v, kind=k)
    put("mcsdns_services", len(app.store.imports))
    put("mcsdns_zone_names", len(app.zone.names))
    put("mcsdns_zone_changes_total", app.zone.version)
    put("mcsdns_ready", 1 if app.ready() else 0)
    for src in app.sources:
        connected = getattr(src, "connected", True)
        put("mcsdns_source_connected", 1 if connected else 0, source=src.name)
        last = getattr(src, "last_sync", None)
        if last:
            put("mcsdns_source_last_sync_timestamp_seconds", float(last), source=src.name)
        for k, v in list(getattr(src, "errors", {}).items()):
            put("mcsdns_source_errors_total", v, source=src.name, error=str(k))
    put("mcsdns_build_info", 1, version=__version__)
    versions = getattr(app, "versions", None)
    if versions is not None:
        put("mcsdns_zone_serial", app.zone.serial if versions.established else 0)
        for (kind, outcome), n in list(app.transfers.counts.items()):
            put("mcsdns_zone_transfers_total", n, type=kind, outcome=outcome)
    notifier = getattr(app, "notifier", None)
    if notifier is not None:
        s.update(notify_snapshot(notifier))
    return s


def notify_snapshot(notifier: Notifier) -> Snapshot:
    """NOTIFY counters of one Notifier (the app's, or the supervisor's)."""
    return {("mcsdns_notify_total", (("target", t), ("outcome", o))): float(n)
            for (t, o), n in list(notifier.counts.items())}


def merge(snaps: Iterable[Snapshot]) -> Snapshot:
    out: Snapshot = {}
    for snap in snaps:
        for key, v in snap.items():
            if METRICS[key[0]][0]:
                out[key] = out.get(key, 0) + v
            else:
                out[key] = max(out.get(key, v), v)
    return out


HISTOGRAMS = {"mcsdns_dns_response_size_bytes"}  # samples carry le=<bound> or le="sum"


class _Collector:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterable[Metric]:
        fams: dict[str, Metric] = {}
        hist: dict[str, dict[tuple[str, ...], tuple[list[tuple[str, float]], float]]] = {}
        for name, (counter, help_, label_names) in METRICS.items():
            if name in HISTOGRAMS:
                fams[name] = HistogramMetricFamily(name, help_, labels=list(label_names))
                hist[name] = {}
                continue
            base = name.removesuffix("_total") if counter else name
            cls = CounterMetricFamily if counter else GaugeMetricFamily
            fams[name] = cls(base, help_, labels=list(label_names))
        for (name, labels), v in self.snap.items():
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
                fams[name].add_metric(values, v)  # type: ignore[attr-defined]
        for name, series in hist.items():
            for key, (buckets, total) in sorted(series.items()):
                buckets.sort(key=lambda b: float(b[0]))
                fams[name].add_metric(list(key), buckets, total)  # type: ignore[attr-defined]
        return list(fams.values())


def render(snaps: Iterable[Snapshot]) -> bytes:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(merge(snaps)))
    return bytes(generate_latest(reg))
