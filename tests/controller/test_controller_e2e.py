"""`mcsdns controller` end to end: test API servers as member clusters, the real kubernetes client,
the controller as a process, and `mcsdns serve` answering from what it wrote."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import dns.rcode
import dns.rdatatype
import yaml
from support.controller_checks import CIDR, a_records, cidr_args_for, with_status
from support.controller_env import Cluster, Controller, eventually, run_controller, shop
from support.helpers import run_server

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/mcsdns-controller"
WRITE_LOG = re.compile(r"cluster \w+: (create|update|delete) |ServiceExport .* status:")


def test_export_clustersetip_and_headless_reach_dns_in_other_cluster(clusters3: list[Cluster],
                                                                   tmp_path: Path) -> None:
    a, b, _c = clusters3
    shop(a, (a, b))
    with run_controller(cidr_args_for(*clusters3), tmp_path):
        si = eventually(lambda: with_status(b.kube.serviceimport("shop", "web")), what="ServiceImport in B")
        ip = si["spec"]["ips"][0]
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(CIDR)
        assert si["spec"]["type"] == "ClusterSetIP" and si["spec"]["ipFamilies"] == ["IPv4"]
        assert [p["port"] for p in si["spec"]["ports"]] == [80]
        assert si["status"]["clusters"] == [{"cluster": "east"}]
        # the namespace does not exist in the third cluster: nothing imported there
        assert _c.kube.serviceimport("shop", "web") is None
        # the exporting cluster imports too, with the same ClusterSetIP
        eventually(lambda: (a.kube.serviceimport("shop", "web") or {}).get("spec", {}).get("ips") == [ip],
                   what="same ClusterSetIP in A")
        conds = eventually(lambda: (lambda c: c if c.get("Ready", {}).get("status") == "True" else None)(
            a.kube.conditions("shop", "web")), what="Ready on the export")
        assert conds["Valid"]["status"] == "True" and conds["Conflict"]["status"] == "False"
        sl = eventually(lambda: b.kube.imported_slices("shop", "db"), what="imported slices for db")
        labels = sl[0]["metadata"]["labels"]
        assert labels["multicluster.kubernetes.io/source-cluster"] == "east"
        assert labels["endpointslice.kubernetes.io/managed-by"] == "mcsdns-controller"
        owner = sl[0]["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "ServiceImport" and owner["uid"] == b.kube.imported("shop", "db")[
            "metadata"]["uid"]
        # what the controller wrote in B, served by `mcsdns serve` from a manifest directory
        d = tmp_path / "b-objects"
        d.mkdir()
        objs = b.kube.items("/apis/multicluster.x-k8s.io/v1beta1/serviceimports") + b.kube.items(
            "/apis/discovery.k8s.io/v1/endpointslices",
            "endpointslice.kubernetes.io/managed-by=mcsdns-controller")
        (d / "objects.yaml").write_text(yaml.safe_dump_all(objs))
        with run_server(["--manifests", str(d)], tmp_path) as srv:
            assert a_records(srv, "web.shop.svc.clusterset.local.") == {ip}
            assert a_records(srv, "db.shop.svc.clusterset.local.") == {"10.1.0.7", "10.1.0.8"}
            assert a_records(srv, "db-0.east.db.shop.svc.clusterset.local.") == {"10.1.0.7"}


def test_dns_server_watching_another_cluster(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    shop(a, clusters2, web=("10.1.0.5",))
    with run_controller(cidr_args_for(a, b), tmp_path), \
            run_server(["--kubeconfig", str(b.kubeconfig)], tmp_path) as srv:
        si = eventually(lambda: with_status(b.kube.serviceimport("shop", "web")), what="ServiceImport in B")
        ip = si["spec"]["ips"][0]
        eventually(lambda: a_records(srv, "web.shop.svc.clusterset.local.") == {ip},
                   what="ClusterSetIP answer from the server watching B")
        eventually(lambda: a_records(srv, "db.shop.svc.clusterset.local.") == {"10.1.0.7", "10.1.0.8"},
                   what="headless answer")
        assert a_records(srv, "db-1.east.db.shop.svc.clusterset.local.") == {"10.1.0.8"}
        a.kube.unexport("shop", "db")
        eventually(lambda: srv.query("db.shop.svc.clusterset.local.", "A").rcode() == dns.rcode.NXDOMAIN,
                   what="NXDOMAIN after un-export")


def test_invalid_exports_get_valid_false(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    a.kube.namespace("ns")
    a.kube.export("ns", "ghost")
    a.kube.service("ns", "ext", type_="ExternalName")
    a.kube.export("ns", "ext")
    with run_controller(cidr_args_for(a, b), tmp_path):
        c = eventually(lambda: a.kube.conditions("ns", "ghost").get("Valid"), what="Valid on ghost")
        assert (c["status"], c["reason"]) == ("False", "NoService")
        c = eventually(lambda: a.kube.conditions("ns", "ext").get("Valid"), what="Valid on ext")
        assert (c["status"], c["reason"]) == ("False", "InvalidServiceType")
        assert a.kube.serviceimport("ns", "ghost") is None and a.kube.serviceimport("ns", "ext") is None


def test_conflicts_merge_ports_and_name_the_oldest_cluster(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
    a.kube.service("ns", "api", ports=(("http", 80, "TCP"),))
    a.kube.endpoints("ns", "api", "api-a", [("10.1.0.1", None)])
    a.kube.export("ns", "api")  # older: wins
    b.kube.service("ns", "api", ports=(("http", 8080, "TCP"), ("grpc", 9090, "TCP")), headless=True)
    b.kube.endpoints("ns", "api", "api-b", [("10.2.0.1", None)])
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    b.kube.export("ns", "api")
    with run_controller(cidr_args_for(a, b), tmp_path):
        def conflicted(cl: Cluster) -> dict[str, str] | None:
            c = cl.kube.conditions("ns", "api").get("Conflict")
            return c if c and c["status"] == "True" else None

        for cl in (a, b):
            c = eventually(lambda cl=cl: conflicted(cl), what=f"Conflict on {cl.name}")
            assert c["reason"] == "TypeConflict"  # the first of several, all in the message
            assert '"east"' in c["message"] and "Conflicting ports" in c["message"]
        si = b.kube.imported("ns", "api")
        assert si["spec"]["type"] == "ClusterSetIP"
        assert sorted((p["name"], p["port"]) for p in si["spec"]["ports"]) == [("grpc", 9090), ("http", 80)]
        assert eventually(lambda: b.kube.source_clusters("ns", "api") == {"east", "west"})


def test_unexport_removes_slices_then_import(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
        cl.kube.service("ns", "web")
        cl.kube.endpoints("ns", "web", f"web-{cl.name}", [("10.9.0.1" if cl is a else "10.9.0.2", None)])
        cl.kube.export("ns", "web")
    with run_controller(cidr_args_for(a, b), tmp_path):
        eventually(lambda: a.kube.source_clusters("ns", "web") == {"east", "west"}, what="both sources")
        a.kube.unexport("ns", "web")
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.source_clusters("ns", "web") == {"west"},
                       what="east slices gone")
            si = cl.kube.serviceimport("ns", "web")
            assert si is not None and si["status"]["clusters"] == [{"cluster": "west"}]
        b.kube.unexport("ns", "web")
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.serviceimport("ns", "web") is None, what="import gone")
            eventually(lambda cl=cl: not cl.kube.imported_slices("ns", "web"), what="slices gone")


def test_lost_cluster_endpoints_expire_and_return(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
        cl.kube.service("ns", "web", headless=True)
        cl.kube.endpoints("ns", "web", f"web-{cl.name}", [("10.9.0.1" if cl is a else "10.9.0.2", None)])
        cl.kube.export("ns", "web")
    name = "web.ns.svc.clusterset.local."
    with run_controller(cidr_args_for(a, b, ttl=3), tmp_path) as ctl, \
            run_server(["--kubeconfig", str(b.kubeconfig)], tmp_path) as srv:
        eventually(lambda: a_records(srv, name) == {"10.9.0.1", "10.9.0.2"}, what="both clusters in DNS")
        stopped = time.monotonic()
        a.stop()
        time.sleep(0.8)
        kept = a_records(srv, name)
        # the last good read of A was at most ~1.2 s (one resync + a pass) before the stop: an
        # answer back before stop + 3 - 1.2 s is within the TTL (load can only make it later)
        if time.monotonic() - stopped < 3 - 1.2:
            assert kept == {"10.9.0.1", "10.9.0.2"}  # within the TTL: kept
        else:
            print("\nthe answer came after the TTL could have passed: kept not checked")
        eventually(lambda: a_records(srv, name) == {"10.9.0.2"},
                   what="east endpoints gone from DNS in west after the TTL")
        assert b.kube.source_clusters("ns", "web") == {"west"}
        si = b.kube.serviceimport("ns", "web")
        assert si is not None and si["status"]["clusters"] == [{"cluster": "west"}]
        a.start()
        eventually(lambda: a_records(srv, name) == {"10.9.0.1", "10.9.0.2"},
                   what="east endpoints back")
        assert b.kube.source_clusters("ns", "web") == {"east", "west"}
        ctl.logged("cluster a unreachable")


def test_restart_makes_no_writes_and_keeps_clustersetips(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
    for svc in ("api", "web"):
        a.kube.service("ns", svc)
        a.kube.endpoints("ns", svc, f"{svc}-a", [("10.9.0.1", None)])
        a.kube.export("ns", svc)
    b.kube.service("ns", "db", headless=True)
    b.kube.endpoints("ns", "db", "db-b", [("10.9.0.2", "db-0")])
    b.kube.export("ns", "db")
    with run_controller(cidr_args_for(a, b), tmp_path, name="first"):
        eventually(lambda: all(cl.kube.conditions("ns", svc).get("Ready", {}).get("status") == "True"
                               for cl, svc in ((a, "web"), (a, "api"), (b, "db"))), what="all Ready")
        eventually(lambda: len(a.kube.imported_slices("ns", "db")) == 1, what="slices")
        ips = {svc: b.kube.imported("ns", svc)["spec"]["ips"][0] for svc in ("api", "web")}
        # free the lowest address: a restarted allocator that did not recover would reuse it
        low = min(ips, key=lambda s: ipaddress.ip_address(ips[s]))
        high = "web" if low == "api" else "api"
        a.kube.unexport("ns", low)
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.serviceimport("ns", low) is None
                       and not cl.kube.imported_slices("ns", low), what="the freed one gone")
        time.sleep(0.5)
    before = (a.writes(), b.writes())
    with run_controller(cidr_args_for(a, b), tmp_path, name="second") as ctl:
        eventually(ctl.ready, what="first pass")
        time.sleep(2.5)  # several passes (resync 1 s)
        assert (a.writes(), b.writes()) == before, ctl.logs()
        assert b.kube.imported("ns", high)["spec"]["ips"] == [ips[high]]
        # and a new service does not get an address in use
        a.kube.service("ns", "new")
        a.kube.export("ns", "new")
        si = eventually(lambda: b.kube.serviceimport("ns", "new"), what="new import")
        assert si["spec"]["ips"] != [ips[high]]


def stamp(t: str) -> float:
    """An RFC 3339 (Micro)Time of the API as a Unix time."""
    return datetime.fromisoformat(t).timestamp()


@contextlib.contextmanager
def two_replicas(a: Cluster, b: Cluster, tmp_path: Path,
                 lease_duration: str) -> Iterator[tuple[Controller, Controller, dict[str, Any]]]:
    """Replicas "one" and "two" with leader election, once web (exported in a) is imported in b:
    both and the Lease."""
    for cl in (a, b):
        cl.kube.namespace("ns")
        cl.kube.namespace("kube-system")
    a.kube.service("ns", "web")
    a.kube.export("ns", "web")
    le = ("--leader-elect", "--lease-cluster", "a", "--lease-duration", lease_duration)
    one_args, two_args = (cidr_args_for(a, b, extra=(*le, "--identity", i)) for i in ("one", "two"))
    with run_controller(one_args, tmp_path, name="one") as one, \
            run_controller(two_args, tmp_path, name="two") as two:
        eventually(lambda: b.kube.serviceimport("ns", "web"), what="import")
        lease = a.kube.get(LEASE)
        assert lease is not None
        yield one, two, lease


def test_two_replicas_only_the_leader_writes(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    with two_replicas(a, b, tmp_path, "2") as (one, two, held):
        leader = held["spec"]["holderIdentity"]
        assert leader in ("one", "two")
        follower = two if leader == "one" else one
        a.kube.service("ns", "db")
        a.kube.export("ns", "db")
        eventually(lambda: b.kube.serviceimport("ns", "db"), what="second import")
        time.sleep(0.5)
        assert eventually(follower.ready), "a follower is ready"
        assert WRITE_LOG.search((one if leader == "one" else two).logs())
        assert not WRITE_LOG.search(follower.logs()), follower.logs()
        # the leader crashes (no release): the other one takes over once the lease expires
        (one if leader == "one" else two).proc.kill()
        a.kube.service("ns", "api")
        a.kube.export("ns", "api")
        eventually(lambda: b.kube.serviceimport("ns", "api"), what="import by the new leader")
        assert "create ServiceImport ns/api" in follower.logs()
        lease = a.kube.get(LEASE)
        assert lease is not None and lease["spec"]["holderIdentity"] != leader
        assert lease["spec"]["leaseTransitions"] == 1


def test_v1alpha1_member_dual_stack_and_late_namespace(tmp_path: Path) -> None:
    a = Cluster("a", "east", tmp_path)
    old = Cluster("old", "legacy", tmp_path, mcs_version="v1alpha1")
    try:
        a.kube.namespace("ns")
        a.kube.service("ns", "web", dual_stack=True)
        a.kube.endpoints("ns", "web", "web-a", [("10.9.0.1", None)])
        a.kube.export("ns", "web")
        args = cidr_args_for(a, old, extra=("--clusterset-cidr", "fd00:77::/120"))
        with run_controller(args, tmp_path):
            si = eventually(lambda: with_status(a.kube.serviceimport("ns", "web")), what="import in A")
            assert si["apiVersion"] == "multicluster.x-k8s.io/v1beta1"
            assert si["spec"]["ipFamilies"] == ["IPv4", "IPv6"]
            v4, v6 = map(ipaddress.ip_address, si["spec"]["ips"])
            assert v4 in ipaddress.ip_network(CIDR) and v6 in ipaddress.ip_network("fd00:77::/120")
            assert si["status"]["endpointSliceObjects"] == "Present"
            time.sleep(0.5)
            assert old.kube.serviceimport("ns", "web") is None  # no namespace there yet
            old.kube.namespace("ns")
            si2 = eventually(lambda: old.kube.serviceimport("ns", "web"), what="import once the ns exists")
            assert si2["apiVersion"] == "multicluster.x-k8s.io/v1alpha1"
            assert si2["spec"]["ips"] == si["spec"]["ips"]
            assert "endpointSliceObjects" not in si2.get("status", {})
            sl = eventually(lambda: old.kube.imported_slices("ns", "web"), what="slices in the old one")
            assert sl[0]["metadata"]["ownerReferences"][0]["apiVersion"] == "multicluster.x-k8s.io/v1alpha1"
    finally:
        a.close()
        old.close()


def test_objects_of_others_are_left_alone(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
    theirs = {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
              "metadata": {"name": "web", "namespace": "ns"},
              "spec": {"type": "Headless", "ports": [{"port": 1, "protocol": "TCP"}]}}
    b.kube.create("/apis/multicluster.x-k8s.io/v1beta1/namespaces/ns/serviceimports", theirs)
    foreign_slice = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": "other-mcs-web", "namespace": "ns",
                                  "labels": {"multicluster.kubernetes.io/service-name": "gone",
                                             "multicluster.kubernetes.io/source-cluster": "east",
                                             "endpointslice.kubernetes.io/managed-by": "other-controller"}},
                     "addressType": "IPv4", "endpoints": [], "ports": []}
    b.kube.create("/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices", foreign_slice)
    a.kube.service("ns", "web")
    a.kube.export("ns", "web")
    with run_controller(cidr_args_for(a, b), tmp_path) as ctl:
        c = eventually(lambda: (lambda r: r if r and r["status"] == "False" else None)(
            a.kube.conditions("ns", "web").get("Ready")), what="Ready=False")
        assert "west" in c["message"] and "managed by someone else" in c["message"]
        eventually(lambda: a.kube.serviceimport("ns", "web"), what="import in A")
        eventually(ctl.ready)
        time.sleep(1.5)
        si = b.kube.imported("ns", "web")
        assert si["spec"]["type"] == "Headless" and si["spec"]["ports"][0]["port"] == 1
        assert b.kube.imported_slices("ns", "gone")  # not ours: not deleted


def test_watches_trigger_passes_and_errors_are_retried(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
    a.kube.service("ns", "web")
    args = [arg if arg != "1" else "600" for arg in cidr_args_for(a, b)]  # --resync 600: only watches
    assert "600" in args
    with run_controller(args, tmp_path) as ctl:
        eventually(ctl.ready, what="first pass")
        time.sleep(1.5)  # watches established
        t0 = time.monotonic()
        a.kube.export("ns", "web")
        # --resync 600: an import before then came through a watch
        eventually(lambda: b.kube.serviceimport("ns", "web"), what="import via watch")
        print(f"\nimport {time.monotonic() - t0:.2f} s after the export (resync 600 s)")
        b.api.fail_next(4, 500)  # B fails the next requests of the controller: retried
        a.kube.endpoints("ns", "web", "web-a", [("10.9.0.1", None)])
        # no fixture reads from B meanwhile: the failures are the controller's
        eventually(lambda: re.search(r"cluster b: EndpointSlice ns/web: .*: 500 ", ctl.logs()),
                   what="controller saw the errors")
        eventually(lambda: b.kube.imported_slices("ns", "web"), what="slice after errors")


def test_sigterm_releases_the_lease_and_the_standby_takes_over_at_once(
        clusters2: list[Cluster], tmp_path: Path) -> None:
    """SIGTERM: the leader releases its Lease (no holder, 1 s, renewed now, as client-go's
    ReleaseOnCancel), so the standby leads within about RetryPeriod (2 s), not the 15 s
    lease duration."""
    a, b = clusters2
    with two_replicas(a, b, tmp_path, "15") as (one, two, held):
        leader, rv = held["spec"]["holderIdentity"], held["metadata"]["resourceVersion"]
        follower = "two" if leader == "one" else "one"
        eventually((two if leader == "one" else one).ready, what="a ready follower")
        last = a.kube.get(LEASE)
        assert last is not None and last["spec"]["holderIdentity"] == leader
        t0 = time.monotonic()
        (one if leader == "one" else two).proc.terminate()
        eventually(lambda: (a.kube.get(LEASE) or {})["spec"]["holderIdentity"] == follower,
                   what="the standby holding the lease")
        took = time.monotonic() - t0
        print(f"\nstandby leads {took:.2f} s after SIGTERM to the leader (lease duration 15 s)")
        # the standby acquired it before the leader's last renewal would have expired: released,
        # not waited out (the Lease's own times, in the order the API server wrote them)
        now = a.kube.get(LEASE)
        assert now is not None
        expiry = stamp(last["spec"]["renewTime"]) + last["spec"]["leaseDurationSeconds"]
        assert stamp(now["spec"]["acquireTime"]) < expiry, (last, now)
        assert (one if leader == "one" else two).proc.wait(10) == 0
        released = "released lease kube-system/mcsdns-controller"
        assert released in (one if leader == "one" else two).logs()
        lease = a.kube.get(LEASE)
        assert lease is not None and lease["metadata"]["resourceVersion"] != rv
        assert lease["spec"]["leaseTransitions"] == 1
        a.kube.service("ns", "api")
        a.kube.export("ns", "api")
        eventually(lambda: b.kube.serviceimport("ns", "api"), what="import by the new leader")
