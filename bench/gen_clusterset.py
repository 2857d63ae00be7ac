"""Generate a benchmark clusterset: manifests, the equivalent zone file, dnsperf query files.

Layout of OUT:
  manifests/bulk-NNNN.json   `kind: List` files, --per-file services each (fast JSON load)
  manifests/bench-h10.json   headless `h10.bench`: exactly 10 ready endpoints (+1 not ready)
  manifests/bench-h100.json  headless `h100.bench`: exactly 100 ready endpoints (+1 not ready)
  manifests/bench-churn.json ClusterSetIP `churn.bench`, alone in a small file (edit it to
                             measure how fast one service's change is visible)
  clusterset.local.zone      what mcsdns answers, as a master file (`mcsdns records` of the
                             manifests: the one definition of the records; knotd and CoreDNS
                             serve it in bench/compare.py)
  queries/<mix>.txt          dnsperf input, one "name TYPE" a line
  meta.json                  counts and sample names

Run `python bench/gen_clusterset.py --help`.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ZONE = "clusterset.local"
TTL = 5
SLICE_MAX = 100  # endpoints per EndpointSlice, as the Kubernetes controller does
V4_VIP = int(ipaddress.IPv4Address("10.96.0.0"))  # ClusterSetIP VIPs
V4_POD = int(ipaddress.IPv4Address("10.128.0.0"))  # endpoint addresses
MIXES = ("a", "h10", "h100", "srv", "nxdomain", "mix")
MIX_DOC = {
    "a": "A for ClusterSetIP services (answer: the VIP)",
    "h10": "A for a headless service with 10 ready endpoints",
    "h100": "A for a headless service with 100 ready endpoints (1.6 kB: TCP)",
    "srv": "SRV _http._tcp.<svc> for ClusterSetIP services",
    "nxdomain": "A for names that do not exist in the zone",
    "mix": "70% A hits, 10% AAAA NODATA, 10% SRV, 10% NXDOMAIN",
}


@dataclass
class Endpoint:
    """One generated endpoint."""

    ip: str
    hostname: str | None
    ready: bool


@dataclass
class Service:
    """One generated service and its endpoints."""

    name: str
    namespace: str
    headless: bool
    vip: str | None
    # cluster -> endpoints in that cluster
    endpoints: dict[str, list[Endpoint]] = field(default_factory=dict)

    @property
    def fqdn(self) -> str:
        return f"{self.name}.{self.namespace}.svc.{ZONE}."

    def ready(self) -> list[tuple[str, Endpoint]]:
        return [(c, e) for c, eps in self.endpoints.items() for e in eps if e.ready]


class Generator:
    """Builds services deterministically from the options."""

    def __init__(self, services: int, endpoints: int, clusters: int, headless: float, seed: int) -> None:
        self.clusters = [f"cluster-{i}" for i in range(clusters)]
        self.rng = random.Random(seed)
        self.next_ip = 0
        self.services: list[Service] = []
        self._build(services, endpoints, headless)

    def _ip(self) -> str:
        self.next_ip += 1
        return str(ipaddress.IPv4Address(V4_POD + self.next_ip))

    def _spread(self, svc: Service, n: int, not_ready: int, named: bool) -> None:
        """n ready + not_ready endpoints round-robin over the clusters."""
        svc.endpoints = {c: [] for c in self.clusters}
        for j in range(n + not_ready):
            host = f"{svc.name}-{j}" if named else None
            svc.endpoints[self.clusters[j % len(self.clusters)]].append(Endpoint(self._ip(), host, j < n))

    def _build(self, n: int, e: int, frac: float) -> None:
        specials = [("h10", 10), ("h100", 100)]
        for name, ready in specials:
            svc = Service(name, "bench", True, None)
            self._spread(svc, ready, 1, named=True)
            self.services.append(svc)
        churn = Service("churn", "bench", False, str(ipaddress.IPv4Address(V4_VIP + 1)))
        self._spread(churn, len(self.clusters), 0, named=False)
        self.services.append(churn)
        used = sum(len(eps) for s in self.services for eps in s.endpoints.values())
        rest = max(0, n - len(self.services))
        left = max(rest, e - used)
        for i in range(rest):
            count = left // (rest - i)  # spread the remainder evenly
            left -= count
            headless = int((i + 1) * frac) > int(i * frac)
            svc = Service(f"svc-{i}", f"ns-{i // 100}", headless,
                          None if headless else str(ipaddress.IPv4Address(V4_VIP + 2 + i)))
            # every 10th endpoint of a service is not ready; headless ones alternate
            # between StatefulSet-style hostnames and hostless (dashed-IP) endpoints
            nr = count // 10 if count > 1 else 0
            self._spread(svc, max(1, count) - nr, nr, named=headless and i % 2 == 0)
            self.services.append(svc)

    # -- manifests -------------------------------------------------------------

    def objects(self, svc: Service) -> list[dict[str, Any]]:
        ports = ([{"name": "http", "protocol": "TCP", "port": 8080}] if svc.headless else
                 [{"name": "http", "protocol": "TCP", "port": 80},
                  {"name": "grpc", "protocol": "TCP", "port": 9090}])
        spec: dict[str, Any] = {"type": "Headless" if svc.headless else "ClusterSetIP", "ports": ports}
        if svc.vip:
            spec["ips"] = [svc.vip]
        out: list[dict[str, Any]] = [{
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": svc.name, "namespace": svc.namespace}, "spec": spec}]
        slice_ports = [{"name": p["name"], "protocol": "TCP", "port": 8080 + k} for k, p in enumerate(ports)]
        for cluster, eps in svc.endpoints.items():
            for k in range(0, len(eps), SLICE_MAX):
                items = []
                for ep in eps[k:k + SLICE_MAX]:
                    d: dict[str, Any] = {"addresses": [ep.ip], "conditions": {"ready": ep.ready}}
                    if ep.hostname:
                        d["hostname"] = ep.hostname
                    items.append(d)
                out.append({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": f"{svc.name}-{cluster}-{k // SLICE_MAX}",
                                 "namespace": svc.namespace,
                                 "labels": {"multicluster.kubernetes.io/service-name": svc.name,
                                            "multicluster.kubernetes.io/source-cluster": cluster}},
                    "addressType": "IPv4", "ports": slice_ports, "endpoints": items})
        return out

    def write_manifests(self, out: Path, per_file: int) -> None:
        out.mkdir(parents=True)
        for svc in self.services:
            if svc.namespace == "bench":
                write_list(out / f"bench-{svc.name}.json", self.objects(svc))
        bulk = [s for s in self.services if s.namespace != "bench"]
        for k in range(0, len(bulk), per_file):
            objs = [o for s in bulk[k:k + per_file] for o in self.objects(s)]
            write_list(out / f"bulk-{k // per_file:04d}.json", objs)

    # -- queries ---------------------------------------------------------------

    def queries(self, lines: int) -> dict[str, list[str]]:
        cips = [s for s in self.services if not s.headless and s.namespace != "bench"]
        small_hl = [s for s in self.services
                    if s.headless and s.namespace != "bench" and 0 < len(s.ready()) <= 25]
        nx = [f"nx-{i}.ns-{i % max(1, len(self.services) // 100)}.svc.{ZONE}." for i in range(len(cips))]
        rng = self.rng

        def pick(names: list[str], qtype: str, n: int) -> list[str]:
            return [f"{rng.choice(names)} {qtype}" for _ in range(n)] if names else []

        a_names = [s.fqdn for s in cips]
        hit_names = a_names + [s.fqdn for s in small_hl]
        srv_names = [f"_http._tcp.{s.fqdn}" for s in cips]
        mix = (pick(hit_names, "A", lines * 7 // 10) + pick(a_names, "AAAA", lines // 10)
               + pick(srv_names, "SRV", lines // 10) + pick(nx, "A", lines - lines * 9 // 10))
        rng.shuffle(mix)
        return {
            "a": pick(a_names, "A", lines),
            "h10": [f"h10.bench.svc.{ZONE}. A"],
            "h100": [f"h100.bench.svc.{ZONE}. A"],
            "srv": pick(srv_names, "SRV", lines),
            "nxdomain": pick(nx, "A", lines),
            "mix": mix,
        }


def write_list(path: Path, items: list[dict[str, Any]]) -> None:
    """Write objects as one `kind: List` JSON file (atomically: write then rename)."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items},
                              separators=(",", ":")))
    tmp.replace(path)


