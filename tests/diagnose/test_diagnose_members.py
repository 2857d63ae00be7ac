"""`mcsdns diagnose` with the clusterset's members from its members Secret or directory
(`--members-secret`, `--members-dir`): the Lease cluster alone then shows every member's
exports, and a subset of members named by hand is never a FAIL."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
from support.controller_env import Cluster, shop
from support.diagnose_env import clusterset, diagnose, fails, installed, members_dir, stale_slice, sync3
from support.helpers import REPO

SECRET = "mcsdns-system/mcsdns-members"


def members_secret(holder: Cluster, *cs: Cluster) -> None:
    data = {c.name: base64.b64encode(c.kubeconfig.read_bytes()).decode() for c in cs}
    holder.kube.create("/api/v1/namespaces/mcsdns-system/secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "mcsdns-members", "namespace": "mcsdns-system"}, "data": data})


def test_a_subset_of_members_is_never_a_fail(clusters3: list[Cluster]) -> None:
    """a exports web to b and c: diagnosing b and c alone (a not named) is all OK."""
    a, b, c = clusters3
    shop(a, clusters3, db=False)
    installed(a, b, c)
    sync3(clusters3)
    rc, report = diagnose("--cluster", f"b={b.kubeconfig}", "--cluster", f"c={c.kubeconfig}")
    assert rc == 0 and not fails(report), fails(report)


def test_the_lease_cluster_alone_sees_an_export_imported_nowhere(clusters3: list[Cluster],
                                                                  tmp_path: Path) -> None:
    """b exports web, no controller ever ran: the Lease cluster a alone was all-clear; with
    its members (Secret or directory) it is a FAIL naming b's export."""
    a, b, c = clusters3
    shop(b, clusters3, db=False)
    installed(a)
    for c_ in (b, c):
        c_.kube.namespace("mcsdns-system")
    rc, alone = diagnose("--kubeconfig", str(a.kubeconfig))
    assert ("import", "b", "shop/web") not in fails(alone)
    folder = members_dir(tmp_path, b, c)
    members_secret(a, b, c)
    for how in (["--members-dir", str(folder)], ["--members-secret", SECRET]):
        rc, report = diagnose("--kubeconfig", str(a.kubeconfig), *how)
        assert rc == 1 and ("import", "b", "shop/web") in fails(report), (how, fails(report))
        clusters = {r["cluster"] for r in report["results"] if r["check"] == "api"}
        assert clusters == {"local", "b", "c"}, clusters
        perms = {r["cluster"]: r["message"] for r in report["results"] if r["check"] == "permissions"}
        assert perms["b"].endswith("checked for the controller's own credential for this member"), perms


def test_a_slice_from_no_member_fails_only_with_every_member(clusters3: list[Cluster],
                                                            tmp_path: Path) -> None:
    a, b, c = clusters3
    shop(a, clusters3, db=False)
    installed(a, b, c)
    sync3(clusters3)
    stale_slice(b, "north")
    si = b.kube.serviceimport("shop", "web")
    assert si is not None
    si["status"]["clusters"].append({"cluster": "north"})  # as if c had exported it
    b.kube.m.request("PUT", f"{b.kube.mcs}/namespaces/shop/serviceimports/web/status", body=si)
    rc, report = diagnose(*clusterset(a, b))  # c (north) not named: a subset
    assert ("stale-slices", "b", "shop/web") not in fails(report), fails(report)
    c.kube.delete("/apis/about.k8s.io/v1alpha1/clusterproperties/cluster.clusterset.k8s.io")
    c.kube.cluster_id("gone")  # c is no longer north
    rc, report = diagnose("--cluster", f"a={a.kubeconfig}", "--members-dir", str(members_dir(tmp_path, b, c)))
    assert ("stale-slices", "b", "shop/web") in fails(report), fails(report)


@pytest.mark.parametrize("args,message", [
    (["--members-secret", "x"], "--members-secret x: expected NAMESPACE/NAME"),
    (["--members-secret", "a/b", "--members-dir", "/"], "give either --members-secret or --members-dir"),
    (["--members-secret", "a/b", "--cluster", "a=X"], "not with --cluster"),
    (["--members-dir", "/nonexistent"], "--members-dir /nonexistent: no such directory"),
    (["--service-account", "nobody"], "--service-account nobody: expected NAMESPACE/NAME"),
])
def test_bad_member_flags_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    for command in ("diagnose", "show"):
        out = subprocess.run([sys.executable, "-m", "mcsdns", command, *args], capture_output=True,
                             text=True, timeout=60, cwd=REPO)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert message in out.stderr, out.stderr
