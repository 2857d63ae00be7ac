"""`mcsdns join --read-only` against test API servers (which enforce RBAC on join's tokens):
the reader credential lists what `controller --local` reads and is refused every write; a
--local controller syncs with it and writes nothing into the member it only reads; leave
removes the reader too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.controller_env import Cluster, shop
from support.helpers import REPO
from support.joins import mcsdns

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Rejected
from mcsdns.kube.permissions import READER, policy_rules

NS = "mcsdns-system"
MCS = "/apis/multicluster.x-k8s.io/v1beta1"
USER = f"system:serviceaccount:{NS}:mcsdns-reader"


def test_a_read_only_member_credential_reads_and_the_local_controller_runs_with_it(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    shop(b, clusters2, db=False)  # b exports shop/web; namespace shop in both
    reader = tmp_path / "reader-b"
    rc, _, err = mcsdns("join", "b", "--kubeconfig", str(b.kubeconfig), "--read-only",
                        "--output", str(reader))
    assert rc == 0, err
    assert "clusterrole mcsdns-reader: created" in err and "admission" not in err, err
    role = b.api.get("ClusterRole", None, "mcsdns-reader")
    assert role is not None and role["rules"] == policy_rules(READER)
    assert b.api.get("ServiceAccount", NS, "mcsdns-member") is None  # no writer account made
    assert yaml.safe_load(reader.read_text())["users"][0]["name"] == "mcsdns-reader"
    b.api.requests.clear()
    run = subprocess.run([sys.executable, "-m", "mcsdns.controller", "--once", "--local", "a",
                          "--cluster", f"a={a.kubeconfig}", "--cluster", f"b={reader}"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert a.kube.imported("shop", "web")["status"]["clusters"] == [{"cluster": "west"}]
    assert not [m for m, _ in b.api.requests if m != "GET"]  # b only read
    assert b.kube.serviceimport("shop", "web") is None
    member = Client.load(str(reader), None)
    assert [s["metadata"]["name"] for s in member.list("/api/v1/namespaces/shop/services")] == ["web"]
    se = member.get(f"{MCS}/namespaces/shop/serviceexports/web")
    for method, path, body in (
            ("POST", "/api/v1/namespaces/shop/services", {}),
            ("PUT", f"{MCS}/namespaces/shop/serviceexports/web/status", se),
            ("POST", f"{MCS}/namespaces/shop/serviceimports", {}),
            ("DELETE", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/web-abc", None),
            ("GET", "/api/v1/secrets", None)):
        with pytest.raises(Rejected) as e:
            member.request(method, path, body=body)
        assert e.value.status == 403 and USER in str(e.value.body), (method, path)
    rc, _, err = mcsdns("leave", "b", "--kubeconfig", str(b.kubeconfig))
    assert rc == 0, err
    for kind, ns in (("ClusterRoleBinding", None), ("ServiceAccount", NS), ("ClusterRole", None)):
        assert b.api.get(kind, ns, "mcsdns-reader") is None, kind
    with pytest.raises(Rejected) as e:
        member.get("/api/v1/namespaces")
    assert e.value.status == 401


def test_read_only_with_a_lease_namespace_is_refused_in_one_line(clusters2: list[Cluster],
                                                                  tmp_path: Path) -> None:
    _, b = clusters2
    rc, _, err = mcsdns("join", "b", "--kubeconfig", str(b.kubeconfig), "--read-only", "--lease-namespace",
                        "x", "--output", str(tmp_path / "k"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "a reader holds no Lease" in err, err
    assert b.api.get("ServiceAccount", NS, "mcsdns-reader") is None
