"""`mcsdns join` on real kube-apiservers (MCSDNS_REALK8S; skipped without it), where
TokenRequest and RBAC are enforced: the joined credential is enough for a real controller
run between two real clusters, and no more (other verbs are refused, a SelfSubjectAccess
Review by diagnose finds the controller's permissions all granted); leave revokes it."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.controller_env import eventually, run_controller
from support.helpers import REPO
from support.joins import mcsdns_proc
from support.realk8s import RealK8s, control_plane

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import ApiError
from mcsdns.kube.permissions import CONTROLLER

MCS = "/apis/multicluster.x-k8s.io/v1beta1"


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealK8s]:
    """A second real control plane, for the member being joined."""
    yield from control_plane("mcsdns-join", tmp_path_factory)


def cluster_id(k8s: RealK8s, value: str) -> None:
    path = "/apis/about.k8s.io/v1alpha1/clusterproperties"
    k8s.request("DELETE", f"{path}/cluster.clusterset.k8s.io")
    k8s.json("POST", path, {"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                            "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": value}})


def export(k8s: RealK8s, ns: str) -> None:
    k8s.json("POST", f"/api/v1/namespaces/{ns}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
    k8s.json("POST", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}]})
    k8s.json("POST", f"{MCS}/namespaces/{ns}/serviceexports", {
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport", "metadata": {"name": "web"}})


def test_joined_credentials_run_the_controller_and_nothing_more(real_k8s: RealK8s, second: RealK8s,
                                                                tmp_path: Path) -> None:
    a, b = real_k8s, second
    cluster_id(a, "east")
    cluster_id(b, "west")
    ja, jb = tmp_path / "a.kubeconfig", tmp_path / "b.kubeconfig"
    out = mcsdns_proc("join", "a", "--kubeconfig", str(a.kubeconfig), "--output", str(ja))
    assert out.returncode == 0, out.stderr
    out = mcsdns_proc("join", "b", "--kubeconfig", str(b.kubeconfig), "--output", str(jb),
                 "--controller-kubeconfig", str(a.kubeconfig), "--token-duration", "24h")
    assert out.returncode == 0, out.stderr
    print(out.stderr)
    secret = a.json("GET", "/api/v1/namespaces/mcsdns-system/secrets/mcsdns-members")
    assert base64.b64decode(secret["data"]["b"]).decode() == jb.read_text()
    ns = a.namespace("shop")
    b.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    export(a, ns)

    run = subprocess.run([sys.executable, "-m", "mcsdns", "controller", "--once", "--cluster", f"a={ja}",
                          "--cluster", f"b={jb}"], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert run.returncode == 0, run.stderr
    si = b.json("GET", f"{MCS}/namespaces/{ns}/serviceimports/web")
    assert si["spec"]["type"] == "ClusterSetIP" and si["spec"]["ips"]
    conds = {c["type"]: c["status"] for c in a.json("GET", f"{MCS}/namespaces/{ns}/serviceexports/web")
             ["status"]["conditions"]}
    assert conds.get("Ready") == "True", conds

    diag = mcsdns_proc("diagnose", "--cluster", f"a={ja}", "--cluster", f"b={jb}")
    n = sum(len(verbs) for _, _, verbs in CONTROLLER)
    assert f"all {n} permissions the controller needs" in diag.stdout, diag.stdout
    member = Client.load(str(jb), None)
    for method, path in (("GET", "/api/v1/namespaces/kube-system/secrets"),
                         ("DELETE", f"/api/v1/namespaces/{ns}"),
                         ("POST", f"{MCS}/namespaces/{ns}/serviceexports"),
                         ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles")):
        with pytest.raises(ApiError) as e:
            member.request(method, path, body={} if method == "POST" else None)
        assert e.value.status == 403, (method, path, e.value)

    out = mcsdns_proc("leave", "b", "--kubeconfig", str(b.kubeconfig), "--controller-kubeconfig",
                 str(a.kubeconfig), "--purge-imports")
    assert out.returncode == 0, out.stderr
    print(out.stderr)
    with pytest.raises(ApiError) as e:
        member.get(f"{MCS}/namespaces/{ns}/serviceimports")
    assert e.value.status in (401, 403)  # no binding (403); the ServiceAccount gone, its token too (401)
    assert b.request("GET", f"{MCS}/namespaces/{ns}/serviceimports/web")[0] == 404
    secret = a.json("GET", "/api/v1/namespaces/mcsdns-system/secrets/mcsdns-members")
    assert "b" not in (secret.get("data") or {})
    a.unexport(ns)  # the session's control plane: no objects of this writer left for the next


def test_a_joined_member_added_and_removed_under_a_running_controller(real_k8s: RealK8s, second: RealK8s,
                                                                      tmp_path: Path) -> None:
    """Leader election and the member Leases with join's Lease Role, and a member added and
    removed through --members-dir, all through join's credentials on real servers. `leave`
    removes it: its export then says Ready=False (MemberLeft) and its Lease is gone, and stay
    so under the running controller (past a's next Lease renewal)."""
    a, b = real_k8s, second
    cluster_id(a, "east")
    cluster_id(b, "west")
    ja, members = tmp_path / "a.kubeconfig", tmp_path / "members"
    members.mkdir()
    out = mcsdns_proc("join", "a", "--kubeconfig", str(a.kubeconfig), "--output", str(ja),
                      "--lease-namespace", "mcsdns-system")
    assert out.returncode == 0, out.stderr
    ns = a.namespace("shop")
    b.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    export(a, ns)
    args = ["--cluster", f"a={ja}", "--members-dir", str(members), "--leader-elect", "--lease-cluster", "a",
            "--lease-namespace", "mcsdns-system", "--endpoint-ttl", "4"]
    with run_controller(args, tmp_path) as ctl:
        eventually(ctl.ready, what="first sync")
        leases = "/apis/coordination.k8s.io/v1/namespaces/mcsdns-system/leases"
        assert a.json("GET", f"{leases}/mcsdns-controller")["spec"]["holderIdentity"]
        account = "mcsdns-system"
        out = mcsdns_proc("join", "b", "--kubeconfig", str(b.kubeconfig), "--output", str(members / "b"))
        if "is being deleted" in out.stderr:  # the first test's leave; no namespace controller here
            account = "mcsdns-live"
            out = mcsdns_proc("join", "b", "--kubeconfig", str(b.kubeconfig), "--output", str(members / "b"),
                         "--namespace", account)
        assert out.returncode == 0, out.stderr
        export(b, ns)
        eventually(lambda: b.request("GET", f"{MCS}/namespaces/{ns}/serviceimports/web")[0] == 200,
                   what=f"b synced\n{ctl.logs()}")
        eventually(lambda: a.request("GET", f"{leases}/mcsdns-member-b")[0] == 200, what="b's member Lease")
        eventually(lambda: conditions(b, ns).get("Ready", {}).get("status") == "True",
                   what="b's export Ready")
        print("before leave:", {t: (c["status"], c["reason"]) for t, c in conditions(b, ns).items()})
        print("before leave: GET lease mcsdns-member-b:", a.request("GET", f"{leases}/mcsdns-member-b")[0])
        assert "forbidden" not in ctl.logs().lower(), ctl.logs()  # (b's token dies with leave)
        out = mcsdns_proc("leave", "b", "--kubeconfig", str(b.kubeconfig), "--namespace", account, "--output",
                     str(members / "b"), "--lease-kubeconfig", str(a.kubeconfig), "--lease-namespace",
                     "mcsdns-system")
        assert out.returncode == 0, out.stderr
        print(out.stderr)
        assert "b (lease cluster): lease mcsdns-system/mcsdns-member-b: deleted" in out.stderr, out.stderr
        eventually(lambda: "cluster b removed" in ctl.logs(), what="b removed")
        seen = a.json("GET", f"{leases}/mcsdns-member-a")["metadata"]["resourceVersion"]
        eventually(lambda: a.json("GET", f"{leases}/mcsdns-member-a")["metadata"]["resourceVersion"] != seen,
                   what="a's member Lease renewed after b left")
        ready = conditions(b, ns)["Ready"]
        print("after leave:", {t: (c["status"], c["reason"]) for t, c in conditions(b, ns).items()},
              ready["message"])
        print("after leave: GET lease mcsdns-member-b:", a.request("GET", f"{leases}/mcsdns-member-b")[0])
        assert (ready["status"], ready["reason"]) == ("False", "MemberLeft"), ready
        assert "Member b left" in ready["message"]
        assert a.request("GET", f"{leases}/mcsdns-member-b")[0] == 404
        assert ctl.proc.poll() is None
    a.unexport(ns)


def conditions(k8s: RealK8s, ns: str) -> dict[str, dict[str, str]]:
    """The conditions of ServiceExport `ns`/web, by type."""
    se = k8s.json("GET", f"{MCS}/namespaces/{ns}/serviceexports/web")
    return {c["type"]: c for c in (se.get("status") or {}).get("conditions") or []}
