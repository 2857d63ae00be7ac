"""The per-cluster topology (`mcsdns controller --local NAME`) against the central one, on the
same three test API servers: from the same inputs both make the same ServiceImports (ports,
type, clusters), the same imported EndpointSlices and the same export conditions; each --local
controller writes into its own cluster only and leaves the others unwritten. Bad flag
combinations are refused with one line (exit 2). The convergence times and the watches each API
server serves are printed for the docs."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from support.controller_env import IDS, Cluster, Controller, eventually, run_controller
from support.helpers import REPO

MANAGED = "mcsdns-controller"
SLICE_MANAGER = "endpointslice.kubernetes.io/managed-by"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
Obj = dict[str, Any]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Cluster, Cluster, Cluster]]:
    cls = [Cluster(name, cid, tmp_path) for name, cid in IDS]
    try:
        yield cls[0], cls[1], cls[2]
    finally:
        for c in cls:
            c.close()


def _inputs(a: Cluster, b: Cluster, c: Cluster) -> None:
    """shop/web from a and c; shop/db headless from a; shop/api from b and c with a port
    conflict; other/x from b (namespace other in a and b only); shop/ghost exported in c
    with no Service."""
    for cl in (a, b, c):
        cl.kube.namespace("shop")
    for cl in (a, b):
        cl.kube.namespace("other")
    for cl, ips in ((a, ["10.1.0.5", "10.1.0.6"]), (c, ["10.3.0.1"])):
        cl.kube.service("shop", "web")
        cl.kube.endpoints("shop", "web", "web-0", [(ip, None) for ip in ips])
        cl.kube.export("shop", "web")
    a.kube.service("shop", "db", headless=True, ports=(("sql", 5432, "TCP"),))
    a.kube.endpoints("shop", "db", "db-0", [("10.1.0.7", "db-0"), ("10.1.0.8", "db-1")], port=("sql", 5432))
    a.kube.export("shop", "db")
    for cl, port, ip in ((b, 80, "10.2.0.1"), (c, 8080, "10.3.0.2")):
        cl.kube.service("shop", "api", ports=(("http", port, "TCP"),))
        cl.kube.endpoints("shop", "api", "api-0", [(ip, None)])
        cl.kube.export("shop", "api")
    b.kube.service("other", "x")
    b.kube.endpoints("other", "x", "x-0", [("10.2.0.9", None)])
    b.kube.export("other", "x")
    c.kube.export("shop", "ghost")


def _ours(o: Obj) -> bool:
    lb = o["metadata"].get("labels") or {}
    return MANAGED in (lb.get("app.kubernetes.io/managed-by"), lb.get(SLICE_MANAGER))


def snapshot(cl: Cluster) -> dict[str, Any]:
    """What the controller made in `cl`, without what may differ between runs (names of
    slices, resourceVersions, the derived Services' ClusterIPs)."""
    imports = {}
    for si in cl.api.objects("ServiceImport"):
        if _ours(si):
            md, spec = si["metadata"], si["spec"]
            ports = sorted((p.get("name"), p["port"], p["protocol"]) for p in spec.get("ports") or [])
            clusters = sorted(x["cluster"] for x in (si.get("status") or {}).get("clusters") or [])
            affinity = spec.get("sessionAffinity")
            imports[(md["namespace"], md["name"])] = (spec["type"], ports, clusters, affinity)
    slices: dict[tuple[str, ...], list[Any]] = {}
    for s in cl.api.objects("EndpointSlice"):
        if _ours(s):
            lb = s["metadata"]["labels"]
            k = (s["metadata"]["namespace"], lb["multicluster.kubernetes.io/service-name"],
                 lb["multicluster.kubernetes.io/source-cluster"])
            eps = sorted((tuple(e["addresses"]), (e.get("conditions") or {}).get("ready"), e.get("hostname"))
                         for e in s.get("endpoints") or [])
            ports = sorted((p.get("name"), p.get("port"), p.get("protocol")) for p in s.get("ports") or [])
            slices.setdefault(k, []).append((eps, ports))
    derived = sorted((s["metadata"]["namespace"], s["metadata"]["name"],
                      sorted((p.get("name"), p["port"]) for p in s["spec"].get("ports") or []))
                     for s in cl.api.objects("Service") if _ours(s))
    conditions = {}
    for se in cl.api.objects("ServiceExport"):
        conds = (se.get("status") or {}).get("conditions") or []
        conditions[(se["metadata"]["namespace"], se["metadata"]["name"])] = sorted(
            (x["type"], x["status"], x.get("reason")) for x in conds)
    return {"imports": imports, "slices": {k: sorted(v) for k, v in slices.items()}, "derived": derived,
            "conditions": conditions}


def _ips_are_the_derived_services(cl: Cluster) -> None:
    """Derived mode: each ClusterSetIP import's ips are its own cluster's derived Service's IPs."""
    label = "multicluster.kubernetes.io/service-name"
    services = {(s["metadata"]["namespace"], s["metadata"]["labels"].get(label)): s["spec"]["clusterIPs"]
                for s in cl.api.objects("Service") if _ours(s)}
    for si in cl.api.objects("ServiceImport"):
        if _ours(si) and si["spec"]["type"] == "ClusterSetIP":
            md = si["metadata"]
            assert si["spec"]["ips"] == services[(md["namespace"], md["name"])], (cl.name, md["name"])


def _purge(cl: Cluster) -> None:
    """Remove what a controller made (imports, derived Services, slices, Leases, export status)."""
    for kind in ("ServiceImport", "Service", "EndpointSlice"):
        for o in cl.api.objects(kind):
            if _ours(o):
                cl.api.delete(kind, o["metadata"]["namespace"], o["metadata"]["name"])
    for o in cl.api.objects("Lease"):
        cl.api.delete("Lease", o["metadata"]["namespace"], o["metadata"]["name"])
    for se in cl.api.objects("ServiceExport"):
        se.pop("status", None)
        cl.api.put(se)


def _watches(cl: Cluster, since: int) -> int:
    return sum(1 for m, u in list(cl.api.requests)[since:]
               if m == "GET" and ("watch=1" in u or "watch=true" in u))


def _converge(want: Callable[[], bool], what: str) -> float:
    t0 = time.monotonic()
    eventually(want, timeout=90, what=what)
    return time.monotonic() - t0


def _change(a: Cluster, fleet: tuple[Cluster, ...], i: int) -> float:
    """A new endpoint of a's shop/web; seconds until every member imports it."""
    ip = f"10.1.9.{i}"
    t0 = time.monotonic()
    a.kube.endpoints("shop", "web", f"web-n{i}", [(ip, None)])
    eventually(lambda: all(ip in {x for s in cl.kube.imported_slices("shop", "web")
                                  for e in s["endpoints"] for x in e["addresses"]} for cl in fleet),
               what=f"{ip} in every member")
    return time.monotonic() - t0


def _central_args(fleet: tuple[Cluster, ...]) -> list[str]:
    return [x for cl in fleet for x in ("--cluster", f"{cl.name}={cl.kubeconfig}")] + ["--resync", "600"]


def test_both_topologies_make_the_same_imports_and_slices(
        fleet: tuple[Cluster, Cluster, Cluster], tmp_path: Path) -> None:
    a, b, c = fleet
    _inputs(a, b, c)
    marks = [len(cl.api.requests) for cl in fleet]
    with run_controller(_central_args(fleet), tmp_path, "central") as ctl:
        central_took = _converge(ctl.ready, "central first sync")
        central = {cl.name: snapshot(cl) for cl in fleet}
        change_central = _change(a, fleet, 1)
        central = {cl.name: snapshot(cl) for cl in fleet}
        central_watches = {cl.name: _watches(cl, m) for cl, m in zip(fleet, marks, strict=True)}
    for cl in fleet:
        _ips_are_the_derived_services(cl)
        _purge(cl)
    assert central["b"]["imports"][("shop", "web")][2] == ["east", "north"]  # the inputs made something
    assert ("other", "x") not in central["c"]["imports"]
    assert ("Conflict", "True", "PortConflict") in central["b"]["conditions"][("shop", "api")]
    assert ("Valid", "False", "NoService") in central["c"]["conditions"][("shop", "ghost")]
    marks = [len(cl.api.requests) for cl in fleet]
    with ExitStack() as stack:
        ctls: list[Controller] = []
        t0 = time.monotonic()
        for cl in fleet:
            args = [*_central_args(fleet), "--local", cl.name, "--leader-elect",
                    "--lease-namespace", "default"]
            ctls.append(stack.enter_context(run_controller(args, tmp_path, f"local-{cl.name}")))
        eventually(lambda: all(x.ready() for x in ctls), timeout=90, what="every --local controller ready")
        eventually(lambda: {cl.name: snapshot(cl) for cl in fleet} == central,
                   what="the same imports, slices and conditions as the central topology")
        local_took = time.monotonic() - t0
        change_local = _change(a, fleet, 2)
        local_watches = {cl.name: _watches(cl, m) for cl, m in zip(fleet, marks, strict=True)}
        for x, cl in zip(ctls, fleet, strict=True):
            m = x.metrics()
            written = {k: v for k, v in m.items() if k.startswith("mcsdns_controller_api_requests_total")
                       and any(f'method="{w}"' in k for w in WRITES) and v}
            assert written and all(f'member="{cl.name}"' in k for k in written), (cl.name, written)
            assert m['mcsdns_controller_leader'] == 1
    for cl in fleet:
        _ips_are_the_derived_services(cl)
    print(f"first sync to the same state: central {central_took:.2f} s, three --local {local_took:.2f} s; "
          f"one endpoint change a -> every member: central {change_central:.2f} s, "
          f"--local {change_local:.2f} s")
    print(f"watches opened per API server: central {central_watches}, --local {local_watches}")
    # one controller: its 6 watches in each; --local: each cluster's own 6, plus 3 from each other one
    assert all(v >= 6 for v in central_watches.values())
    assert all(local_watches[k] >= central_watches[k] + 6 for k in local_watches)


def _metrics(ctl: Controller) -> dict[str, float]:
    """/metrics, or nothing while it does not answer yet."""
    try:
        return ctl.metrics()
    except OSError:
        return {}


def _refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns.controller", "--once", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=30)


def test_bad_local_flags_are_one_line_and_exit_2(tmp_path: Path) -> None:
    kc = tmp_path / "x.kubeconfig"
    kc.write_text("")
    base = ["--cluster", f"a={kc}", "--cluster", f"b={kc}"]
    for extra, says in ((["--local", "z"], "--local z: expected one of the --cluster names ['a', 'b']"),
                        (["--local", "a", "--clusterset-cidr", "242.1.0.0/16"], "--clusterset-ip cidr: not "
                         "with --local"),
                        (["--local", "a", "--clusterset-ip", "cidr"], "not with --local"),
                        (["--local", "a", "--lease-cluster", "b"], "--lease-cluster b: with --local a")):
        r = _refused(*base, *extra)
        assert r.returncode == 2, (extra, r.stderr)
        assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_central_controller_writing_into_the_local_ones_cluster_is_noticed_not_fought(
        fleet: tuple[Cluster, Cluster, Cluster], tmp_path: Path) -> None:
    """The --local controller of a writes first; a central controller started later finds a's
    objects stamped by another writer and leaves them, saying so (the writers' stamps still
    tell the two apart), and no ClusterSetIP in a changes."""
    a, b, c = fleet
    _inputs(a, b, c)
    local = [*_central_args(fleet), "--local", "a", "--leader-elect", "--lease-namespace", "default"]
    with run_controller(local, tmp_path, "local-a") as la:
        eventually(la.ready, what="--local a ready")
        before = {k: v for k, v in snapshot(a)["imports"].items()}
        ips = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"].get("ips")
               for o in a.api.objects("ServiceImport")}
        with run_controller(_central_args(fleet), tmp_path, "central") as ctl:
            eventually(lambda: _metrics(ctl).get('mcsdns_controller_writer_conflicts{member="a"}') == 1,
                       what=f"the central controller yields in a\n{ctl.logs()[-3000:]}")
            eventually(lambda: "b" in {x.split('"')[1] for x in _metrics(ctl)
                                       if x.startswith("mcsdns_controller_writes_total{member=")},
                       what="the central controller writes into b")
            ctl.logged("another controller, writer 'local:a:lease:a/default/mcsdns-controller'")
        assert snapshot(a)["imports"] == before
        assert {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"].get("ips")
                for o in a.api.objects("ServiceImport")} == ips
