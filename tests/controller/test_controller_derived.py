"""`mcsdns controller` in its default mode: derived Services give every ClusterSetIP import a
routable ClusterIP in each importing cluster; event-driven reconciles; bad input; Leases; metrics.
Test API servers as members, the real kubernetes client, the controller as a process."""

from __future__ import annotations

import ipaddress
import json
import re
import time
from pathlib import Path
from typing import Any

import dns.rcode
from support.controller_checks import SVC_LABEL, a_records, args_for, derived, slices_of, source_slice, svc_of
from support.controller_env import IDS, Cluster, eventually, run_controller
from support.helpers import run_server

from mcsdns.controller.probe import PATH as PROBE


def addresses(slices: list[dict[str, Any]], ready_only: bool = True) -> set[str]:
    return {a for s in slices for e in s.get("endpoints") or []
            if not ready_only or (e.get("conditions") or {}).get("ready", True) for a in e["addresses"]}


def test_export_makes_a_derived_service_whose_clusterip_dns_answers(clusters2: list[Cluster],
                                                                    tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("shop")
    a.kube.service("shop", "web", ports=(("http", 80, "TCP"), ("grpc", 9090, "TCP")))
    a.kube.endpoints("shop", "web", "web-abc", [("10.1.0.5", None), ("10.1.0.6", None)])
    a.kube.export("shop", "web")
    with run_controller(args_for(a, b), tmp_path), \
            run_server(["--kubeconfig", str(b.kubeconfig)], tmp_path) as srv:
        si = eventually(lambda: (lambda s: s if s and s["spec"].get("ips") and s.get("status") else None)(
            b.kube.serviceimport("shop", "web")), what="ServiceImport with ips in B")
        svc = svc_of(b, "shop", "web")
        assert svc is not None
        spec = svc["spec"]
        assert si["spec"]["ips"] == spec["clusterIPs"] == [spec["clusterIP"]]
        assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/16")
        assert si["spec"]["ipFamilies"] == spec["ipFamilies"] == ["IPv4"]
        assert spec["type"] == "ClusterIP" and not spec.get("selector")
        assert sorted((p["name"], p["port"]) for p in spec["ports"]) == [("grpc", 9090), ("http", 80)]
        assert svc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "mcsdns-controller"
        owner = svc["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("ServiceImport", "web", si["metadata"]["uid"])
        sl = eventually(lambda: slices_of(b, "shop", "web"), what="imported slices")
        assert {s["metadata"]["labels"][SVC_LABEL] for s in sl} == {derived("shop", "web")}
        assert addresses(sl) == {"10.1.0.5", "10.1.0.6"}
        # the exporting cluster imports too: its own derived Service, its own ClusterIP
        eventually(lambda: svc_of(a, "shop", "web"), what="derived Service in A")
        eventually(lambda: a_records(srv, "web.shop.svc.clusterset.local.") == {spec["clusterIP"]},
                   what="DNS answers B's derived ClusterIP")
        # an endpoint flips to not ready in A: B's slice follows
        a.api.put(source_slice("shop", "web", "web-abc", ["10.1.0.5"]) | {"endpoints": [
            {"addresses": ["10.1.0.5"], "conditions": {"ready": True}},
            {"addresses": ["10.1.0.6"], "conditions": {"ready": False}}]})
        eventually(lambda: addresses(slices_of(b, "shop", "web")) == {"10.1.0.5"}, what="flip seen in B")
        assert addresses(slices_of(b, "shop", "web"), ready_only=False) == {"10.1.0.5", "10.1.0.6"}
        # un-export: slices, derived Service and import go; DNS says NXDOMAIN
        a.kube.unexport("shop", "web")
        for cl in (a, b):
            eventually(lambda cl=cl: svc_of(cl, "shop", "web") is None and not slices_of(cl, "shop", "web")
                       and cl.api.get("ServiceImport", "shop", "web") is None, what=f"all gone in {cl.name}")
        eventually(lambda: srv.query("web.shop.svc.clusterset.local.", "A").rcode() == dns.rcode.NXDOMAIN,
                   what="NXDOMAIN after un-export")
        # the freed ClusterIP went back to B's service range
        assert spec["clusterIP"] not in b.api.ipam.used


def test_dual_stack_and_headless(clusters2: list[Cluster], tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
    a.kube.service("ns", "web", dual_stack=True)
    a.kube.endpoints("ns", "web", "web-a", [("10.9.0.1", None)])
    a.kube.export("ns", "web")
    a.kube.service("ns", "db", headless=True)
    a.kube.endpoints("ns", "db", "db-a", [("10.9.0.2", "db-0")])
    a.kube.export("ns", "db")
    with run_controller(args_for(a, b), tmp_path):
        si = eventually(lambda: (lambda s: s if s and len(s["spec"].get("ips") or []) == 2 else None)(
            b.kube.serviceimport("ns", "web")), what="dual-stack ips")
        svc = svc_of(b, "ns", "web")
        assert svc is not None and svc["spec"]["ipFamilyPolicy"] == "PreferDualStack"
        assert si["spec"]["ips"] == svc["spec"]["clusterIPs"]
        assert si["spec"]["ipFamilies"] == svc["spec"]["ipFamilies"] == ["IPv4", "IPv6"]
        db = eventually(lambda: b.kube.serviceimport("ns", "db"), what="headless import")
        eventually(lambda: slices_of(b, "ns", "db"), what="headless slices")
        assert db["spec"]["type"] == "Headless" and not db["spec"].get("ips")
        assert svc_of(b, "ns", "db") is None  # no VIP for a headless service
        assert SVC_LABEL not in slices_of(b, "ns", "db")[0]["metadata"]["labels"]


def test_bad_input_is_reported_and_foreign_objects_are_left_alone(clusters2: list[Cluster],
                                                                  tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
    # a Service with no ports (the API allows it only headless; ours takes it as is)
    a.api.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "noports", "namespace": "ns"},
               "spec": {"type": "ClusterIP"}})
    a.kube.export("ns", "noports")
    # someone else's Service already has the derived name in B
    foreign = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": derived("ns", "web"), "namespace": "ns", "labels": {"team": "x"}},
               "spec": {"type": "ClusterIP", "ports": [{"port": 1}], "selector": {"app": "x"}}}
    b.api.put(foreign)
    a.kube.service("ns", "web")
    a.kube.endpoints("ns", "web", "web-a", [("10.9.0.1", None)])
    a.kube.export("ns", "web")
    a.kube.service("ns", "api")
    a.kube.export("ns", "api")
    with run_controller(args_for(a, b), tmp_path) as ctl:
        c = eventually(lambda: a.kube.conditions("ns", "noports").get("Valid"), what="Valid on noports")
        assert (c["status"], c["reason"]) == ("False", "NoPorts")
        c = eventually(lambda: (lambda r: r if r and r["status"] == "False" else None)(
            a.kube.conditions("ns", "web").get("Ready")), what="Ready=False on web")
        assert derived("ns", "web") in c["message"] and "west" in c["message"]
        ctl.logged(f"Service ns/{derived('ns', 'web')} exists and is not managed")
        kept = b.api.get("Service", "ns", derived("ns", "web"))
        assert kept is not None and kept["spec"]["selector"] == {"app": "x"}
        assert kept["metadata"]["labels"] == {"team": "x"}
        si = b.kube.serviceimport("ns", "web")
        assert si is not None and not si["spec"].get("ips")  # no VIP rather than someone else's
        # our derived Service deleted by someone: recreated, and the import follows its new ClusterIP
        old = eventually(lambda: (b.kube.serviceimport("ns", "api") or {}).get("spec", {}).get("ips"),
                         what="api ips")
        b.api.delete("Service", "ns", derived("ns", "api"))
        new = eventually(lambda: (lambda s: s["spec"]["clusterIPs"] if s else None)(svc_of(b, "ns", "api")),
                         what="derived Service recreated")
        eventually(lambda: b.kube.imported("ns", "api")["spec"]["ips"] == new, what="ips follow")
        assert new != old
        # the foreign Service goes away: ours takes the name
        b.api.delete("Service", "ns", derived("ns", "web"))
        eventually(lambda: (b.kube.serviceimport("ns", "web") or {}).get("spec", {}).get("ips"),
                   what="web gets a ClusterSetIP")
        eventually(lambda: a.kube.conditions("ns", "web").get("Ready", {}).get("status") == "True",
                   what="web Ready")
        # the exported Service itself is deleted: its import goes, the export says why
        a.api.delete("Service", "ns", "api")
        c = eventually(lambda: (lambda v: v if v and v["status"] == "False" else None)(
            a.kube.conditions("ns", "api").get("Valid")), what="Valid=False after the Service went")
        assert c["reason"] == "NoService"
        for cl in (a, b):
            eventually(lambda cl=cl: cl.api.get("ServiceImport", "ns", "api") is None
                       and svc_of(cl, "ns", "api") is None, what=f"api import gone in {cl.name}")


