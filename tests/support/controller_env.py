"""Test helpers for `mcsdns controller`: member clusters on test API servers, the controller process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fakeapi import KubeAPI

from mcsdns.controller.member.client import Member
from mcsdns.kube.apiclient.errors import NotFound, Unreachable
from support.helpers import LIVENESS, REPO, liveness, stop_process
from support.ports import free_port

SLICES = "/apis/discovery.k8s.io/v1"
IDS = (("a", "east"), ("b", "west"), ("c", "north"))  # member names and cluster IDs


class Kube:
    """Fixture writes and reads against one member's API server, through the real kubernetes client."""

    def __init__(self, kubeconfig: str | Path, mcs_version: str = "v1beta1") -> None:
        self.m = Member("fixture", str(kubeconfig))
        self.m.connect()
        self.mcs = f"/apis/multicluster.x-k8s.io/{mcs_version}"
        self.mcs_api_version = f"multicluster.x-k8s.io/{mcs_version}"

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.m.request("POST", path, body=obj)
        return out

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self.m.get(path)
        except NotFound:
            return None
        return out

    def delete(self, path: str) -> None:
        self.m.request("DELETE", path)

    def items(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        return self.m.items(path, selector)

    # --- fixtures ---------------------------------------------------------------------
    def cluster_id(self, value: str, name: str = "cluster.clusterset.k8s.io") -> None:
        self.create("/apis/about.k8s.io/v1alpha1/clusterproperties",
                    {"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                     "metadata": {"name": name}, "spec": {"value": value}})

    def namespace(self, ns: str) -> None:
        self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def service(self, ns: str, name: str, ports: Sequence[tuple[str, int, str]] = (("http", 80, "TCP"),),
                headless: bool = False, type_: str = "ClusterIP", affinity: str = "None",
                dual_stack: bool = False) -> None:
        spec: dict[str, Any] = {"type": type_, "sessionAffinity": affinity,
                                "ports": [{"name": n, "port": p, "protocol": pr} for n, p, pr in ports]}
        if dual_stack:
            spec["ipFamilyPolicy"] = "PreferDualStack"

        if type_ == "ExternalName":
            spec = {"type": type_, "externalName": "example.invalid"}
        elif headless:
            spec["clusterIP"] = "None"
        self.create(f"/api/v1/namespaces/{ns}/services",
                    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                     "spec": spec})

    def endpoints(self, ns: str, svc: str, name: str, addrs: Sequence[tuple[str, str | None]],
                  port: tuple[str, int] = ("http", 8080), more_ports: Sequence[tuple[str, int]] = ()) -> None:
        """A Service's own EndpointSlice (as the EndpointSlice controller would write it), with
        `port` and `more_ports` (TCP)."""
        eps = []
        for ip, host in addrs:
            e: dict[str, Any] = {"addresses": [ip], "conditions": {"ready": True}}
            if host:
                e["hostname"] = host
            eps.append(e)
        self.create(f"{SLICES}/namespaces/{ns}/endpointslices",
                    {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": name, "namespace": ns,
                                  "labels": {"kubernetes.io/service-name": svc,
                                             "endpointslice.kubernetes.io/managed-by":
                                                 "endpointslice-controller.k8s.io"}},
                     "addressType": "IPv4", "endpoints": eps,
                     "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in (port, *more_ports)]})

    def export(self, ns: str, name: str) -> None:
        self.create(f"{self.mcs}/namespaces/{ns}/serviceexports",
                    {"apiVersion": self.mcs_api_version, "kind": "ServiceExport",
                     "metadata": {"name": name, "namespace": ns}})

    def unexport(self, ns: str, name: str) -> None:
        self.delete(f"{self.mcs}/namespaces/{ns}/serviceexports/{name}")

    def serviceimport(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.get(f"{self.mcs}/namespaces/{ns}/serviceimports/{name}")

    def imported(self, ns: str, name: str) -> dict[str, Any]:
        """The ServiceImport, which must exist."""
        si = self.serviceimport(ns, name)
        assert si is not None, f"no ServiceImport {ns}/{name}"
        return si

    def imported_slices(self, ns: str, svc: str) -> list[dict[str, Any]]:
        return self.items(f"{SLICES}/namespaces/{ns}/endpointslices",
                          f"multicluster.kubernetes.io/service-name={svc}")

    def source_clusters(self, ns: str, svc: str) -> set[str]:
        return {s["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"]
                for s in self.imported_slices(ns, svc)}

    def conditions(self, ns: str, name: str) -> dict[str, dict[str, Any]]:
        se = self.get(f"{self.mcs}/namespaces/{ns}/serviceexports/{name}") or {}
        return {c["type"]: c for c in (se.get("status") or {}).get("conditions") or []}


def shop(exporter: Cluster, clusters: Sequence[Cluster], web: Sequence[str] = ("10.1.0.5", "10.1.0.6"),
         db: bool = True) -> None:
    """The shop example: namespace shop in `clusters`; `exporter` exports web (ClusterSetIP,
    endpoints `web`) and, with `db`, db (headless: db-0 10.1.0.7, db-1 10.1.0.8, port sql 5432)."""
    for cl in clusters:
        cl.kube.namespace("shop")
    k = exporter.kube
    k.service("shop", "web")
    k.endpoints("shop", "web", "web-abc", [(ip, None) for ip in web])
    k.export("shop", "web")
    if db:
        k.service("shop", "db", headless=True, ports=(("sql", 5432, "TCP"),))
        k.endpoints("shop", "db", "db-abc", [("10.1.0.7", "db-0"), ("10.1.0.8", "db-1")], port=("sql", 5432))
        k.export("shop", "db")


class Controller:
    """A running `mcsdns controller` process."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, health: int) -> None:
        self.proc, self.log, self.health = proc, log, health

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def logged(self, text: str, count: int = 1) -> str:
        """Wait until `text` is in the log `count` times or more; return the log. A line is written
        after what it tells of (a Lease deleted, then "deleted"), so a test that saw the effect waits."""
        def enough() -> str:
            t = self.logs()
            return t if t.count(text) >= count else ""
        try:
            return str(eventually(enough, what=f"{text!r} logged {count} time(s)"))
        except AssertionError as e:
            raise AssertionError(f"{e}; the log ends:\n{self.logs()[-3000:]}") from None

    def metrics(self) -> dict[str, float]:
        """/metrics samples: `name{labels}` -> value."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/metrics", timeout=2) as r:
            text = r.read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line and not line.startswith("#")}

    def ready(self) -> bool:
        """/ready answered 200 (the first full pass is done)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@contextmanager
def run_controller(args: Sequence[str], tmp: Path, name: str = "controller") -> Iterator[Controller]:
    """Run `python -m mcsdns.controller ARGS` until the block ends (SIGTERM)."""
    health = free_port()
    log = tmp / f"{name}-{health}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "mcsdns.controller", "--health", f"127.0.0.1:{health}", *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        yield Controller(proc, log, health)
    finally:
        stop_process(proc)


def eventually(pred: Any, timeout: float = LIVENESS, what: str = "condition") -> Any:
    """Poll until `pred()` is truthy; return it, or fail with `what` after `timeout` seconds, never
    fewer than LIVENESS (as `wait_for`: a liveness check, not a bound on speed)."""
    deadline = time.monotonic() + liveness(timeout)
    while True:
        try:
            v = pred()
        except Unreachable:  # an injected API error hit the fixture's own read
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Cluster:
    """One member cluster: a test API server (tests/fakeapi/), its kubeconfig, its cluster ID."""

    def __init__(self, name: str, cluster_id: str, tmp: Path, mcs_version: str = "v1beta1",
                 service_cidrs: tuple[str, ...] = ("10.96.0.0/16", "fd00:10:96::/112")) -> None:
        self.name, self.cluster_id = name, cluster_id
        groups: dict[str, tuple[str, ...]] | None = (
            None if mcs_version == "v1beta1" else {"multicluster.x-k8s.io": (mcs_version,)})
        self.api = KubeAPI(groups=groups, service_cidrs=service_cidrs)
        self.api.start()
        self.kubeconfig = self.api.write_kubeconfig(tmp / f"{name}.kubeconfig", name)
        self.kube = Kube(self.kubeconfig, mcs_version)
        self.kube.cluster_id(cluster_id)

    def writes(self) -> int:
        """Write requests the API server has answered so far, not counting Lease renewals
        (leader election and the members' Endpoint TTL Leases are renewed by design) and
        Events (a report about the objects, not one of them)."""
        return sum(1 for method, path in list(self.api.requests)
                   if method in WRITES and "/leases" not in path and "/events" not in path)

    def stop(self) -> None:
        self.api.stop()

    def start(self) -> None:
        """Serve the same objects again, on the same port."""
        self.api.start()

    def close(self) -> None:
        self.api.stop()
