"""What `mcsdns leave` leaves marked or cleaned (test API servers): each ServiceExport of the
member says Ready=False, reason MemberLeft, and the member's Lease `mcsdns-member-NAME` in the
cluster holding the controller's Leases is gone; a running controller, which no longer reads
the member, neither overwrites the one nor writes the other again, and deletes the Lease of a
member removed from --members-dir itself. A caller that may not delete the Lease is refused
before anything is deleted, in one line naming the permission."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from support.controller_env import Cluster, eventually, run_controller, shop
from support.helpers import REPO
from support.joins import NS, join, mcsdns, secret_key

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"


def lease(c: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    return c.kube.get(f"{LEASES.format(ns)}/{name}")


def put_lease(c: Cluster, ns: str, name: str) -> None:
    c.kube.create(LEASES.format(ns), {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                      "metadata": {"name": name}, "spec": {"holderIdentity": "ctl"}})


def test_leave_marks_the_exports_and_deletes_the_member_lease(clusters2: list[Cluster]) -> None:
    """Today's main: west's export still said Ready=True (Exported) and its Lease stayed."""
    a, b = clusters2
    a.kube.namespace(NS)
    shop(b, clusters2, db=False)  # west exports shop/web
    join(b, a, "west")
    subprocess.run([sys.executable, "-m", "mcsdns.controller", "--once", "--cluster", f"a={a.kubeconfig}",
                    "--cluster", f"west={b.kubeconfig}"], check=True, capture_output=True, timeout=120,
                   cwd=REPO)
    before = b.kube.conditions("shop", "web")
    print("before:", {t: (c["status"], c["reason"]) for t, c in before.items()})
    assert before["Ready"]["status"] == "True" and "Conflict" in before
    put_lease(a, NS, "mcsdns-member-west")  # as the controller's deploy/ writes it
    put_lease(a, NS, "mcsdns-member-east")

    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig), "--controller-kubeconfig",
                        str(a.kubeconfig))
    assert rc == 0, err
    print(err)
    after = b.kube.conditions("shop", "web")
    print("after:", {t: (c["status"], c["reason"], c["message"]) for t, c in after.items()})
    ready = after["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "MemberLeft"), after
    assert ready["message"].startswith(f"Member west left the clusterset at {ready['lastTransitionTime']}")
    assert after["Valid"] == before["Valid"] and "Conflict" not in after
    assert lease(a, NS, "mcsdns-member-west") is None
    assert lease(a, NS, "mcsdns-member-east") is not None  # another member's
    assert "west (controller cluster): lease mcsdns-system/mcsdns-member-west: deleted\n" in err, err
    assert "west: serviceexports marked Ready=False (MemberLeft): 1\n" in err, err


def test_leave_refuses_before_deleting_when_it_may_not_delete_the_lease(clusters2: list[Cluster],
                                                                       tmp_path: Path) -> None:
    a, b = clusters2
    a.kube.namespace(NS)
    join(b, a, "west")
    put_lease(a, "kube-system", "mcsdns-member-west")  # the controller's default --lease-namespace
    a.api.rbac.deny("leases", ["delete"])
    b.api.requests.clear()
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig), "--lease-kubeconfig",
                        str(a.kubeconfig))
    assert rc == 1 and err == (
        "mcsdns leave: west: may not delete leases.coordination.k8s.io in namespace mcsdns-system of the "
        f"lease cluster (--lease-kubeconfig {a.kubeconfig}): nothing deleted\n"), err
    assert not [(m, p) for m, p in b.api.requests
                if m in ("POST", "PUT", "DELETE") and "accessreviews" not in p]  # reviews write nothing
    assert b.api.get("ServiceAccount", NS, "mcsdns-member") is not None and secret_key(a, "west") is not None
    a.api.rbac.allow()
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig), "--lease-kubeconfig",
                        str(a.kubeconfig))
    assert rc == 0 and "west (lease cluster): lease kube-system/mcsdns-member-west: deleted\n" in err, err
    assert lease(a, "kube-system", "mcsdns-member-west") is None
    join(b, a, "west")
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig), "--lease-kubeconfig",
                        str(a.kubeconfig), "--lease-namespace", NS)
    missing = "west (lease cluster): lease mcsdns-member-west: not found in namespace mcsdns-system"
    assert rc == 0 and f"{missing} (nothing to delete)\n" in err, err
    join(b, a, "west")
    rc, _, err = mcsdns("leave", "west", "--kubeconfig", str(b.kubeconfig))
    unasked = "west: member lease: not looked for (give --lease-kubeconfig or --controller-kubeconfig)"
    assert rc == 0 and f"{unasked}\n" in err, err


def test_a_running_controller_leaves_the_mark_and_the_lease_gone(clusters2: list[Cluster],
                                                                 tmp_path: Path) -> None:
    """The member leaves --members-dir (leave --output), so the controller stops reading it:
    after its next Lease renewal (a's), b's export still says MemberLeft and b has no Lease."""
    a, b = clusters2
    shop(b, clusters2, db=False)
    d = tmp_path / "members"
    d.mkdir()
    rc, _, err = mcsdns("join", "b", "--kubeconfig", str(b.kubeconfig), "--output", str(d / "b"))
    assert rc == 0, err
    args = ["--cluster", f"a={a.kubeconfig}", "--members-dir", str(d), "--endpoint-ttl", "4"]
    with run_controller(args, tmp_path) as ctl:
        eventually(lambda: (b.kube.conditions("shop", "web").get("Ready") or {}).get("status") == "True",
                   what=f"b's export Ready\n{ctl.logs()}")
        eventually(lambda: lease(a, "kube-system", "mcsdns-member-b"), what="b's Lease")
        rc, _, err = mcsdns("leave", "b", "--kubeconfig", str(b.kubeconfig), "--output", str(d / "b"),
                            "--lease-kubeconfig", str(a.kubeconfig), "--lease-namespace", "kube-system")
        assert rc == 0, err
        eventually(lambda: "cluster b removed" in ctl.logs(), what="b removed")
        seen = (lease(a, "kube-system", "mcsdns-member-a") or {})["metadata"]["resourceVersion"]
        eventually(lambda: (lease(a, "kube-system", "mcsdns-member-a") or {}).get("metadata", {})
                   .get("resourceVersion") != seen, what="a's Lease renewed")
        assert lease(a, "kube-system", "mcsdns-member-b") is None
        assert b.kube.conditions("shop", "web")["Ready"]["reason"] == "MemberLeft"
        assert ctl.proc.poll() is None


def test_the_controller_deletes_the_lease_of_a_member_removed_from_the_members_dir(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    """Without leave (the key deleted by hand): today's main kept `mcsdns-member-b` for good."""
    a, b = clusters2
    d = tmp_path / "members"
    d.mkdir()
    (d / "b").write_bytes(b.kubeconfig.read_bytes())
    with run_controller(["--cluster", f"a={a.kubeconfig}", "--members-dir", str(d)], tmp_path) as ctl:
        eventually(lambda: lease(a, "kube-system", "mcsdns-member-b"), what=f"b's Lease\n{ctl.logs()}")
        (d / "b").unlink()
        eventually(lambda: lease(a, "kube-system", "mcsdns-member-b") is None,
                   what=f"b's Lease gone\n{ctl.logs()}")
        assert lease(a, "kube-system", "mcsdns-member-a") is not None
        ctl.logged("member lease kube-system/mcsdns-member-b deleted: b left")
