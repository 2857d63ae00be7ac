"""`mcsdns leave NAME` removes exactly what `mcsdns join NAME` made (test API servers, whose
request log shows every DELETE): join records the member name on everything it makes;
leave refuses another name, or none, before any write; it never deletes a namespace that
holds something join did not make (the members Secret above all) and finds the lease
Roles and namespace join made without being told. And join writes inline data only: no
user info of the server URL, `insecure-skip-tls-verify` only with its flag."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml
from support.controller_env import Cluster
from support.joins import NS, join, mcsdns, secret_key

from mcsdns.kube.apiclient.client import Client

WRITES = ("POST", "PUT", "PATCH", "DELETE")
MEMBER = "mcsdns.io/member"
JOINED = (("ServiceAccount", NS, "mcsdns-member"), ("ClusterRoleBinding", None, "mcsdns-member"),
          ("ClusterRole", None, "mcsdns-controller"), ("Namespace", None, NS))


def writes(c: Cluster) -> list[tuple[str, str]]:
    return [(m, p.split("?")[0]) for m, p in c.api.requests if m in WRITES]


def deletes(c: Cluster) -> list[str]:
    return [p for m, p in writes(c) if m == "DELETE"]


def test_leave_under_another_name_refuses_before_any_write(clusters2: list[Cluster], tmp_path: Path) -> None:
    """Today's main: `leave nosuch` deleted west's account, RBAC and namespace, exit 0 (and
    with --controller-kubeconfig the key of the member really named so)."""
    a, b = clusters2
    a.kube.namespace(NS)
    out = tmp_path / "west.kubeconfig"
    join(b, a, "west", "--output", str(out))
    join(a, a, "east", "--output", "-", "--controller-kubeconfig", str(a.kubeconfig))
    a.api.requests.clear()
    b.api.requests.clear()
    for name in ("nosuch", "east"):
        rc, _, err = mcsdns("leave", name, "--kubeconfig", str(b.kubeconfig), "--controller-kubeconfig",
                            str(a.kubeconfig))
        assert rc == 2 and err == (f"mcsdns leave: {name}: this cluster was joined as west, not {name}: "
                                   "nothing deleted (`mcsdns leave west` removes it)\n"), err
    assert writes(a) == [] and writes(b) == []
    assert secret_key(a, "east") is not None and secret_key(a, "west") is not None
    Client.load(str(out), None).list("/api/v1/namespaces")  # west's token still works
    for kind, ns, name in JOINED:
        obj = b.api.get(kind, ns, name)
        assert obj is not None and obj["metadata"]["labels"][MEMBER] == "west", obj

    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(a.kubeconfig))  # a is "east"
    assert rc == 2 and "joined as east, not west" in err, err
    rc, _, err = mcsdns("join", "north", "--kubeconfig", str(b.kubeconfig), "--output", "-")
    assert rc == 2 and err == ("mcsdns join: north: this cluster is joined as west: run `mcsdns leave west` "
                               "first (or join it again as west); nothing changed\n"), err
    assert writes(b) == []


def test_leave_of_a_cluster_never_joined_refuses(clusters2: list[Cluster]) -> None:
    _, b = clusters2
    b.api.requests.clear()
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig))
    assert rc == 2 and err.count("\n") == 1 and "not joined to this cluster" in err, err
    assert writes(b) == []


def test_the_members_secret_keeps_its_namespace(clusters2: list[Cluster]) -> None:
    """The controller's cluster is also a member: join made mcsdns-system there, then the
    members Secret went into it. Today's main deleted the namespace (and so every key)."""
    a, _ = clusters2
    join(a, a, "east", "--controller-kubeconfig", str(a.kubeconfig))
    made = a.api.get("Namespace", None, NS)
    assert made is not None and made["metadata"]["labels"]["mcsdns.io/created-by"] == "mcsdns-join"
    a.api.requests.clear()
    rc, _, err = mcsdns("leave", "east", "--kubeconfig", str(a.kubeconfig))
    assert rc == 0, err
    assert "namespace mcsdns-system: kept (holds secret/mcsdns-members)" in err, err
    assert f"/api/v1/namespaces/{NS}" not in deletes(a)
    assert sorted(deletes(a)) == sorted([
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/mcsdns-member",
        f"/api/v1/namespaces/{NS}/serviceaccounts/mcsdns-member",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/mcsdns-controller"])
    assert secret_key(a, "east") is not None


def test_leave_finds_the_lease_rbac_and_namespace_join_made(clusters2: list[Cluster]) -> None:
    """Today's main: without --lease-namespace the Role, RoleBinding and namespace stayed."""
    a, b = clusters2
    join(b, a, "west", "--output", "-", "--lease-namespace", "leases")
    join(a, a, "east", "--output", "-", "--lease-namespace", "leases2")
    a.api.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",  # the controller's, not join's
               "metadata": {"name": "mcsdns-controller", "namespace": "leases2"}, "spec": {}})
    for c, name, ns in ((b, "west", "leases"), (a, "east", "leases2")):
        c.api.requests.clear()
        rc, _, err = mcsdns("leave", name, "--kubeconfig", str(c.kubeconfig))
        assert rc == 0, err
        for kind in ("rolebinding", "role"):
            assert f"{kind} {ns}/mcsdns-member-lease: deleted" in err, err
        assert not c.api.objects("Role") and not c.api.objects("RoleBinding")
    assert "/api/v1/namespaces/leases" in deletes(b) and b.api.get("Namespace", None, "leases") is None
    assert "namespace leases2: kept (holds lease.coordination.k8s.io/mcsdns-controller)" in err, err
    assert "/api/v1/namespaces/leases2" not in deletes(a)