def test_an_ip_family_the_importing_cluster_lacks_falls_back_to_its_default(tmp_path: Path) -> None:
    a = Cluster("a", "east", tmp_path, service_cidrs=("fd00:10:96::/112",))  # IPv6 only
    b = Cluster("b", "west", tmp_path, service_cidrs=("10.96.0.0/16",))  # IPv4 only
    try:
        for cl in (a, b):
            cl.kube.namespace("ns")
        a.kube.service("ns", "web")
        a.kube.export("ns", "web")
        with run_controller(args_for(a, b), tmp_path) as ctl:
            si = eventually(lambda: (lambda s: s if s and s["spec"].get("ips") else None)(
                b.kube.serviceimport("ns", "web")), what="ips in B")
            assert si["spec"]["ipFamilies"] == ["IPv4"]
            assert ipaddress.ip_address(si["spec"]["ips"][0]).version == 4
            ctl.logged("rejected")
            own = eventually(lambda: (a.kube.serviceimport("ns", "web") or {}).get("spec", {}).get("ips"),
                             what="ips in A")
            assert ipaddress.ip_address(own[0]).version == 6
    finally:
        a.close()
        b.close()


def test_steady_state_changes_make_writes_only_no_lists(tmp_path: Path) -> None:
    cl = [Cluster(n, i, tmp_path) for n, i in IDS]
    try:
        a = cl[0]
        for c in cl:
            c.kube.namespace("ns")
        for i in range(5):
            a.kube.service("ns", f"s{i}")
            a.api.put(source_slice("ns", f"s{i}", f"s{i}-x", [f"10.9.0.{i}"]))
            a.kube.export("ns", f"s{i}")
        with run_controller(args_for(*cl), tmp_path) as ctl:
            eventually(ctl.ready, what="first full sync")
            for c in cl:
                eventually(lambda c=c: all(addresses(slices_of(c, "ns", f"s{i}")) for i in range(5)),
                           what=f"slices in {c.name}")
            time.sleep(0.5)
            marks = [len(c.api.requests) for c in cl]
            for n in range(10):
                i = n % 5
                a.api.put(source_slice("ns", f"s{i}", f"s{i}-x", [f"10.9.{n + 1}.{i}"]))
                for c in cl:
                    eventually(lambda c=c, n=n, i=i: addresses(slices_of(c, "ns", f"s{i}")) == {
                        f"10.9.{n + 1}.{i}"}, what=f"change {n} in {c.name}")
            time.sleep(0.5)
            for c, mark in zip(cl, marks, strict=True):
                reqs = [(m, p) for m, p in list(c.api.requests)[mark:]
                        if "/leases" not in p and p != PROBE]  # Leases and the probe: by design
                lists = [(m, p) for m, p in reqs if m == "GET" and "watch=" not in p]
                assert lists == [], lists
                writes = [(m, p.split("?")[0]) for m, p in reqs if m != "GET"]
                # one update of one imported slice per change, nothing else
                assert len(writes) == 10 and all(m == "PUT" and "/endpointslices/" in p for m, p in writes), \
                    writes
            m = ctl.metrics()
            updates = 'mcsdns_controller_writes_total{member="b",resource="endpointslices",verb="update"}'
            assert m[updates] == 10
            assert m['mcsdns_controller_member_reachable{member="c"}'] == 1
            assert m['mcsdns_controller_reconciles_total{result="ok"}'] >= 15
            assert m["mcsdns_controller_queue_depth"] == 0
            assert all(m[f'mcsdns_controller_member_queue_depth{{member="{c.name}"}}'] == 0 for c in cl)
    finally:
        for c in cl:
            c.close()


