"""An outage keeps names and ClusterSetIPs: a member lost past the endpoint TTL has its endpoints
withdrawn, but the ServiceImports, derived Services and ClusterSetIPs of its exports stay for the
import grace; when it returns they are the same, and what it no longer exports goes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dns.rcode
import pytest
from support.controller_checks import a_records, cidr_args_for, with_status
from support.controller_env import Cluster, eventually, run_controller, shop
from support.controller_fakes import FakeView, export_service, member
from support.helpers import run_server

from mcsdns.controller.ipam import Allocator
from mcsdns.controller.kinds.derivedservice import derived_name
from mcsdns.controller.reconcile import Reconciler
from mcsdns.flags import CIDR, DERIVED

KEY = ("shop", "web")
TTL, GRACE = 30.0, 3600.0


class Clock:
    """A monotonic clock the test sets."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup(mode: str, headless: bool = False) -> tuple[Reconciler, Clock, list[FakeView]]:
    """Members a, b, c; c alone exports shop/web; one reconcile imports it everywhere."""
    views = [member("a", "east"), member("b", "west"), member("c", "north")]
    export_service(views[2], *KEY, headless=headless)
    clock = Clock()
    rec = Reconciler(views, mode, Allocator(["10.99.0.0/16"]) if mode == CIDR else None, TTL, clock=clock,
                     import_grace=GRACE)
    rec.reconcile(KEY)
    return rec, clock, views


def lose(v: FakeView, clock: Clock, after: float) -> None:
    """`v` unreachable since t=0 (its cache as it was), the clock `after` seconds later."""
    v.reachable, v.last_ok, clock.now = False, 0.0, after


def ips(v: FakeView) -> list[str] | None:
    si = v.member.get("serviceimports", *KEY)
    return None if si is None else list(si["spec"].get("ips") or [])


def sources(v: FakeView) -> set[str]:
    """The source clusters of web's imported slices in `v`."""
    return {s["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"]
            for s in v.member.objects("endpointslices")
            if s["metadata"]["labels"].get("multicluster.kubernetes.io/service-name") == KEY[1]}


@pytest.mark.parametrize("mode", [DERIVED, CIDR])
def test_past_the_ttl_endpoints_go_and_the_import_and_its_clustersetip_stay(mode: str) -> None:
    rec, clock, (a, b, c) = setup(mode)
    before = {v.member.name: ips(v) for v in (a, b)}
    assert all(before.values()) and sources(a) == sources(b) == {"north"}
    lose(c, clock, TTL + 1)
    written = len(c.member.writes)
    r = rec.reconcile(KEY)
    assert not r.failed and not r.retry
    assert len(c.member.writes) == written  # nothing is written to the lost member
    for v in (a, b):
        assert ips(v) == before[v.member.name]  # the same ClusterSetIP
        assert sources(v) == set()  # its endpoints withdrawn
        si = v.member.get("serviceimports", *KEY)
        assert si is not None and si["status"]["clusters"] == []  # no cluster serves it now
        if mode == DERIVED:
            assert v.member.get("services", "shop", derived_name(KEY)) is not None
    # it returns, still exporting: its endpoints come back, nothing else changes
    c.reachable, c.last_ok = True, clock.now
    rec.reconcile(KEY)
    for v in (a, b):
        assert ips(v) == before[v.member.name] and sources(v) == {"north"}


def test_a_headless_import_stays_without_endpoints() -> None:
    rec, clock, (a, b, c) = setup(DERIVED, headless=True)
    lose(c, clock, TTL + 1)
    rec.reconcile(KEY)
    for v in (a, b):
        si = v.member.get("serviceimports", *KEY)
        assert si is not None and si["spec"]["type"] == "Headless" and sources(v) == set()


@pytest.mark.parametrize("mode", [DERIVED, CIDR])
def test_past_the_grace_the_import_goes(mode: str) -> None:
    rec, clock, (a, b, c) = setup(mode)
    lose(c, clock, GRACE + 1)
    rec.reconcile(KEY)
    for v in (a, b):
        assert ips(v) is None and sources(v) == set()
        assert v.member.get("services", "shop", derived_name(KEY)) is None


