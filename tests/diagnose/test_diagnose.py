"""`mcsdns diagnose` against test API servers: a healthy clusterset (what the real controller
writes, answered by real `mcsdns serve` processes) is all OK; each broken setup is reported by
its check, and by nothing else."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.controller_env import Cluster, shop
from support.diagnose_env import Report, clusterset, diagnose, fails, installed, stale_slice, sync
from support.helpers import REPO, run_server

from mcsdns.controller.kinds.derivedservice import derived_name
from mcsdns.kube import permissions


@pytest.fixture
def healthy(clusters2: list[Cluster]) -> Iterator[tuple[Cluster, Cluster]]:
    """Member a (cluster ID east) exports web (ClusterSetIP) and db (headless) to b (west);
    both run mcsdns and forward the zone to it, and a controller holds its Lease."""
    a, b = clusters2
    shop(a, clusters2)
    installed(a, b)
    sync(a, b)
    yield a, b


def test_healthy_clusterset_is_all_ok_from_the_objects_to_the_answers(
        healthy: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    a, b = healthy
    with run_server(["--kubeconfig", str(a.kubeconfig)], tmp_path) as sa, \
            run_server(["--kubeconfig", str(b.kubeconfig)], tmp_path) as sb:
        rc, report = diagnose(*clusterset(a, b), "--dns", f"a=127.0.0.1:{sa.port}",
                              "--dns", f"b=127.0.0.1:{sb.port}")
    assert rc == 0 and report["summary"]["FAIL"] == report["summary"]["WARN"] == 0, report
    checks = {(r["check"], r["cluster"]) for r in report["results"]}
    for cl in ("a", "b"):
        for check in ("api", "permissions", "crds", "cluster-id", "import", "ips", "endpoints", "dns"):
            assert (check, cl) in checks, (check, cl)
    assert ("export", "a") in checks
    answered = {r["subject"]: r["message"] for r in report["results"]
                if r["check"] == "dns" and r["cluster"] == "b"}
    ip = b.kube.imported("shop", "web")["spec"]["ips"][0]
    assert answered["web.shop.svc.clusterset.local."].endswith(f"answers {ip}")
    assert answered["db-1.east.db.shop.svc.clusterset.local."].endswith("answers 10.1.0.8")


def test_text_output_has_one_line_per_check_and_a_summary(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    out = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", *clusterset(a, b)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[-1].endswith("0 WARN, 0 FAIL")
    assert all(line.split()[0] == "OK" for line in lines[:-1])
    assert any(line.split()[1:3] == ["b", "ips"] and "shop/web" in line for line in lines)


def test_unreachable_member_fails_alone(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    b.stop()
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("api", "b", "")}
    assert "unreachable" in next(r["message"] for r in report["results"] if r["status"] == "FAIL")


def test_missing_permission_is_named_with_its_verb_and_resource(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    a.api.deny("serviceimports", ("create",))
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("permissions", "a", "")}
    msg = next(r["message"] for r in report["results"] if r["status"] == "FAIL")
    n = sum(len(verbs) for _, _, verbs in permissions.CONTROLLER)  # 29 with the Events rule
    assert "create serviceimports.multicluster.x-k8s.io" in msg and f"1 of the {n} " in msg


def test_one_cluster_checks_what_serve_needs(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    b.api.deny("endpointslices", ("watch",))
    rc, report = diagnose("--kubeconfig", str(b.kubeconfig))
    assert rc == 1 and fails(report) == {("permissions", "cluster", "")}
    msg = next(r["message"] for r in report["results"] if r["status"] == "FAIL")
    assert "mcsdns serve" in msg and "watch endpointslices.discovery.k8s.io" in msg and "of the 9" in msg


def test_mcs_crds_not_served(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    b.api.served["multicluster.x-k8s.io"] = ()
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("crds", "b", "")}
    assert "install the ServiceExport and ServiceImport CRDs" in next(
        r["message"] for r in report["results"] if r["status"] == "FAIL")


@pytest.mark.parametrize("case", ["missing", "invalid", "duplicate"])
def test_cluster_id_missing_invalid_or_shared(healthy: tuple[Cluster, Cluster], case: str) -> None:
    a, b = healthy
    path = "/apis/about.k8s.io/v1alpha1/clusterproperties/cluster.clusterset.k8s.io"
    b.kube.delete(path)
    if case != "missing":
        b.kube.cluster_id("Not_A_Label" if case == "invalid" else "east")
    rc, report = diagnose(*clusterset(a, b))
    want = {("cluster-id", "b", "")} | ({("cluster-id", "a", "")} if case == "duplicate" else set())
    assert rc == 1 and {f for f in fails(report) if f[0] == "cluster-id"} == want
    msg = " ".join(r["message"] for r in report["results"]
                   if r["check"] == "cluster-id" and r["cluster"] == "b")
    assert {"missing": "no ClusterProperty", "invalid": "not a valid cluster ID",
            "duplicate": "also the ID of a"}[case] in msg


def test_export_without_a_service_is_reported_with_its_condition(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    a.kube.export("shop", "ghost")
    sync(a, b)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("export", "a", "shop/ghost")}
    msgs = [r["message"] for r in report["results"] if r["subject"] == "shop/ghost"]
    assert any(m.startswith("Valid=False (NoService)") for m in msgs)


def test_missing_service_import_in_a_member_with_the_namespace(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    b.kube.delete(f"{b.kube.mcs}/namespaces/shop/serviceimports/web")
    rc, report = diagnose(*clusterset(a, b))
    # its imported slices are still there: left over until the controller runs
    assert ("import", "b", "shop/web") in fails(report)
    assert {f[0] for f in fails(report)} <= {"import", "stale-slices"}


def test_clusterset_ip_without_ips(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    si = b.kube.serviceimport("shop", "web")
    assert si is not None
    si["spec"].pop("ips")
    b.kube.m.request("PUT", f"{b.kube.mcs}/namespaces/shop/serviceimports/web", body=si)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("ips", "b", "shop/web")}


def test_derived_service_gone(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    b.kube.delete(f"/api/v1/namespaces/shop/services/{derived_name(('shop', 'web'))}")
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("derived-service", "b", "shop/web")}


def test_imported_endpoints_behind_the_source(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    a.kube.endpoints("shop", "web", "web-def", [("10.1.0.9", None)])  # not synced yet
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("endpoints", "a", "shop/web"), ("endpoints", "b", "shop/web")}
    assert all("missing 10.1.0.9" in r["message"] for r in report["results"] if r["status"] == "FAIL")
    sync(a, b)
    assert diagnose(*clusterset(a, b))[0] == 0


def test_stale_slice_from_a_cluster_that_is_gone(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    stale_slice(b, "south")
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 1 and fails(report) == {("stale-slices", "b", "shop/web")}
    assert "web-gone from south" in next(r["message"] for r in report["results"] if r["status"] == "FAIL")


def warnings(report: Report) -> dict[tuple[str, str, str], str]:
    """(check, cluster, subject) -> message of every WARN."""
    return {(r["check"], r["cluster"], r["subject"]): r["message"] for r in report["results"]
            if r["status"] == "WARN"}


def test_rrsets_cut_to_one_message_are_reported(healthy: tuple[Cluster, Cluster]) -> None:
    """A headless service of 1,200 endpoints (two valid slices of 600) and two named ports has
    1,200 SRV records at each port name and 2,400 at its name: more than one message holds, so
    `mcsdns serve` cuts the three RRsets and clients see part of them: diagnose warns, in every
    member that imports it, with each RRset's true size (the name's counted before its port
    names' cuts)."""
    a, b = healthy
    ports = (("http", 80, "TCP"), ("admin", 81, "TCP"))
    a.kube.service("shop", "wide", ports, headless=True)
    for half in range(2):
        a.kube.endpoints("shop", "wide", f"wide-{half}",
                         [(f"10.4.{half * 3 + i // 250}.{i % 250 + 1}", f"pod-{half * 600 + i}")
                          for i in range(600)], ("http", 8080), [("admin", 9090)])
    a.kube.export("shop", "wide")
    sync(a, b)
    rc, report = diagnose(*clusterset(a, b))
    assert rc == 0 and not fails(report), fails(report)
    warned = warnings(report)
    assert set(warned) == {("names", "a", "shop/wide"), ("names", "b", "shop/wide")}, warned
    for (_, cl, _), msg in warned.items():
        # from the member's imported slices: one SRV per (port, endpoint name) at each port name
        slices = (a if cl == "a" else b).kube.imported_slices("shop", "wide")
        per_port = {p["port"]: {e["hostname"] for sl in slices for e in sl["endpoints"]}
                    for sl in slices for p in sl["ports"]}
        had = sorted(len(h) for h in per_port.values()) + [sum(len(h) for h in per_port.values())]
        assert msg.startswith("3 RRsets cut to the records one DNS message holds (64000 octets): SRV "), msg
        cuts = [(int(k), int(n)) for k, n in re.findall(r"SRV (\d+) of (\d+)", msg)]
        assert sorted(n for _, n in cuts) == had, msg
        assert all(0 < k < n for k, n in cuts), msg
    # the other services are not cut: no finding for them
    rc, report = diagnose(*clusterset(a, b), "web.shop")
    assert rc == 0 and not warnings(report)


