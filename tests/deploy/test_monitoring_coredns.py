"""The CoreDNS side of deploy/monitoring: a server-only install (deploy/overlays/server-monitoring)
on a real Prometheus with the queries of CoreDNS's dashboard and alerts run on the CoreDNS names
recorded from mcsdns's series, and a real CoreDNS (MCSDNS_COREDNS) running the shipped
Corefile snippet, whose `prometheus` line counts the zone under the same labels."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import yaml
from support.helpers import REPO, copy_example, run_server, stop_process, wait_for
from support.monitoring import COMPAT_RULES, coredns_binary, prometheus, render, traffic
from support.ports import free_port

# The panels of CoreDNS's Grafana dashboard and the expressions of its alerts (the
# coredns-mixin's, as kube-prometheus ships them), with their selector set to mcsdns's job.
SEL = 'job="mcsdns",instance=~".*"'
COREDNS_QUERIES = {
    "Up": 'sum(up{job="mcsdns"})',
    "Panics": 'sum(coredns_panics_total{job="mcsdns"})',
    "RPC Rate": f"sum(rate(coredns_dns_responses_total{{{SEL}}}[5m])) by (rcode)",
    "Request duration 99th quantile": "histogram_quantile(0.99, sum(rate(coredns_dns_request_duration_seconds"
                                      f"_bucket{{{SEL}}}[5m])) by (server, zone, le))",
    "Requests (by qtype)": f"sum(rate(coredns_dns_requests_total{{{SEL}}}[5m])) by (type)",
    "Requests (by zone)": f"sum(rate(coredns_dns_requests_total{{{SEL}}}[5m])) by (zone)",
    "Response size 99th": "histogram_quantile(0.99, sum(rate(coredns_dns_response_size_bytes_bucket"
                          f"{{{SEL}}}[5m])) by (server, zone, proto, le))",
    "Response size 50th": "histogram_quantile(0.50, sum(rate(coredns_dns_response_size_bytes_bucket"
                          f"{{{SEL}}}[5m])) by (server, zone, proto, le))",
    "Cached": f"sum(coredns_cache_hits_total{{{SEL}}}) / (sum(coredns_cache_misses_total{{{SEL}}})"
              f" + sum(coredns_cache_hits_total{{{SEL}}}))",
    "Cache hit Rate": f"sum(rate(coredns_cache_hits_total{{{SEL}}}[5m])) by (type)",
    "Cache misses": f"sum(rate(coredns_cache_misses_total{{{SEL}}}[5m]))",
    "Memory": f"process_resident_memory_bytes{{{SEL}}}",
    "CPU usage": f"rate(process_cpu_seconds_total{{{SEL}}}[5m])",
    "instance variable": f"count by (instance) (coredns_build_info{{{SEL}}})",
    "CoreDNSLatencyHigh": 'histogram_quantile(0.99, sum(rate(coredns_dns_request_duration_seconds_bucket'
                          '{job="mcsdns"}[5m])) by(server, zone, le))',
    "CoreDNSErrorsHigh (denominator)": 'sum(rate(coredns_dns_responses_total{job="mcsdns"}[5m]))',
}
# What mcsdns has no counterpart for: these stay empty.
COREDNS_NO_DATA = {
    "forward RPC rate": f"sum(rate(coredns_forward_responses_total{{{SEL}}}[5m])) by (rcode)",
    "forward duration": "histogram_quantile(0.99, sum(rate(coredns_forward_request_duration_seconds_bucket"
                        f"{{{SEL}}}[5m])) by (to, le))",
    "Forward Requests (by to)": f"sum(rate(coredns_forward_requests_total{{{SEL}}}[5m])) by (to)",
    "Request size": "histogram_quantile(0.99, sum(rate(coredns_dns_request_size_bytes_bucket"
                    f"{{{SEL}}}[5m])) by (server, zone, proto, le))",
    "Cache Size": f"sum(coredns_cache_entries{{{SEL}}}) by (type)",
    "Goroutines": f"go_goroutines{{{SEL}}}",
}


def overlay_rules(tmp: Path, overlay: str) -> Path:
    """The rule groups an overlay's PrometheusRules load, as one plain rule file."""
    out = tmp / f"{overlay}.rules.yaml"
    out.write_text(yaml.safe_dump({"groups": [g for o in render(overlay) if o["kind"] == "PrometheusRule"
                                              for g in o["spec"]["groups"]]}))
    return out


def test_real_prometheus_server_only_install_and_coredns_dashboard_queries(tmp_path: Path) -> None:
    """A server-only install (deploy/overlays/server-monitoring's rules) on a real Prometheus:
    no controller alert is loaded or fires with no controller anywhere, and the CoreDNS
    dashboard's and alerts' queries find mcsdns's answers under the CoreDNS names."""
    rules_file = overlay_rules(tmp_path, "server-monitoring")
    with run_server(["--manifests", str(copy_example(tmp_path / "m"))], tmp_path) as srv, \
            prometheus(tmp_path, {"mcsdns": srv.http_port}, (rules_file,)) as prom, traffic(srv) as rcodes:
        assert wait_for(lambda: prom.api("query", query=COREDNS_QUERIES["Requests (by qtype)"])["result"])
        time.sleep(3)
        loaded = {r["name"] for g in prom.api("rules")["groups"] for r in g["rules"]}
        assert "MCSDNSAbsent" in loaded and "coredns_dns_responses_total" in loaded
        assert not {n for n in loaded if "Controller" in n}, loaded
        assert not {a for a in prom.firing() if "Controller" in a}
        assert not prom.api("query", query='absent(up{job="mcsdns"} == 1)')["result"]  # CoreDNSDown quiet
        blank = [k for k, q in COREDNS_QUERIES.items() if not prom.api("query", query=q)["result"]]
        assert not blank, f"CoreDNS queries without data: {blank}"
        assert not [k for k, q in COREDNS_NO_DATA.items() if prom.api("query", query=q)["result"]]
        zones = prom.api("query", query=COREDNS_QUERIES["Requests (by zone)"])["result"]
        assert [z["metric"]["zone"] for z in zones] == ["clusterset.local."]
        # the requests recorded are the answers mcsdns counted, under the CoreDNS names
        both = prom.api("query", query='sum(coredns_dns_requests_total{job="mcsdns"}) - '
                                       'sum(mcsdns_dns_responses_total{job="mcsdns"})')["result"]
        assert both and abs(float(both[0]["value"][1])) < 200
    assert "NOERROR" in rcodes