def test_an_older_joins_unlabelled_objects_need_force(clusters2: list[Cluster]) -> None:
    _, b = clusters2
    join(b, b, "west", "--output", "-")
    for kind, ns, name in JOINED:
        obj = b.api.get(kind, ns, name)
        assert obj is not None
        del obj["metadata"]["labels"][MEMBER]
        b.api.put(obj)
    b.api.requests.clear()
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig))
    assert rc == 2 and "record no member name (made by an older mcsdns join): nothing deleted; give " \
        "--force" in err, err
    assert writes(b) == []
    b.kube.create(f"/api/v1/namespaces/{NS}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                         "metadata": {"name": "app"}})
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig), "--force")
    assert rc == 0, err
    for kind, ns, name in JOINED[:-1]:
        assert b.api.get(kind, ns, name) is None, kind
    assert "namespace mcsdns-system: kept (holds secret/mcsdns-members, configmap/app)" in err, err
    rc, _, err = mcsdns("join", "north", "--kubeconfig", str(b.kubeconfig), "--output", "-")
    assert rc == 0, err  # west has left: another name may join


def _admin(c: Cluster, path: Path, **cluster: object) -> Path:
    cfg = json.loads(c.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"].update(cluster)
    path.write_text(json.dumps(cfg))
    return path


def test_join_writes_no_url_user_info_and_skips_tls_verification_only_when_told(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    url = b.api.url.replace("http://", "http://admin:s3cret@")
    rc, out, err = mcsdns("join", "west", "--kubeconfig", str(_admin(b, tmp_path / "pw", server=url)),
                          "--output", "-", "--controller-kubeconfig", str(a.kubeconfig))
    assert rc == 0, err
    assert "s3cret" not in out + err and "admin@" not in out + err
    assert yaml.safe_load(out)["clusters"][0]["cluster"]["server"] == b.api.url
    secret = a.api.get("Secret", NS, "mcsdns-members")
    assert secret is not None and "s3cret" not in base64.b64decode(secret["data"]["west"]).decode()
    rc, _, err = mcsdns("join", "west", "--kubeconfig", str(b.kubeconfig), "--output", "-", "--server",
                        "https://u:p@west.example:6443")
    assert rc == 2 and "expected an https:// or http:// URL without user@" in err, err

    insecure = _admin(b, tmp_path / "insecure", **{"insecure-skip-tls-verify": True})
    b.api.requests.clear()
    rc, out, err = mcsdns("join", "west", "--kubeconfig", str(insecure), "--output", "-")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "--insecure-skip-tls-verify" in err, err
    assert writes(b) == []
    rc, out, err = mcsdns("join", "west", "--kubeconfig", str(insecure), "--output", "-",
                          "--insecure-skip-tls-verify")
    assert rc == 0 and yaml.safe_load(out)["clusters"][0]["cluster"]["insecure-skip-tls-verify"] is True, err
    ca = tmp_path / "ca.pem"
    ca.write_text(CA)
    rc, out, err = mcsdns("join", "west", "--kubeconfig", str(insecure), "--output", "-",
                          "--certificate-authority", str(ca))
    entry = yaml.safe_load(out)["clusters"][0]["cluster"]
    assert rc == 0 and "insecure-skip-tls-verify" not in entry, err
    assert base64.b64decode(entry["certificate-authority-data"]).decode() == CA
    rc, out, err = mcsdns("join", "west", "--kubeconfig", str(insecure), "--output", "-",
                          "--certificate-authority", str(ca), "--insecure-skip-tls-verify")
    assert rc == 2 and "kubectl refuses both" in err, err


CA = """-----BEGIN CERTIFICATE-----
MIIBiDCCAS+gAwIBAgIUR8sKZZQ/3JPQEWkszmIiIfL0g58wCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwObWNzZG5zLXRlc3QtY2EwIBcNMjYxMjAzMTk0MzEyWhgPMjEy
NjExMDkxOTQzMTJaMBkxFzAVBgNVBAMMDm1jc2Rucy10ZXN0LWNhMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEZ5KVJAtegv6cC9+GvtJeSJy+X+omifJUVwthffLs
Ef1xSO0/QOpDhPoDqx5ASDeXH1/jDAaa6Ixb5WH5S3MLvKNTMFEwHQYDVR0OBBYE
FAe4uYxs0DoT8a2U7T6FVOPAphy4MB8GA1UdIwQYMBaAFAe4uYxs0DoT8a2U7T6F
VOPAphy4MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgI4BYwEfA
L6mOKrbJhALKC7/DZweh0nykWUh6evHeAFsCIHByqyi+fS7iZHe9R0s5N4kDWGxP
YZfouJzOHTtgKLWF
-----END CERTIFICATE-----
"""  # a self-signed test CA (no key kept)


def test_leave_finds_the_account_in_the_namespace_join_was_given(clusters2: list[Cluster]) -> None:
    """join --namespace X, leave without it: the binding names X (main left X's account)."""
    a, b = clusters2
    join(b, a, "west", "--namespace", "elsewhere")
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig))
    assert rc == 0, err
    assert "serviceaccount elsewhere/mcsdns-member (and so its tokens): deleted" in err, err
    assert "namespace elsewhere (made by join): deleted" in err, err
    assert b.api.get("ServiceAccount", "elsewhere", "mcsdns-member") is None


def test_a_namespace_whose_contents_cannot_be_listed_is_kept(clusters2: list[Cluster]) -> None:
    _, b = clusters2
    join(b, b, "west", "--output", "-", "--lease-namespace", "leases")
    b.api.deny("pods", ["list"])
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig))
    assert rc == 0 and "namespace leases: kept (holds pods: 403 Forbidden)" in err, err
    assert b.api.get("Namespace", None, "leases") is not None