def test_dns_server_answering_from_other_objects(healthy: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    """b's --dns points at the server watching a: a's ClusterSetIP for web is not b's."""
    a, b = healthy
    with run_server(["--kubeconfig", str(a.kubeconfig)], tmp_path) as sa:
        rc, report = diagnose(*clusterset(a, b), "--dns", f"b=127.0.0.1:{sa.port}")
    assert rc == 1 and fails(report) == {("dns", "b", "web.shop.svc.clusterset.local.")}
    ips = (b.kube.serviceimport("shop", "web") or {})["spec"]["ips"]
    msg = next(r["message"] for r in report["results"] if r["status"] == "FAIL")
    assert f"the objects say {ips[0]}" in msg


def test_one_service_narrows_the_report(healthy: tuple[Cluster, Cluster]) -> None:
    a, b = healthy
    b.kube.delete(f"/api/v1/namespaces/shop/services/{derived_name(('shop', 'web'))}")
    rc, report = diagnose(*clusterset(a, b), "db.shop")
    assert rc == 0
    assert {r["subject"] for r in report["results"]} == {"", "shop/db"}
    rc, report = diagnose(*clusterset(a, b), "web.shop")
    assert rc == 1 and {r["subject"] for r in report["results"]} == {"", "shop/web"}
    rc, report = diagnose(*clusterset(a, b), "nothing.shop")
    assert rc == 1 and fails(report) == {("service", "", "shop/nothing")}


@pytest.mark.parametrize("args,message", [
    (["--cluster", "a=/nonexistent"],
     "--cluster a=/nonexistent: cannot load kubeconfig: kubeconfig /nonexistent: cannot read"),
    (["--kubeconfig", "/nonexistent"],
     "--kubeconfig /nonexistent: cannot load kubeconfig: kubeconfig /nonexistent: cannot read"),
    (["--cluster", "a=X", "--kubeconfig", "Y"], "--cluster: give either"),
    (["shop"], "shop: expected NAME.NAMESPACE"),
])
def test_bad_configuration_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", *args], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert message in out.stderr
