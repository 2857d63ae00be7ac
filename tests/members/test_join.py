"""`mcsdns join` / `mcsdns leave` against test API servers: what join makes in a member (the
ClusterRole from the one permission list), the kubeconfig it writes to a file and to the
members Secret, that it is idempotent, that the controller syncs with its kubeconfig, and
that leave undoes it (and, on request, what the controller imported)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.controller_env import Cluster, shop
from support.helpers import REPO
from support.joins import NS, join, mcsdns, secret_key

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Rejected
from mcsdns.kube.permissions import CONTROLLER, CONTROLLER_LEASES, policy_rules


def test_join_makes_least_privilege_rbac_and_a_kubeconfig_idempotently(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    a.kube.namespace(NS)
    out = tmp_path / "west.kubeconfig"
    first = join(b, a, "west", "--output", str(out), "--token-duration", "48h")
    assert "clusterrole mcsdns-controller: created" in first and "secret mcsdns-system/mcsdns-members key " \
        "west: created" in first, first
    role = b.api.get("ClusterRole", None, "mcsdns-controller")
    assert role is not None and role["rules"] == policy_rules(CONTROLLER)
    binding = b.api.get("ClusterRoleBinding", None, "mcsdns-member")
    assert binding is not None and binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "mcsdns-member", "namespace": NS}]
    assert b.api.get("ServiceAccount", NS, "mcsdns-member") is not None
    cfg = yaml.safe_load(out.read_text())
    assert out.stat().st_mode & 0o777 == 0o600
    assert cfg["clusters"][0]["cluster"]["server"] == b.api.url and cfg["current-context"] == "west"
    token = cfg["users"][0]["user"]["token"]
    ns, sa, _, expiry = b.api.tokens.issued[token]
    assert (ns, sa) == (NS, "mcsdns-member")
    assert secret_key(a, "west") == cfg
    b.api.requests.clear()
    again = join(b, a, "west")
    assert again.count(": unchanged") == 3 and "namespace mcsdns-system: exists" in again, again
    writes = {(m, p.split("?")[0]) for m, p in b.api.requests if m != "GET"}
    assert writes == {("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/mcsdns-member/token")}, writes
    assert secret_key(a, "west") != cfg  # a new token: the way to rotate it


def test_the_controller_syncs_with_the_kubeconfigs_join_wrote(clusters2: list[Cluster],
                                                              tmp_path: Path) -> None:
    """The test API server enforces RBAC on join's tokens: they are enough for a controller
    run and no more, and leave ends them."""
    a, b = clusters2
    shop(a, clusters2, db=False)
    for c in clusters2:
        rc, _, err = mcsdns("join", c.name, "--kubeconfig", str(c.kubeconfig), "--output",
                            str(tmp_path / f"joined-{c.name}"))
        assert rc == 0, err
    members = [f"--cluster={c.name}={tmp_path / f'joined-{c.name}'}" for c in clusters2]
    out = subprocess.run([sys.executable, "-m", "mcsdns.controller", "--once", *members],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert b.kube.imported("shop", "web")["spec"]["type"] == "ClusterSetIP"
    member = Client.load(str(tmp_path / "joined-b"), None)
    assert [s["metadata"]["name"] for s in member.list("/api/v1/namespaces/shop/services")] != []
    for method, path in (("GET", "/api/v1/secrets"), ("DELETE", "/api/v1/namespaces/shop"),
                         ("POST", "/apis/multicluster.x-k8s.io/v1beta1/namespaces/shop/serviceexports")):
        with pytest.raises(Rejected) as e:
            member.request(method, path, body={} if method == "POST" else None)
        assert e.value.status == 403, (method, path)
        assert "system:serviceaccount:mcsdns-system:mcsdns-member" in str(e.value.body)
    rc, _, err = mcsdns("leave", "b", "--kubeconfig", str(b.kubeconfig))
    assert rc == 0, err
    with pytest.raises(Rejected) as e:
        member.get("/api/v1/namespaces")
    assert e.value.status == 401


def test_leave_undoes_join_and_purges_imports_on_request(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    a.kube.namespace(NS)
    shop(a, clusters2, db=False)
    join(b, a, "west")
    subprocess.run([sys.executable, "-m", "mcsdns.controller", "--once", "--cluster", f"a={a.kubeconfig}",
                    "--cluster", f"b={b.kubeconfig}"], check=True, capture_output=True, timeout=120, cwd=REPO)
    assert b.kube.serviceimport("shop", "web") is not None
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig),
                        "--controller-kubeconfig", str(a.kubeconfig), "--purge-imports")
    assert rc == 0, err
    assert secret_key(a, "west") is None and a.api.get("Secret", NS, "mcsdns-members") is not None
    for kind, ns, name in (("ClusterRoleBinding", None, "mcsdns-member"),
                           ("ServiceAccount", NS, "mcsdns-member"),
                           ("ClusterRole", None, "mcsdns-controller"), ("Namespace", None, NS)):
        assert b.api.get(kind, ns, name) is None, kind
    assert b.kube.serviceimport("shop", "web") is None and not b.kube.imported_slices("shop", "web")
    assert not [s for s in b.api.objects("Service") if s["metadata"]["name"].startswith("derived-")]
    assert a.kube.serviceimport("shop", "web") is not None  # the other member's: untouched
    assert "serviceimports imported by the controller: 1 deleted" in err, err


def test_leave_keeps_what_join_did_not_make_or_others_use(clusters2: list[Cluster]) -> None:
    a, b = clusters2
    b.kube.namespace(NS)  # there before join
    join(b, a, "west")
    b.kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "mcsdns-controller"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "mcsdns-controller"},
        "subjects": [{"kind": "ServiceAccount", "name": "mcsdns-controller", "namespace": NS}]})
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig))
    assert rc == 0, err
    assert "clusterrole mcsdns-controller: kept (bound by clusterrolebinding mcsdns-controller)" in err
    assert "namespace mcsdns-system: kept (not made by join)" in err
    assert b.api.get("ClusterRole", None, "mcsdns-controller") is not None
    assert b.api.get("ServiceAccount", NS, "mcsdns-member") is None


def test_join_needs_somewhere_to_write_and_names_bad_flags_in_one_line(clusters2: list[Cluster]) -> None:
    a, _ = clusters2
    rc, _, err = mcsdns("join", "west", "--kubeconfig", str(a.kubeconfig))
    assert rc == 2 and err.count("\n") == 1 and "--output FILE" in err
    rc, _, err = mcsdns("join", "West_1", "--kubeconfig", str(a.kubeconfig), "--output", "-")
    assert rc == 2 and err.count("\n") == 1 and "West_1: expected a DNS label" in err, err
    rc, _, err = mcsdns("join", "west", "--kubeconfig", str(a.kubeconfig), "--output", "-",
                        "--token-duration", "5m")
    assert rc == 2 and "10 minutes at least" in err, err


def test_join_grants_the_lease_role_in_the_lease_cluster_only_when_asked(clusters2: list[Cluster]) -> None:
    a, b = clusters2
    join(b, a, "west", "--output", "-")
    assert not b.api.objects("Role") and not b.api.objects("RoleBinding")
    join(a, a, "east", "--output", "-", "--lease-namespace", NS)
    role = a.api.get("Role", NS, "mcsdns-member-lease")
    assert role is not None and role["rules"] == policy_rules(CONTROLLER_LEASES)
    rb = a.api.get("RoleBinding", NS, "mcsdns-member-lease")
    assert rb is not None and rb["subjects"][0]["name"] == "mcsdns-member"
    rc, _, err = mcsdns("leave", "east", "--kubeconfig", str(a.kubeconfig), "--lease-namespace", NS)
    assert rc == 0 and "role mcsdns-system/mcsdns-member-lease: deleted" in err, err
    assert not a.api.objects("Role") and not a.api.objects("RoleBinding")


def test_join_into_a_namespace_being_deleted_says_so(clusters2: list[Cluster]) -> None:
    """As a real cluster shows a namespace for a while after a leave deleted it."""
    _, b = clusters2
    b.api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NS, "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Terminating"}})
    rc, _, err = mcsdns("join", "west", "--kubeconfig", str(b.kubeconfig), "--output", "-")
    assert rc == 1 and err.splitlines()[-1] == (
        "mcsdns join: west: namespace mcsdns-system is being deleted (a leave?): run join again once it is "
        "gone, or give another --namespace"), err
    assert b.api.get("ServiceAccount", NS, "mcsdns-member") is None
