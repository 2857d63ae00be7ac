"""`mcsdns show` on three REAL kube-apiservers (realk8s.sh, $MCSDNS_REALK8S; skipped without
it), after one pass of the real controller: a exports web and c exports it on another port
(a port conflict); every member imports it with the ClusterSetIP its own API server allocated
to the derived Service; each member's client certificate expiry is shown as openssl reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.helpers import REPO
from support.real_fleet import MCS, Real, service, start_fleet
from support.realk8s import SKIP_REASON, script

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
NAMES = ("a", "b", "c")


@pytest.fixture
def reals3(tmp_path: Path) -> Iterator[list[Real]]:
    out = start_fleet(tmp_path, [f"mcsdns-show-{os.getpid()}-{name}" for name in NAMES])
    try:
        yield out
    finally:
        for r in out:
            r.down()


def exported(r: Real, port: int, ip: str) -> None:
    """Service ns/web (port `port`) with one ready endpoint, exported."""
    if port == 80:
        service(r, "web")
    else:
        r.create("/api/v1/namespaces/ns/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}]}})
    r.create("/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]})
    r.create(f"/apis/{MCS}/namespaces/ns/serviceexports", {
        "apiVersion": MCS, "kind": "ServiceExport", "metadata": {"name": "web", "namespace": "ns"}})


def not_after(r: Real) -> str:
    """The admin client certificate's notAfter, as openssl reads it: 2036-05-01T10:00:00Z."""
    crt = r.k8s.kubeconfig.parent / "pki" / "admin.crt"
    out = subprocess.run(["openssl", "x509", "-enddate", "-noout", "-in", str(crt)],
                         capture_output=True, text=True, check=True).stdout.strip().removeprefix("notAfter=")
    return datetime.strptime(out, "%b %d %H:%M:%S %Y %Z").replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_show_on_three_real_apiservers(reals3: list[Real]) -> None:
    for r in reals3:
        r.create("/apis/about.k8s.io/v1alpha1/clusterproperties", {
            "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": f"id-{r.k8s.name[-1]}"}})
        r.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    a, b, c = reals3
    exported(a, 80, "10.9.0.1")
    exported(c, 81, "10.9.0.3")
    members = [f"--cluster={n}={r.kubeconfig}@{r.k8s.name}-cert" for n, r in zip(NAMES, reals3, strict=True)]
    ctl = subprocess.run([sys.executable, "-m", "mcsdns", "controller", *members, "--once"],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    assert ctl.returncode == 0, ctl.stderr[-3000:]
    out = subprocess.run([sys.executable, "-m", "mcsdns", "show", *members, "--json"], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    inv: dict[str, Any] = json.loads(out.stdout)
    (web,) = inv["services"]
    assert (web["namespace"], web["name"], web["type"]) == ("ns", "web", "ClusterSetIP")
    assert web["exported_by"] == ["a", "c"] and web["imported_in"] == ["a", "b", "c"]
    for n, r in zip(NAMES, reals3, strict=True):
        si = r.get(f"/apis/{MCS}/namespaces/ns/serviceimports/web") or {}
        derived = si["metadata"]["annotations"]["multicluster.kubernetes.io/derived-service"]
        svc = r.get(f"/api/v1/namespaces/ns/services/{derived}") or {}
        assert web["ips"][n] == svc["spec"]["clusterIPs"], (n, web["ips"])  # the real allocator's
    assert sorted(x["member"] for x in web["conflicts"]) == ["a", "c"]
    assert all(x["message"].startswith("Conflict=True (PortConflict)") for x in web["conflicts"]), web
    for m, r in zip(inv["members"], reals3, strict=True):
        assert (m["reachable"], m["state"], m["version"]) == (True, "ready", "v1.36.2"), m
        assert m["cluster_id"] == f"id-{m['name']}" and m["server"] == r.k8s.url
        assert m["credential"].startswith(f"expires at {not_after(r)}, in 36"), m
    table = subprocess.run([sys.executable, "-m", "mcsdns", "show", *members], capture_output=True,
                           text=True, timeout=60, cwd=REPO).stdout
    print(table)
    row = next(line for line in table.splitlines() if line.startswith("ns/web "))
    assert row.split()[1:5] == ["ClusterSetIP", "a,", "c", "a,"], row
    assert "Conflict=True (PortConflict) in a, c" in row
    assert sum(line.split()[3:4] == ["ready"] for line in table.splitlines()) == 3
