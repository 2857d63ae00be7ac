"""Prometheus metrics, collected from the server's own counters at scrape time
(the query path only bumps plain integers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from .app import App


class AppCollector:
    def __init__(self, app: App) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        app = self.app
        c = CounterMetricFamily("mcsdns_slow_path_total", "Queries answered off the fast path, by outcome.",
                                labels=["outcome"])
        for k, v in app.handler.slow_count.items():
            c.add_metric([k], v)
        yield c
        s = CounterMetricFamily("mcsdns_skipped_objects_total",
                                "Malformed Kubernetes objects or parts skipped, by kind.", labels=["kind"])
        for k, v in app.store.skipped.items():
            s.add_metric([k], v)
        yield s
        e = CounterMetricFamily("mcsdns_watch_events_total", "Object events applied, by kind.",
                                labels=["kind"])
        for k, v in app.store.events.items():
            e.add_metric([k], v)
        yield e
        yield GaugeMetricFamily("mcsdns_services", "ServiceImports served.", value=len(app.store.imports))
        yield GaugeMetricFamily("mcsdns_zone_names", "Names in the zone.", value=len(app.zone.names))
        yield GaugeMetricFamily("mcsdns_ready", "1 once every source has synced.",
                                value=1 if app.ready() else 0)


def render_metrics(app: App) -> bytes:
    reg = CollectorRegistry()
    reg.register(AppCollector(app))
    return bytes(generate_latest(reg))
