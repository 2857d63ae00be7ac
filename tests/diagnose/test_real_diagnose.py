"""`mcsdns diagnose` on a real kube-apiserver (MCSDNS_REALK8S; skipped without it): its
permission check asks the real RBAC (Subject- and SelfSubjectAccessReviews), so the shipped
least-privilege ClusterRole of the server (deploy/server/rbac.yaml) is checked to be enough
for `serve`, and for the server's ServiceAccount, not for whoever runs diagnose."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from support.helpers import REPO
from support.realk8s import RealK8s

PATHS = {"ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
         "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
         "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"}


def diagnose(kubeconfig: Path, *more: str) -> tuple[int, dict[str, tuple[str, str]]]:
    """(exit status, {check: (status, message)}) of a one-cluster diagnose."""
    cmd = [sys.executable, "-m", "mcsdns", "diagnose", "--output", "json", "--kubeconfig", str(kubeconfig),
           *more]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode in (0, 1), out.stderr
    results: list[Any] = json.loads(out.stdout)["results"]
    worst: dict[str, tuple[str, str]] = {}
    for r in results:  # a check's FAIL wins over its OKs
        if r["check"] not in worst or r["status"] == "FAIL":
            worst[r["check"]] = (r["status"], r["message"])
    return out.returncode, worst


def test_diagnose_with_the_server_identity_as_deployed(real_k8s: RealK8s) -> None:
    ns = real_k8s.namespace("mcsdns-system")
    # the session's control plane is shared: no cluster ID left by another test
    real_k8s.request("DELETE", "/apis/about.k8s.io/v1alpha1/clusterproperties/cluster.clusterset.k8s.io")
    _, admin = diagnose(real_k8s.kubeconfig)
    assert admin["api"] == ("OK", "reachable (v1.36.2)") and admin["permissions"][0] == "OK"
    assert admin["crds"][0] == "OK" and admin["cluster-id"][0] == "FAIL"
    real_k8s.json("POST", "/apis/about.k8s.io/v1alpha1/clusterproperties", {
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "east"}})
    bare = real_k8s.token_for(ns, "nobody")
    _, got = diagnose(bare)
    assert got["permissions"][0] == "FAIL"
    assert "lacks 9 of the 9 permissions mcsdns serve needs" in got["permissions"][1]
    for doc in yaml.safe_load_all((REPO / "deploy" / "server" / "rbac.yaml").read_text()):
        doc["metadata"]["namespace"] = ns
        for s in doc.get("subjects") or []:
            s["namespace"] = ns
        real_k8s.json("POST", PATHS[doc["kind"]].format(ns=ns), doc)
    rc, got = diagnose(real_k8s.token_for(ns, "mcsdns", create=False))
    assert got["permissions"][0] == "OK", got
    assert got["cluster-id"][0] == "OK", got
    assert got["read"][0] == "WARN" and rc == 0, got  # what serve does not need: refused, by design


def test_the_servers_service_account_is_checked_not_the_caller(real_k8s: RealK8s) -> None:
    """The admin runs diagnose; the server's ServiceAccount (deploy/server/rbac.yaml) is what is
    checked, with SubjectAccessReviews the real RBAC answers: its binding deleted is a FAIL
    naming the ServiceAccount and each missing verb and resource, though the admin may do all."""
    ns = real_k8s.namespace("mcsdns-system")
    binding = f"mcsdns-server-{ns}"
    for doc in yaml.safe_load_all((REPO / "deploy" / "server" / "rbac.yaml").read_text()):
        doc["metadata"]["namespace"] = ns
        if doc["kind"] == "ClusterRoleBinding":
            doc["metadata"]["name"] = binding
        for s in doc.get("subjects") or []:
            s["namespace"] = ns
        code, _, _ = real_k8s.request("POST", PATHS[doc["kind"]].format(ns=ns), doc)
        assert code in (201, 409), (doc["kind"], code)
    account = ["--service-account", f"{ns}/mcsdns"]
    rc, got = diagnose(real_k8s.kubeconfig, *account)
    assert got["permissions"] == ("OK", "all 9 permissions mcsdns serve needs, checked for ServiceAccount "
                                        f"{ns}/mcsdns (--service-account)"), got
    real_k8s.json("DELETE", f"{PATHS['ClusterRoleBinding']}/{binding}")
    rc, got = diagnose(real_k8s.kubeconfig, *account)
    st, msg = got["permissions"]
    assert rc == 1 and st == "FAIL", got
    assert msg.startswith(f"ServiceAccount {ns}/mcsdns lacks 9 of the 9 permissions mcsdns serve needs: "
                          "get serviceimports.multicluster.x-k8s.io, list serviceimports"), msg
    assert "watch endpointslices.discovery.k8s.io" in msg and "list clusterproperties.about.k8s.io" in msg
