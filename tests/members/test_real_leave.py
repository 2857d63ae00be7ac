"""`mcsdns leave` on a real kube-apiserver (MCSDNS_REALK8S; skipped without it): it removes
exactly what `mcsdns join` made for that name. The real server runs no namespace
controller, so a deleted namespace stays, Terminating: its `deletionTimestamp` is the
DELETE request itself."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.joins import mcsdns_proc
from support.realk8s import RealK8s, control_plane

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import ApiError

RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealK8s]:
    """A real control plane of its own: join's objects have fixed names, one member per cluster."""
    yield from control_plane("mcsdns-leave", tmp_path_factory)


def _get(k8s: RealK8s, path: str) -> Any:
    code, _, body = k8s.request("GET", path)
    return yaml.safe_load(body) if code == 200 else None


def terminating(k8s: RealK8s, ns: str) -> bool:
    """Whether a DELETE of the namespace was made (no namespace controller finishes it)."""
    obj = _get(k8s, f"/api/v1/namespaces/{ns}")
    assert obj is not None, ns
    return bool(obj["metadata"].get("deletionTimestamp"))


def fresh() -> str:
    return f"jl-{uuid.uuid4().hex[:8]}"


def test_leave_under_another_name_deletes_nothing(member: RealK8s, tmp_path: Path) -> None:
    """Today's main: `leave nosuch` deleted west's ServiceAccount, RBAC and namespace (exit 0),
    and west's token was then refused."""
    ns, out = fresh(), tmp_path / "west.kubeconfig"
    run = mcsdns_proc("join", "west", "--kubeconfig", str(member.kubeconfig), "--namespace", ns, "--output",
                 str(out))
    assert run.returncode == 0, run.stderr
    for name in ("nosuch", "east"):
        run = mcsdns_proc("leave", name, "--kubeconfig", str(member.kubeconfig), "--namespace", ns)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert f"joined as west, not {name}: nothing deleted" in run.stderr, run.stderr
    assert _get(member, f"/api/v1/namespaces/{ns}/serviceaccounts/mcsdns-member") is not None
    assert _get(member, f"{RBAC}/clusterrolebindings/mcsdns-member") is not None
    assert not terminating(member, ns)
    joined = Client.load(str(out), None)
    assert joined.list("/api/v1/namespaces")  # west's token still works
    run = mcsdns_proc("join", "north", "--kubeconfig", str(member.kubeconfig), "--namespace", ns,
                      "--output", "-")
    assert run.returncode == 2 and "joined as west: run `mcsdns leave west` first" in run.stderr, run.stderr

    run = mcsdns_proc("leave", "west", "--kubeconfig", str(member.kubeconfig), "--namespace", ns)
    assert run.returncode == 0, run.stderr
    assert f"namespace {ns} (made by join): deleted" in run.stderr, run.stderr
    assert terminating(member, ns)
    with pytest.raises(ApiError) as e:
        joined.list("/api/v1/namespaces")
    assert e.value.status in (401, 403)


def test_leave_keeps_the_members_secrets_namespace_and_removes_the_lease_grant(member: RealK8s) -> None:
    """The controller's cluster is also a member; join made the namespace that then got the
    members Secret. Today's main deleted that namespace (and every member's key with it),
    and without --lease-namespace left the lease Role, RoleBinding and namespace."""
    ns, lease_ns = fresh(), fresh()
    k = str(member.kubeconfig)
    run = mcsdns_proc("join", "east", "--kubeconfig", k, "--namespace", ns, "--lease-namespace", lease_ns,
                 "--controller-kubeconfig", k, "--secret", f"{ns}/mcsdns-members")
    assert run.returncode == 0, run.stderr
    run = mcsdns_proc("leave", "east", "--kubeconfig", k, "--namespace", ns)
    assert run.returncode == 0, run.stderr
    assert f"namespace {ns}: kept (holds secret/mcsdns-members)" in run.stderr, run.stderr
    assert not terminating(member, ns)
    secret = _get(member, f"/api/v1/namespaces/{ns}/secrets/mcsdns-members")
    assert secret is not None and "east" in secret["data"]
    for kind in ("roles", "rolebindings"):
        assert _get(member, f"{RBAC}/namespaces/{lease_ns}/{kind}/mcsdns-member-lease") is None, kind
    assert terminating(member, lease_ns)
    labels = _get(member, f"/api/v1/namespaces/{lease_ns}")["metadata"]["labels"]
    assert labels["mcsdns.io/created-by"] == "mcsdns-join" and labels["mcsdns.io/member"] == "east"
    assert _get(member, f"/api/v1/namespaces/{ns}/serviceaccounts/mcsdns-member") is None
    assert _get(member, f"{RBAC}/clusterrolebindings/mcsdns-member") is None


