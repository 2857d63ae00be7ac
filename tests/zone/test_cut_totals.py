"""A headless service whose per-port SRV RRsets are cut as well as its bare name's: the log
line of `mcsdns serve` states each RRset's true size ("SRV kept of had"), the bare name's being
every SRV record the objects make (it once counted only the port names' records left after
their cut), and "kept" is what a TCP answer holds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from support.helpers import run_server

from mcsdns.sources.manifest import load_file

NS, SVC, CLUSTER = "n" * 40, "s" * 40, "c" * 30
ENDPOINTS, PORTS = 400, 3  # 186-octet targets: about 313 SRV records fit one message, per port 400
NAME = f"{SVC}.{NS}.svc.clusterset.local"


def _manifest() -> str:
    ports = ", ".join(f"{{name: p{i}, protocol: TCP, port: {1000 + i}}}" for i in range(PORTS))
    eps = "\n".join(f'- {{addresses: ["10.7.{i // 250}.{i % 250 + 1}"], hostname: h{i:03d}{"h" * 46}, '
                    "conditions: {ready: true}}" for i in range(ENDPOINTS))
    return f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {SVC}, namespace: {NS}}}
spec: {{type: Headless, ports: [{ports}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {SVC}-a
  namespace: {NS}
  labels:
    multicluster.kubernetes.io/service-name: {SVC}
    multicluster.kubernetes.io/source-cluster: {CLUSTER}
addressType: IPv4
ports: [{ports}]
endpoints:
{eps}
"""


def _srv_records(objs: list[dict[str, Any]]) -> tuple[dict[int, int], int]:
    """From the objects: the SRV records of each named port (by port number), and those of the
    bare name: one per (port number, endpoint name) in one tier."""
    per_port: dict[int, set[str]] = {}
    for o in objs:
        if o["kind"] == "EndpointSlice":
            for p in o["ports"]:
                if p.get("name"):
                    per_port.setdefault(p["port"], set()).update(e["hostname"] for e in o["endpoints"])
    return {p: len(h) for p, h in per_port.items()}, sum(len(h) for h in per_port.values())


def test_the_cut_states_every_record_the_objects_make(tmp_path: Path) -> None:
    mdir = tmp_path / "m"
    mdir.mkdir()
    (mdir / "big.yaml").write_text(_manifest())
    per_port, total = _srv_records(load_file(mdir / "big.yaml"))
    with run_server(["--manifests", str(mdir)], tmp_path, timeout=60) as srv:
        bare = srv.query(NAME, "SRV", tcp=True)
        first = srv.query(f"_p0._tcp.{NAME}", "SRV", tcp=True)
        logs = srv.logs()
    [line] = [ln for ln in logs.splitlines() if f"service {NS}/{SVC}: " in ln and " cut to " in ln]
    cuts = [(int(k), int(n)) for k, n in re.findall(r"SRV (\d+) of (\d+)", line)]
    assert f"{PORTS + 1} RRsets cut" in line and len(cuts) == PORTS + 1, line
    # each port name's, then the bare name's: all its records, not those its port names kept
    assert sorted(n for _, n in cuts[:-1]) == sorted(per_port.values()), line
    assert cuts[-1][1] == total, line
    kept = sum(len(rr) for rr in bare.answer)
    assert (kept, total) == cuts[-1] and 0 < kept < min(per_port.values()), line
    assert sum(len(rr) for rr in first.answer) == cuts[0][0], line