def test_a_grace_under_the_ttl_is_the_ttl() -> None:
    views = [member("a", "east"), member("c", "north")]
    export_service(views[1], *KEY)
    clock = Clock()
    rec = Reconciler(views, DERIVED, None, TTL, clock=clock, import_grace=0.0)
    rec.reconcile(KEY)
    lose(views[1], clock, TTL - 1)
    rec.reconcile(KEY)
    assert sources(views[0]) == {"north"}  # within the TTL: everything stays
    clock.now = TTL + 1
    rec.reconcile(KEY)
    assert ips(views[0]) is None  # grace 0: the import goes with the endpoints


def test_a_member_back_without_the_export_takes_the_import_away() -> None:
    rec, clock, (a, b, c) = setup(CIDR)
    lose(c, clock, TTL + 1)
    rec.reconcile(KEY)
    assert ips(a) and ips(b)
    del c.caches["serviceexports"][KEY]  # what its caches say once synced again
    c.reachable, c.last_ok = True, clock.now
    rec.reconcile(KEY)
    for v in (a, b, c):
        assert ips(v) is None and sources(v) == set()


# --- end to end: test API servers, the controller process, `mcsdns serve` -------------------------

def clustersetips(clusters: Sequence[Cluster], name: str) -> dict[str, list[str]]:
    out = {}
    for cl in clusters:
        si = cl.kube.serviceimport("shop", name)
        out[cl.name] = list((si or {}).get("spec", {}).get("ips") or [])
    return out


def test_an_outage_past_the_ttl_keeps_names_and_clustersetips(clusters3: list[Cluster],
                                                              tmp_path: Path) -> None:
    """c alone exports web (ClusterSetIP) and db (headless); c stops past the TTL and comes back."""
    a, b, c = clusters3
    shop(c, clusters3)
    web, db = "web.shop.svc.clusterset.local.", "db.shop.svc.clusterset.local."
    with run_controller(cidr_args_for(a, b, c, ttl=2), tmp_path) as ctl, \
            run_server(["--kubeconfig", str(b.kubeconfig)], tmp_path) as srv:
        for cl in (a, b):
            eventually(lambda cl=cl: with_status(cl.kube.serviceimport("shop", "web")) and
                       cl.kube.source_clusters("shop", "db") == {"north"}, what=f"imports in {cl.name}")
        before = clustersetips((a, b), "web")
        eventually(lambda: a_records(srv, web) == set(before["b"]), what="the ClusterSetIP in DNS")
        eventually(lambda: a_records(srv, db) == {"10.1.0.7", "10.1.0.8"}, what="db in DNS")
        c.stop()
        eventually(lambda: "(endpoint TTL 2s): dropping its endpoints" in ctl.logs(),
                   what="c's TTL ran out")
        for cl in (a, b):
            eventually(lambda cl=cl: not cl.kube.source_clusters("shop", "web") and
                       not cl.kube.source_clusters("shop", "db"), what=f"c's endpoints gone from {cl.name}")
            assert cl.kube.serviceimport("shop", "db") is not None
        assert clustersetips((a, b), "web") == before
        assert a_records(srv, web) == set(before["b"])  # the name still answers its ClusterSetIP
        # headless, no ready endpoint: NXDOMAIN as DNS spec 2.4.1 says, its import kept (above)
        eventually(lambda: srv.query(db, "A").rcode() == dns.rcode.NXDOMAIN, what="db: no endpoints")
        c.start()
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.source_clusters("shop", "web") == {"north"},
                       what=f"c's endpoints back in {cl.name}")
        assert clustersetips((a, b), "web") == before  # 0 ClusterSetIPs changed
        eventually(lambda: a_records(srv, db) == {"10.1.0.7", "10.1.0.8"}, what="db answers again")
        # away again, and un-exports web meanwhile: once back, web's import goes, db's stays
        c.stop()
        eventually(lambda: not a.kube.source_clusters("shop", "web"), what="TTL again")
        c.api.delete("ServiceExport", "shop", "web")
        c.start()
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.serviceimport("shop", "web") is None,
                       what=f"web's import gone from {cl.name}")
            assert cl.kube.serviceimport("shop", "db") is not None
        eventually(lambda: srv.query(web, "A").rcode() == dns.rcode.NXDOMAIN, what="web NXDOMAIN")