@contextmanager
def coredns(tmp: Path, mcsdns_port: int) -> Iterator[tuple[int, int]]:
    """CoreDNS running deploy/coredns/Corefile.snippet (ports made free, the Service IP the local
    mcsdns), once it answers: (its DNS port, its metrics port)."""
    binary = coredns_binary(tmp)
    port, mport = free_port(), free_port()
    snippet = (REPO / "deploy" / "coredns" / "Corefile.snippet").read_text()
    assert "    prometheus :9153\n" in snippet
    corefile = (snippet.replace("clusterset.local:53", f"clusterset.local:{port}")
                .replace("MCSDNS_SERVICE_IP", f"127.0.0.1:{mcsdns_port}")
                .replace("prometheus :9153", f"prometheus 127.0.0.1:{mport}"))
    (tmp / "Corefile").write_text(corefile)
    with open(tmp / "coredns.log", "wb") as log:
        proc = subprocess.Popen([binary, "-conf", str(tmp / "Corefile")], stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp)
    try:
        q = dns.message.make_query("api.shop.svc.clusterset.local.", "A")
        assert wait_for(lambda: _answer(q, port) == dns.rcode.NOERROR), (tmp / "coredns.log").read_text()
        yield port, mport
    finally:
        stop_process(proc)


def test_real_coredns_with_the_snippet_counts_the_zone_as_the_compat_rules_name_it(tmp_path: Path) -> None:
    """CoreDNS's `prometheus` line exports the zone's queries, and on one Prometheus CoreDNS's
    own series (job kube-dns) and mcsdns's recorded ones (job mcsdns) carry the same zone."""
    with run_server(["--manifests", str(copy_example(tmp_path / "m"))], tmp_path) as srv, \
            coredns(tmp_path, srv.port) as (port, mport):
        q = dns.message.make_query("api.shop.svc.clusterset.local.", "A")
        query = 'sum by (job, zone) (rate(coredns_dns_requests_total{job=~"kube-dns|mcsdns"}[5m]))'

        def both() -> set[tuple[str, str]]:
            _answer(q, port)  # CoreDNS's counter grows too
            got = prom.api("query", query=query)["result"]
            return {(r["metric"]["job"], r["metric"]["zone"]) for r in got}

        targets = {"mcsdns": srv.http_port, "kube-dns": mport}
        with prometheus(tmp_path, targets, (COMPAT_RULES,)) as prom, traffic(srv):
            want = {("kube-dns", "clusterset.local."), ("mcsdns", "clusterset.local.")}
            assert wait_for(lambda: both() == want, interval=0.5), both()


ZONE = 'coredns_dns_requests_total{zone="clusterset.local."'
SERIES = {"client": ZONE + ',server!="mcsdns"}', "mcsdns": ZONE + ',server="mcsdns"}', "all": ZONE + "}",
          "misses": 'coredns_cache_misses_total{job="kube-dns"}'}


def test_with_coredns_caching_in_front_each_client_query_is_counted_once(tmp_path: Path) -> None:
    """1,200 client queries through CoreDNS (cache 5) to mcsdns: CoreDNS's series count 1,200,
    mcsdns's (server="mcsdns") CoreDNS's cache misses; the zone's client count takes one source."""
    def totals() -> dict[str, float]:
        out = {}
        for k, e in SERIES.items():
            got = prom.api("query", query=f"sum({e})")["result"]
            out[k] = float(got[0]["value"][1]) if got else 0.0
        return out

    names = [dns.message.make_query(f"{n}.shop.svc.clusterset.local.", "A") for n in ("api", "web", "nope")]
    with run_server(["--manifests", str(copy_example(tmp_path / "m"))], tmp_path) as srv, \
            coredns(tmp_path, srv.port) as (port, mport), \
            prometheus(tmp_path, {"mcsdns": srv.http_port, "kube-dns": mport}, (COMPAT_RULES,)) as prom:
        assert wait_for(lambda: totals()["mcsdns"] > 0)
        time.sleep(2)
        base = totals()
        for i in range(1200):
            assert _answer(names[i % 3], port) is not None
        assert wait_for(lambda: totals()["client"] - base["client"] == 1200, interval=0.5)
        got: dict[str, float] = {}

        def scraped() -> bool:  # mcsdns scraped after the last query too: its count reached the misses
            got.update({k: v - base[k] for k, v in totals().items()})
            return got["mcsdns"] == got["misses"]
        assert wait_for(scraped, interval=0.5), got
        print("1200 client queries through CoreDNS:", got)
        assert got["client"] == 1200 and 0 < got["mcsdns"] == got["misses"] < 1200
        assert got["all"] == 1200 + got["mcsdns"]  # both sources summed: each miss twice
        assert prom.api("query", query="clusterset:dns_requests:rate5m")["result"]


def _answer(q: dns.message.Message, port: int) -> int | None:
    try:
        return int(dns.query.udp(q, "127.0.0.1", port=port, timeout=1).rcode())
    except (OSError, dns.exception.Timeout):
        return None
