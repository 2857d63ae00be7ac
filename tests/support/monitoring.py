"""deploy/monitoring in use: its rule files, the kustomize overlays rendered, a real Prometheus
scraping mcsdns with the shipped rules, traffic for it to see, and the CoreDNS binary to compare."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest
import yaml

from support.helpers import REPO, Server, stop_process, tool, wait_for
from support.ports import free_port

MONITORING = REPO / "deploy" / "monitoring"
SERVER_RULES = MONITORING / "rules" / "mcsdns-server.rules.yaml"
CONTROLLER_RULES = MONITORING / "rules" / "mcsdns-controller.rules.yaml"
COMPAT_RULES = MONITORING / "rules" / "coredns-compat.rules.yaml"
RULE_FILES = (SERVER_RULES, CONTROLLER_RULES, COMPAT_RULES)
Obj = dict[str, Any]


def render(overlay: str) -> list[Obj]:
    out = subprocess.run([tool("kubectl"), "kustomize", str(REPO / "deploy" / "overlays" / overlay)],
                         capture_output=True, text=True, check=True).stdout
    return [o for o in yaml.safe_load_all(out) if o]


@contextmanager
def prometheus(tmp: Path, targets: dict[str, int], rule_files: tuple[Path, ...] = RULE_FILES
               ) -> Iterator[Prometheus]:
    """Scrape `targets` (job -> port on 127.0.0.1) with the shipped rules of `rule_files`, the
    alerts' `for:` cut to 0 s (the promtool unit tests hold the real durations; the
    expressions are the shipped ones)."""
    doc = {"groups": groups(*rule_files)}
    for g in doc["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                r["for"] = "0s"
    (tmp / "rules.yaml").write_text(yaml.safe_dump(doc))
    cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
           "rule_files": [str(tmp / "rules.yaml")],
           "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                              for job, port in targets.items()]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    log = tmp / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([tool("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=out, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}")
    try:
        assert wait_for(lambda: _answers(prom)), log.read_text()
        yield prom
    finally:
        stop_process(proc)


@contextmanager
def traffic(srv: Server) -> Iterator[set[str]]:
    """Until the block ends: a query every 20 ms and an AXFR every second (counters must grow
    between scrapes for rate() to see them). Yields the rcodes seen."""
    seen: set[str] = set()
    stop = threading.Event()

    def run() -> None:
        axfr = dns.message.make_query("clusterset.local.", "AXFR")
        n = 0
        while not stop.is_set():
            seen.add(dns.rcode.to_text(srv.query("web.shop.svc.clusterset.local.").rcode()))
            if n % 50 == 0:
                r = dns.query.tcp(axfr, "127.0.0.1", port=srv.port, timeout=3)
                seen.add("AXFR " + dns.rcode.to_text(r.rcode()))
            n += 1
            time.sleep(0.02)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield seen
    finally:
        stop.set()
        t.join()


def coredns_binary(tmp: Path) -> str:
    """CoreDNS from MCSDNS_COREDNS (a binary, or one compressed with xz); skips without it."""
    path = os.environ.get("MCSDNS_COREDNS", "")
    if not path or not Path(path).is_file():
        pytest.skip("no CoreDNS: set MCSDNS_COREDNS to a coredns binary (or coredns.xz) to run this test")
    if not path.endswith(".xz"):
        return path
    out = tmp / "coredns"
    with open(out, "wb") as f:
        subprocess.run(["xz", "-dc", path], stdout=f, check=True)
    out.chmod(0o755)
    return str(out)


def groups(*files: Path) -> list[Obj]:
    return [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]


# --- a real Prometheus --------------------------------------------------------------------------
class Prometheus:
    """Prometheus on 127.0.0.1, scraping and evaluating every second."""

    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.api("alerts")["alerts"] if a["state"] == "firing"}

    def targets_up(self) -> set[str]:
        return {t["labels"]["job"] for t in self.api("targets")["activeTargets"] if t["health"] == "up"}


def _answers(prom: Prometheus) -> bool:
    try:
        prom.api("status/buildinfo")
        return True
    except OSError:
        return False
