"""What the controller tests pass to and read from a running controller: its arguments (derived
mode, or --clusterset-cidr), the derived Services and imported slices it writes into a member,
its answers, its writes per member (its metrics), and an exported Service to start from."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dns.rcode
import dns.rdatatype

from support.controller_env import Cluster

# Per importing member and service: the ServiceImport (created with the rest's owner uid unknown),
# in derived mode its derived Service (owned by the import; its ClusterIP is the import's ips), the
# import's spec again with those ips, its status (a subresource: a create drops status), and the
# imported EndpointSlice (owned by the import).
DERIVED_WRITES = {("serviceimports", "create"): 1, ("services", "create"): 1, ("serviceimports", "update"): 1,
           ("serviceimports/status", "update"): 1, ("endpointslices", "create"): 1}
SVC_LABEL = "kubernetes.io/service-name"
MCS_LABEL = "multicluster.kubernetes.io/service-name"
CIDR = "10.77.0.0/24"
Ports = Sequence[tuple[str, int, str]]


def with_status(si: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ServiceImport once the controller has written its status (a second request
    after the create), else None."""
    return si if si is not None and si.get("status") else None


def cidr_args_for(*clusters: Cluster, ttl: float = 60, extra: tuple[str, ...] = ()) -> list[str]:
    out = []
    for c in clusters:
        out += ["--cluster", f"{c.name}={c.kubeconfig}"]
    return [*out, "--clusterset-cidr", CIDR, "--endpoint-ttl", str(ttl), "--resync", "1", *extra]


def a_records(srv: object, name: str) -> set[str]:
    r = srv.query(name, "A")  # type: ignore[attr-defined]
    if r.rcode() != dns.rcode.NOERROR:
        return set()
    return {rd.address for rrset in r.answer if rrset.rdtype == dns.rdatatype.A for rd in rrset}


def derived(ns: str, name: str) -> str:
    """The mcs-api name: derived- + base32hex(sha256("ns/name")), lower case, 10 characters."""
    digest = hashlib.sha256(f"{ns}/{name}".encode()).digest()
    return "derived-" + base64.b32hexencode(digest).decode().lower()[:10]


def args_for(*clusters: Cluster, ttl: float = 60, extra: tuple[str, ...] = ()) -> list[str]:
    out = []
    for c in clusters:
        out += ["--cluster", f"{c.name}={c.kubeconfig}"]
    return [*out, "--endpoint-ttl", str(ttl), "--resync", "600", *extra]


def svc_of(cl: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    return cl.api.get("Service", ns, derived(ns, name))


def slices_of(cl: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    """Our imported slices for a service, read from the server's state (no HTTP request)."""
    return [s for s in cl.api.objects("EndpointSlice") if s["metadata"]["namespace"] == ns
            and (s["metadata"].get("labels") or {}).get(MCS_LABEL) == name]


def source_slice(ns: str, svc: str, name: str, ips: list[str], ready: bool = True) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {SVC_LABEL: svc, "endpointslice.kubernetes.io/managed-by":
                                    "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip in ips]}


def export(cl: Cluster, ports: Ports, target: int, ip: str) -> None:
    """Service ns/api with `ports`, its EndpointSlice (each port's target = port + `target`), exported."""
    cl.kube.namespace("ns")
    cl.kube.service("ns", "api", ports=ports)
    cl.kube.create("/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"api-{cl.name}", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "api",
                                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4", "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": n, "port": p + target, "protocol": pr} for n, p, pr in ports]})
    cl.kube.export("ns", "api")


def mount(d: Path, files: dict[str, bytes]) -> None:
    """Lay `files` out in `d` as the kubelet updates a mounted Secret (AtomicWriter): a new
    timestamped directory, `..data` renamed onto a symlink to it, a symlink per key."""
    d.mkdir(exist_ok=True)
    ts = d / f"..{time.time_ns()}"
    ts.mkdir()
    for k, v in files.items():
        (ts / k).write_bytes(v)
    old = os.readlink(d / "..data") if (d / "..data").is_symlink() else None
    (d / "..data_tmp").symlink_to(ts.name)
    os.rename(d / "..data_tmp", d / "..data")
    for k in files:
        if not (d / k).is_symlink():
            (d / k).symlink_to(f"..data/{k}")
    for link in d.iterdir():
        if not link.name.startswith(".") and link.name not in files:
            link.unlink()
    if old is not None:
        shutil.rmtree(d / old)


def writes_by_member(metrics: dict[str, float]) -> dict[str, Counter[tuple[str, str]]]:
    """mcsdns_controller_writes_total without Leases and Events: member -> (resource, verb) -> count."""
    out: dict[str, Counter[tuple[str, str]]] = {}
    for sample, v in metrics.items():
        if not sample.startswith("mcsdns_controller_writes_total{"):
            continue
        lb = dict(part.split("=", 1) for part in sample[sample.index("{") + 1:-1].split(","))
        lb = {k: val.strip('"') for k, val in lb.items()}
        if lb["resource"] not in ("leases", "events"):
            out.setdefault(lb["member"], Counter())[(lb["resource"], lb["verb"])] += int(v)
    return out


# --- the controller --------------------------------------------------------------------------
def lease_renew_time(cl: Cluster, member: str) -> float:
    lease = cl.api.get("Lease", "kube-system", f"mcsdns-member-{member}")
    assert lease is not None
    ts = lease["spec"]["renewTime"]
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def sources(cl: Cluster) -> set[str]:
    return cl.kube.source_clusters("shop", "web")