def test_restart_makes_no_writes_and_lease_keeps_the_ttl_clock(clusters2: list[Cluster],
                                                               tmp_path: Path) -> None:
    a, b = clusters2
    for cl in (a, b):
        cl.kube.namespace("ns")
        cl.kube.namespace("kube-system")
    for cl, ip in ((a, "10.9.0.1"), (b, "10.9.0.2")):
        cl.kube.service("ns", "web")
        cl.kube.endpoints("ns", "web", f"web-{cl.name}", [(ip, None)])
        cl.kube.export("ns", "web")
    # the member Leases live in b: it stays up while a goes away
    extra = ("--lease-cluster", "b", "--log-format", "json")
    with run_controller(args_for(a, b, ttl=10, extra=extra), tmp_path, name="first") as ctl:
        eventually(lambda: addresses(slices_of(b, "ns", "web")) == {"10.9.0.1", "10.9.0.2"},
                   what="both clusters' endpoints in b")
        eventually(ctl.ready)
        time.sleep(0.5)
        logs = ctl.logs().splitlines()
        assert logs and all(json.loads(line)["level"] for line in logs)
    before = (a.writes(), b.writes())
    with run_controller(args_for(a, b, ttl=10, extra=extra), tmp_path, name="second") as ctl:
        eventually(ctl.ready, what="first sync after restart")
        time.sleep(1.5)
        assert (a.writes(), b.writes()) == before, ctl.logs()
        lease = b.api.get("Lease", "kube-system", "mcsdns-member-a")
        assert lease is not None and lease["spec"]["renewTime"]
        a.stop()
        time.sleep(6)
    # restarted while a has been gone 6 s of its 10 s TTL: its endpoints go about 4 s later (the
    # Lease remembers when a was last reached), not a whole TTL after the restart
    t0 = time.monotonic()
    with run_controller(args_for(a, b, ttl=10, extra=extra), tmp_path, name="third") as ctl:
        eventually(lambda: addresses(slices_of(b, "ns", "web")) == {"10.9.0.2"},
                   what="a's endpoints dropped after its TTL")
        print(f"\na's endpoints gone {time.monotonic() - t0:.1f} s after the restart (TTL 10 s)")
        # the TTL counts from the contact the Lease remembers (a stopped >= 6 s before), not from the restart
        reached = re.search(r"cluster a: last reached ([0-9.]+)s ago \(its Lease\)",
                            ctl.logged("cluster a: last reached"))
        assert reached is not None and float(reached.group(1)) >= 6, ctl.logs()
        a.start()
        eventually(lambda: addresses(slices_of(b, "ns", "web")) == {"10.9.0.1", "10.9.0.2"},
                   what="a's endpoints back")
