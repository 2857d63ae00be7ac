"""`mcsdns diagnose` checks the permissions of the identity that runs the component (the
server's or the controller's ServiceAccount of deploy/, asked with SubjectAccessReviews),
not those of whoever runs diagnose; the test API server answers them by the stored RBAC
objects as kube-apiserver's authorizer does (test_real_diagnose asks a real one)."""

from __future__ import annotations

from typing import Any

import yaml
from support.controller_env import Cluster
from support.diagnose_env import Report, clusterset, diagnose, fails
from support.helpers import REPO

from mcsdns.kube.permissions import CONTROLLER

RBAC = "/apis/rbac.authorization.k8s.io/v1"
PATHS = {"ServiceAccount": "/api/v1/namespaces/mcsdns-system/serviceaccounts",
         "ClusterRole": f"{RBAC}/clusterroles", "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
         "Role": f"{RBAC}/namespaces/mcsdns-system/roles",
         "RoleBinding": f"{RBAC}/namespaces/mcsdns-system/rolebindings"}


def deploy(c: Cluster, *files: str) -> None:
    """Apply deploy/'s RBAC manifests `files` to `c`."""
    if c.kube.get("/api/v1/namespaces/mcsdns-system") is None:
        c.kube.namespace("mcsdns-system")
    for f in files:
        for doc in yaml.safe_load_all((REPO / "deploy" / f).read_text()):
            c.kube.create(PATHS[doc["kind"]], doc)


def permissions(report: Report) -> dict[str, tuple[str, str]]:
    return {r["cluster"]: (r["status"], r["message"]) for r in report["results"]
            if r["check"] == "permissions"}


def test_the_servers_service_account_not_the_caller(clusters2: list[Cluster]) -> None:
    _, b = clusters2
    deploy(b, "server/rbac.yaml")
    rc, report = diagnose("--kubeconfig", str(b.kubeconfig))
    assert permissions(report)["cluster"] == ("OK", "all 9 permissions mcsdns serve needs, checked for "
                                              "ServiceAccount mcsdns-system/mcsdns (deploy/'s)")
    b.kube.delete(f"{RBAC}/clusterrolebindings/mcsdns-server")
    rc, report = diagnose("--kubeconfig", str(b.kubeconfig))
    st, msg = permissions(report)["cluster"]
    assert rc == 1 and st == "FAIL" and ("permissions", "cluster", "") in fails(report), report
    assert msg.startswith("ServiceAccount mcsdns-system/mcsdns lacks 9 of the 9 permissions mcsdns serve "
                          "needs: get serviceimports.multicluster.x-k8s.io, list serviceimports"), msg


def test_the_controllers_service_account_in_its_cluster(clusters2: list[Cluster]) -> None:
    a, b = clusters2
    deploy(a, "controller/clusterrole.yaml", "controller/rbac.yaml")
    rc, report = diagnose(*clusterset(a, b))
    got = permissions(report)
    assert got["a"][0] == "OK" and got["a"][1].endswith(
        "checked for ServiceAccount mcsdns-system/mcsdns-controller (deploy/'s)"), got
    caller = "checked for the caller: no ServiceAccount mcsdns-system/mcsdns-controller or mcsdns-system/"
    assert got["b"][0] == "OK" and caller + "mcsdns-member here" in got["b"][1], got
    crb: Any = a.kube.get(f"{RBAC}/clusterrolebindings/mcsdns-controller")
    crb["subjects"][0]["name"] = "someone-else"
    a.kube.m.request("PUT", f"{RBAC}/clusterrolebindings/mcsdns-controller", body=crb)
    rc, report = diagnose(*clusterset(a, b))
    st, msg = permissions(report)["a"]
    n = sum(len(verbs) for _, _, verbs in CONTROLLER)
    assert rc == 1 and st == "FAIL" and msg.startswith(
        f"ServiceAccount mcsdns-system/mcsdns-controller lacks {n} of the {n} permissions the controller "
        "needs: get namespaces, list namespaces"), msg
    assert permissions(report)["b"][0] == "OK"
