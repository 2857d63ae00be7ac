"""`serve --cluster-id` against the cluster's ClusterProperty, and `--prefer-local`, as
`mcsdns diagnose` sees them: a flag that disagrees with the ClusterProperty is one warning
at serve's start (the flag ranks the answers) and a WARN in diagnose; a server answering
only its cluster's endpoints under `--prefer-local only-when-available` is no FAIL."""

from __future__ import annotations

import shutil
from pathlib import Path

import dns.rdatatype
from support.controller_env import Cluster, shop
from support.diagnose_env import NS, clusterset, diagnose, fails, installed, sync
from support.helpers import EXAMPLE, run_server

WARNING = "--cluster-id {flag} disagrees with the ClusterProperty's cluster ID {prop}"


def _manifests(tmp: Path, cluster_id: str) -> Path:
    d = tmp / "m"
    shutil.copytree(EXAMPLE, d)
    (d / "id.yaml").write_text("apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\n"
                               f"metadata: {{name: id.k8s.io}}\nspec: {{value: {cluster_id}}}\n")
    return d


def test_serve_warns_once_when_the_flag_and_the_cluster_property_disagree(tmp_path: Path) -> None:
    with run_server(["--manifests", str(_manifests(tmp_path, "cluster-b")), "--cluster-id", "cluster-a"],
                    tmp_path) as srv:
        srv_answer = srv.query("_postgres._tcp.db.shop.svc.clusterset.local", "SRV")
        logs = srv.logs()
    said = [ln for ln in logs.splitlines() if WARNING.format(flag="cluster-a", prop="cluster-b") in ln]
    assert len(said) == 1 and "rank endpoints by cluster-a (the flag wins)" in said[0], logs
    # and it does: cluster-a's endpoints are the local ones (SRV priority 0)
    prio = {str(rd.target).split(".")[1]: rd.priority for rr in srv_answer.answer
            if rr.rdtype == dns.rdatatype.SRV for rd in rr}
    assert prio["cluster-a"] == 0 < prio["cluster-b"], prio
    same = _manifests(tmp_path / "same", "cluster-a")
    with run_server(["--manifests", str(same), "--cluster-id", "cluster-a"], tmp_path) as srv:
        assert "disagrees" not in srv.logs()


def _server_pod(c: Cluster, args: list[str]) -> None:
    c.api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "mcsdns-5f6d-abcde", "namespace": NS,
        "labels": {"app.kubernetes.io/name": "mcsdns", "app.kubernetes.io/component": "dns"}},
        "spec": {"containers": [{"name": "mcsdns", "image": "mcsdns", "args": args}]},
        "status": {"phase": "Running"}})


def test_diagnose_warns_of_a_server_flag_other_than_the_cluster_property(clusters2: list[Cluster]) -> None:
    a, _ = clusters2
    installed(a)
    _server_pod(a, ["serve", "--listen=0.0.0.0:5353", "--cluster-id=EAST"])  # a's ClusterProperty: east
    rc, report = diagnose("--kubeconfig", str(a.kubeconfig))
    assert not [r for r in report["results"] if r["status"] == "WARN"], report
    _server_pod(a, ["serve", "--listen=0.0.0.0:5353", "--cluster-id", "esat"])
    rc, report = diagnose("--kubeconfig", str(a.kubeconfig))
    warned = [r["message"] for r in report["results"] if r["status"] == "WARN" and r["check"] == "cluster-id"]
    assert rc == 0 and len(warned) == 1, report
    assert warned[0].startswith("mcsdns serve runs with --cluster-id esat (pod mcsdns-5f6d-abcde), but "
                                "ClusterProperty cluster.clusterset.k8s.io says east: the flag wins"), warned


def test_a_server_preferring_local_endpoints_is_no_fail(clusters2: list[Cluster], tmp_path: Path) -> None:
    """db is exported by a (10.1.0.7, 10.1.0.8) and b (10.2.0.9); b's server, started with
    --prefer-local only-when-available, answers b's endpoint alone, as it should."""
    a, b = clusters2
    shop(a, clusters2)
    b.kube.service("shop", "db", headless=True, ports=(("sql", 5432, "TCP"),))
    b.kube.endpoints("shop", "db", "db-xyz", [("10.2.0.9", "db-0")], port=("sql", 5432))
    b.kube.export("shop", "db")
    installed(a, b)
    sync(a, b)
    args = ["--kubeconfig", str(b.kubeconfig), "--cluster-id", "west"]
    with run_server([*args, "--prefer-local", "only-when-available"], tmp_path) as local, \
            run_server(args, tmp_path) as everyone:
        answer = local.query("db.shop.svc.clusterset.local").answer
        assert {rd.to_text() for rr in answer for rd in rr} == {"10.2.0.9"}
        rc, report = diagnose(*clusterset(a, b), "--dns", f"b=127.0.0.1:{local.port}", "db.shop")
        assert rc == 0 and not fails(report), fails(report)
        said = {r["subject"]: r["message"] for r in report["results"] if r["check"] == "dns"}
        assert said["db.shop.svc.clusterset.local."].endswith(
            "answers 10.2.0.9: this cluster's endpoints alone, as --prefer-local only-when-available answers")
        rc, report = diagnose(*clusterset(a, b), "--dns", f"b=127.0.0.1:{everyone.port}", "db.shop")
        assert rc == 0 and "answers 10.1.0.7, 10.1.0.8, 10.2.0.9" in str(report)