class Unread(FakeView):
    """A member a restarted controller has not read yet (down), last reached at t=0 (its Lease)."""

    @property
    def synced(self) -> bool:
        return False


def restarted(views: list[FakeView], clock: Clock) -> Reconciler:
    """A new controller (cidr mode) over a, b as they are and c unread; the gate open past the TTL."""
    c = Unread(member("c", "north").member)
    c.reachable, clock.now = False, TTL + 1
    rec = Reconciler([*views[:2], c], CIDR, Allocator(["10.99.0.0/16"]), TTL, clock=clock,
                     import_grace=GRACE)
    rec.adopt()
    return rec


def test_a_restart_while_the_only_exporter_is_away_keeps_the_import() -> None:
    rec, clock, views = setup(CIDR)
    a, b = views[:2]
    before = ips(a)
    export_service(a, "shop", "api")
    rec = restarted(views, clock)
    rec.reconcile(("shop", "api"))  # a service imported after the restart: not web's address
    api = b.member.get("serviceimports", "shop", "api")
    assert api is not None and api["spec"]["ips"] and api["spec"]["ips"] != before
    rec.reconcile(KEY)
    for v in (a, b):
        assert ips(v) == before and sources(v) == set()
    clock.now = GRACE + 1  # c's grace ran out unread: the import goes
    rec.reconcile(KEY)
    assert ips(a) is None and ips(b) is None


def test_a_restart_does_not_hold_an_import_a_read_member_stopped_exporting() -> None:
    views = [member("a", "east"), member("b", "west"), member("c", "north")]
    export_service(views[0], *KEY)
    clock = Clock()
    Reconciler(views, CIDR, Allocator(["10.99.0.0/16"]), TTL, clock=clock).reconcile(KEY)
    a, b = views[:2]
    assert ips(b)
    del a.caches["serviceexports"][KEY]  # un-exported while no controller ran
    restarted(views, clock).reconcile(KEY)
    assert ips(a) is None and ips(b) is None


def test_a_restart_during_an_outage_keeps_names_and_clustersetips(clusters3: list[Cluster],
                                                                  tmp_path: Path) -> None:
    """c alone exports web; the controller restarts while c is down past the TTL; c comes back."""
    a, b, c = clusters3
    a.kube.namespace("kube-system")  # the member Leases live in a (the first --cluster)
    shop(c, clusters3, db=False)
    with run_controller(cidr_args_for(a, b, c, ttl=2), tmp_path, name="first"):
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.source_clusters("shop", "web") == {"north"},
                       what=f"web imported in {cl.name}")
        before = clustersetips((a, b), "web")
    c.stop()
    with run_controller(cidr_args_for(a, b, c, ttl=2), tmp_path, name="second") as ctl:
        for cl in (a, b):
            eventually(lambda cl=cl: not cl.kube.source_clusters("shop", "web"),
                       what=f"c's endpoints gone from {cl.name}")
        assert clustersetips((a, b), "web") == before
        ctl.logged("cluster c not reached yet")
        c.start()
        for cl in (a, b):
            eventually(lambda cl=cl: cl.kube.source_clusters("shop", "web") == {"north"},
                       what=f"c's endpoints back in {cl.name}")
        assert clustersetips((a, b), "web") == before


def test_past_the_import_grace_the_import_goes(clusters2: list[Cluster], tmp_path: Path) -> None:
    """The grace's end re-queues the lost member's services (no resync does it here)."""
    a, c = clusters2
    shop(c, clusters2, db=False)
    args = [*cidr_args_for(a, c, ttl=1), "--import-grace", "4", "--resync", "600"]
    with run_controller(args, tmp_path) as ctl:
        eventually(lambda: a.kube.source_clusters("shop", "web") == {"west"}, what="web imported in a")
        c.stop()
        eventually(lambda: not a.kube.source_clusters("shop", "web"), what="c's endpoints gone (TTL)")
        eventually(lambda: a.kube.serviceimport("shop", "web") is None,
                   what="import gone (grace)")
        ctl.logged("cluster b unreachable for 4s (import grace): dropping its exports")