def zone_text(manifests: Path) -> str:
    """The zone mcsdns makes of MANIFESTS (`mcsdns records`), with the TTL the queries expect."""
    done = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--manifests", str(manifests),
                           "--ttl", str(TTL)], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    return done.stdout


def load_zone(path: Path) -> dict[tuple[str, str], set[str]]:
    """(lower-case owner, type) -> set of rdata texts, from a zone file this module wrote."""
    out: dict[tuple[str, str], set[str]] = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("$"):
            continue
        owner, _ttl, _cls, rtype, rdata = line.split("\t", 4)
        out.setdefault((owner.lower(), rtype), set()).add(rdata.lower())
    return out


def generate(out: Path, services: int = 1000, endpoints: int = 10000, clusters: int = 3,
             headless: float = 0.2, per_file: int = 100, lines: int = 20000, seed: int = 1) -> dict[str, Any]:
    """Write the whole OUT directory (replacing it); returns the meta dict."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    gen = Generator(services, endpoints, clusters, headless, seed)
    gen.write_manifests(out / "manifests", per_file)
    (out / f"{ZONE}.zone").write_text(zone_text(out / "manifests"))
    qdir = out / "queries"
    qdir.mkdir()
    for mix, qs in gen.queries(lines).items():
        (qdir / f"{mix}.txt").write_text("\n".join(qs) + "\n")
    n_eps = sum(len(eps) for s in gen.services for eps in s.endpoints.values())
    meta = {
        "services": len(gen.services),
        "headless": sum(s.headless for s in gen.services),
        "endpoints": n_eps,
        "ready_endpoints": sum(len(s.ready()) for s in gen.services),
        "clusters": clusters,
        "manifest_files": len(list((out / "manifests").iterdir())),
        "churn": {"name": f"churn.bench.svc.{ZONE}.", "file": "manifests/bench-churn.json",
                  "vip": gen.services[2].vip},
        "mixes": MIX_DOC,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="output directory (replaced)")
    p.add_argument("--services", type=int, default=1000, help="services in all (default 1000)")
    p.add_argument("--endpoints", type=int, default=10000, help="endpoints in all (default 10000)")
    p.add_argument("--clusters", type=int, default=3, help="source clusters (default 3)")
    p.add_argument("--headless", type=float, default=0.2, help="fraction of headless services (default 0.2)")
    p.add_argument("--per-file", type=int, default=100, help="services per bulk file (default 100)")
    p.add_argument("--lines", type=int, default=20000, help="lines per query file (default 20000)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    meta = generate(a.out, a.services, a.endpoints, a.clusters, a.headless, a.per_file, a.lines, a.seed)
    print(json.dumps({k: v for k, v in meta.items() if k != "mixes"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