def test_join_verifies_tls_in_what_it_writes(member: RealK8s, tmp_path: Path) -> None:
    """An admin kubeconfig that skips TLS verification: join refuses it (today's main wrote
    `insecure-skip-tls-verify: true` into the member kubeconfig); given the CA, the member
    kubeconfig verifies the real server with it."""
    cfg = yaml.safe_load(member.kubeconfig.read_text())
    entry = cfg["clusters"][0]["cluster"]
    ca = base64.b64decode(entry.pop("certificate-authority-data")).decode()
    entry["insecure-skip-tls-verify"] = True
    insecure, ca_file, out = tmp_path / "insecure", tmp_path / "ca.crt", tmp_path / "member"
    insecure.write_text(yaml.safe_dump(cfg))
    ca_file.write_text(ca)
    ns = fresh()
    run = mcsdns_proc("join", "west", "--kubeconfig", str(insecure), "--namespace", ns, "--output", str(out))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--insecure-skip-tls-verify" in run.stderr
    assert _get(member, f"/api/v1/namespaces/{ns}") is None
    run = mcsdns_proc("join", "west", "--kubeconfig", str(insecure), "--namespace", ns, "--output", str(out),
                 "--certificate-authority", str(ca_file))
    assert run.returncode == 0, run.stderr
    written = yaml.safe_load(out.read_text())["clusters"][0]["cluster"]
    assert "insecure-skip-tls-verify" not in written and written["certificate-authority-data"]
    assert Client.load(str(out), None).list("/api/v1/namespaces")
    run = mcsdns_proc("leave", "west", "--kubeconfig", str(member.kubeconfig), "--namespace", ns)
    assert run.returncode == 0, run.stderr


def test_leave_refused_the_lease_deletes_nothing_then_deletes_it(member: RealK8s) -> None:
    """The member is also the Lease cluster. A --lease-kubeconfig that may not delete Leases
    (a ServiceAccount with no role): one line naming the permission, exit 1, nothing deleted.
    With the admin's: the Lease `mcsdns-member-NAME` goes, the one of another member stays."""
    ns, lease_ns = fresh(), fresh()
    k = str(member.kubeconfig)
    run = mcsdns_proc("join", "south", "--kubeconfig", k, "--namespace", ns, "--lease-namespace", lease_ns,
                 "--output", "-")
    assert run.returncode == 0, run.stderr
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{lease_ns}/leases"
    for name in ("mcsdns-member-south", "mcsdns-member-north"):
        member.json("POST", leases, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                     "metadata": {"name": name}, "spec": {"holderIdentity": "ctl"}})
    nobody = member.token_for(ns, "nobody")
    run = mcsdns_proc("leave", "south", "--kubeconfig", k, "--namespace", ns, "--lease-namespace", lease_ns,
                 "--lease-kubeconfig", str(nobody))
    assert run.returncode == 1 and run.stderr == (
        f"mcsdns leave: south: may not delete leases.coordination.k8s.io in namespace {lease_ns} of the "
        f"lease cluster (--lease-kubeconfig {nobody}): nothing deleted\n"), run.stderr
    assert _get(member, f"/api/v1/namespaces/{ns}/serviceaccounts/mcsdns-member") is not None
    assert _get(member, f"{leases}/mcsdns-member-south") is not None
    run = mcsdns_proc("leave", "south", "--kubeconfig", k, "--namespace", ns, "--lease-namespace", lease_ns,
                 "--lease-kubeconfig", k)
    assert run.returncode == 0, run.stderr
    assert f"south (lease cluster): lease {lease_ns}/mcsdns-member-south: deleted" in run.stderr, run.stderr
    assert _get(member, f"{leases}/mcsdns-member-south") is None
    assert _get(member, f"{leases}/mcsdns-member-north") is not None
