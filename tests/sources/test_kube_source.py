"""`mcsdns serve --kubeconfig`: the Kubernetes source against tests/fakeapi/, over real sockets."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import pytest
from fakeapi import KubeAPI
from kubernetes import client
from support.helpers import EXAMPLE, run_server, wait_for
from support.kube_objects import (
    MCS,
    SERVICE,
    Z,
    addrs,
    endpoint_slice,
    example_names,
    example_objects,
    service_import,
)
from support.official import official_client
from support.ports import free_port

from mcsdns.data.objects import SERVICE_IMPORT
from mcsdns.data.store import Store
from mcsdns.sources.kube import Collection, KubeSource


def answer(msg: dns.message.Message) -> tuple[str, list[str]]:
    """(rcode, sorted answer records) of a response."""
    return dns.rcode.to_text(msg.rcode()), sorted(
        f"{rr.name} {rr.rdtype} {rd}" for rr in msg.answer for rd in rr)


def converges(srv: Any, name: str, want: list[str] | str) -> bool:
    return wait_for(lambda: addrs(srv, name) == want, interval=0.02)


def kube_client(kubeconfig: Path) -> client.ApiClient:
    return official_client(str(kubeconfig))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeAPI]:
    with KubeAPI(bookmark_interval=1.0) as a:
        yield a


@pytest.fixture
def kubeconfig(api: KubeAPI, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


def example_queries() -> list[tuple[str, str]]:
    """`example_names` and a name that does not exist."""
    return example_names() + [(f"nope.shop.svc.{Z}", "A")]


def test_initial_sync_answers_match_the_manifest_source(api: KubeAPI, kubeconfig: Path,
                                                         tmp_path: Path) -> None:
    for o in example_objects():
        api.put(o)
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as kube, \
            run_server(["--manifests", str(EXAMPLE)], tmp_path) as files:
        queries = example_queries()
        assert len(queries) > 20
        for name, rdtype in queries:
            assert answer(kube.query(name, rdtype)) == answer(files.query(name, rdtype)), (name, rdtype)
        # spot check against the fixture: db's ready pods in both clusters
        assert addrs(kube, f"db.shop.svc.{Z}") == ["10.1.1.10", "10.1.1.11", "10.2.1.10"]
        assert f"{MCS}/v1beta1" in kube.logs()
        assert kube.metric('mcsdns_source_connected{source="kube"}') == 1


def test_live_add_change_delete(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
        name = f"web.live.svc.{Z}"
        assert addrs(srv, name) == "NXDOMAIN"
        # writes through the real kubernetes client, as a controller would
        custom = client.CustomObjectsApi(kube_client(kubeconfig))
        custom.create_namespaced_custom_object(MCS, "v1beta1", "live", "serviceimports",
                                               service_import("web", "live", ["10.7.0.1"]))
        assert converges(srv, name, ["10.7.0.1"])
        custom.patch_namespaced_custom_object(MCS, "v1beta1", "live", "serviceimports", "web",
                                              {"spec": {"ips": ["10.7.0.2"]}})
        assert converges(srv, name, ["10.7.0.2"])
        custom.delete_namespaced_custom_object(MCS, "v1beta1", "live", "serviceimports", "web")
        assert converges(srv, name, "NXDOMAIN")
        # headless: endpoints come and go with their EndpointSlices
        api.put(service_import("db", "live", [], typ="Headless"))
        api.put(endpoint_slice("db-a", "live", "db", ["10.8.0.1"]))
        assert converges(srv, f"db.live.svc.{Z}", ["10.8.0.1"])
        api.put(endpoint_slice("db-b", "live", "db", ["10.8.0.2"], cluster="cluster-b"))
        assert converges(srv, f"db.live.svc.{Z}", ["10.8.0.1", "10.8.0.2"])
        api.delete("EndpointSlice", "live", "db-a")
        assert converges(srv, f"db.live.svc.{Z}", ["10.8.0.2"])
        # a slice without the service-name label is not selected at all
        unlabeled = endpoint_slice("db-c", "live", "db", ["10.8.0.3"])
        del unlabeled["metadata"]["labels"][SERVICE]
        api.put(unlabeled)
        api.put(endpoint_slice("db-d", "live", "db", ["10.8.0.4"]))
        assert converges(srv, f"db.live.svc.{Z}", ["10.8.0.2", "10.8.0.4"])
        assert "skipped malformed" not in srv.logs()


def _mutate_while_down(api: KubeAPI) -> None:
    """While the API is down: delete one service, change another, add a third."""
    api.delete("ServiceImport", "shop", "a")
    api.put(service_import("b", "shop", ["10.5.0.22"]))
    api.put(service_import("c", "shop", ["10.5.0.3"]))


def _outage(api: KubeAPI, srv: Any, reset_watch_cache: bool) -> list[tuple[str, str]]:
    api.put(service_import("a", "shop", ["10.5.0.1"]))
    api.put(service_import("b", "shop", ["10.5.0.2"]))
    assert converges(srv, f"a.shop.svc.{Z}", ["10.5.0.1"])
    assert converges(srv, f"b.shop.svc.{Z}", ["10.5.0.2"])
    api.stop()
    assert wait_for(lambda: srv.metric('mcsdns_source_connected{source="kube"}') == 0)
    _mutate_while_down(api)
    # outage: the last known data is still served and the server stays ready
    assert addrs(srv, f"a.shop.svc.{Z}") == ["10.5.0.1"]
    assert srv.http("/ready")[0] == 200
    mark = len(api.requests)
    api.start(reset_watch_cache=reset_watch_cache)
    assert converges(srv, f"a.shop.svc.{Z}", "NXDOMAIN")
    assert converges(srv, f"b.shop.svc.{Z}", ["10.5.0.22"])
    assert converges(srv, f"c.shop.svc.{Z}", ["10.5.0.3"])
    assert wait_for(lambda: srv.metric('mcsdns_source_connected{source="kube"}') == 1)
    logs = srv.logs()
    assert logs.count("serving the last known data") == 1, logs  # once per state change
    assert logs.count("connected, watching") == 2, logs
    return api.requests[mark:]


def test_api_restart_resumes_watches(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
        after = _outage(api, srv, reset_watch_cache=False)
        # the changes made while down arrived as watch events: no relist was needed
        assert all("watch=true" in url for m, url in after if "serviceimports" in url), after
        assert "relisting" not in srv.logs()


def test_expired_resource_version_relists(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
        after = _outage(api, srv, reset_watch_cache=True)
        lists = [url for m, url in after if "serviceimports" in url and "watch=true" not in url]
        assert lists, after
        assert "relisting" in srv.logs()
        # and the watch continues after the relist
        api.put(service_import("d", "shop", ["10.5.0.4"]))
        assert converges(srv, f"d.shop.svc.{Z}", ["10.5.0.4"])


def test_first_list_comes_from_the_watch_cache_and_a_relist_after_410_from_the_latest(
        api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    """As client-go: resourceVersion=0 first (one response from kube-apiserver's watch cache,
    not pages read through etcd); after 410 Gone, the latest state (no going back in time)."""
    for i in range(600):
        api.put(service_import(f"s{i}", "many", [f"10.9.{i // 250}.{i % 250 + 1}"]))
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
        lists = [u for _, u in api.requests if "serviceimports" in u and "watch=true" not in u]
        assert len(lists) == 1 and "resourceVersion=0" in lists[0]  # 600 objects, no paging
        assert addrs(srv, f"s599.many.svc.{Z}") == ["10.9.2.100"]
        assert addrs(srv, f"s0.many.svc.{Z}") == ["10.9.0.1"]  # in the list's first part (500)
        after = _outage(api, srv, reset_watch_cache=True)  # the relist, in parts too, deletes `a`
        assert addrs(srv, f"s1.many.svc.{Z}") == ["10.9.0.2"]
        relists = [u for _, u in after if "serviceimports" in u and "watch=true" not in u]
        assert relists and all("resourceVersion" not in u for u in relists), relists


def test_api_down_at_start(tmp_path: Path) -> None:
    api = KubeAPI()
    api.port = free_port()
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.put(service_import("web", "shop", ["10.6.0.1"]))
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path, wait_ready=False) as srv:
        for _ in range(3):
            assert srv.http("/ready")[0] == 503
            # before the first sync: SERVFAIL for every name in the zone, never an
            # authoritative (negatively cacheable) NXDOMAIN or NODATA
            for name, rdtype in ((f"web.shop.svc.{Z}", "A"), (f"nope.shop.svc.{Z}", "A"),
                                 (f"web.shop.svc.{Z}", "TXT"), (Z, "SOA"), (f"dns-version.{Z}", "TXT")):
                for tcp in (False, True):
                    m = srv.query(name, rdtype, tcp=tcp)
                    assert dns.rcode.to_text(m.rcode()) == "SERVFAIL", (name, rdtype, tcp)
                    assert not m.flags & dns.flags.AA and not m.answer and not m.authority
            assert dns.rcode.to_text(srv.query("example.com", "A").rcode()) == "REFUSED"
        assert srv.metric("mcsdns_ready ") == 0
        assert wait_for(lambda: "no data yet: answering SERVFAIL until the first sync" in srv.logs())
        api.start()
        try:
            assert wait_for(lambda: srv.http("/ready")[0] == 200)
            assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
            assert addrs(srv, f"nope.shop.svc.{Z}") == "NXDOMAIN"
            assert srv.query(Z, "SOA").flags & dns.flags.AA
            assert "last known data" not in srv.logs()  # there was none
        finally:
            api.stop()


def test_v1alpha1_only_api(tmp_path: Path) -> None:
    with KubeAPI(groups={MCS: ("v1alpha1",), "about.k8s.io": ()}) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        api.put(service_import("web", "shop", ["10.6.0.1"], version="v1alpha1"))
        with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
            assert addrs(srv, f"web.shop.svc.{Z}") == ["10.6.0.1"]
            api.put(service_import("web", "shop", ["10.6.0.9"], version="v1alpha1"))
            assert converges(srv, f"web.shop.svc.{Z}", ["10.6.0.9"])
            logs = srv.logs()
            assert f"{MCS}/v1alpha1" in logs and "no ClusterProperty API" in logs
            assert all("/v1beta1/" not in url for _, url in api.requests)


def test_no_mcs_api_is_not_ready(tmp_path: Path) -> None:
    with KubeAPI(groups={MCS: ()}) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with run_server(["--kubeconfig", str(kubeconfig)], tmp_path, wait_ready=False) as srv:
            assert wait_for(lambda: "does not serve multicluster.x-k8s.io" in srv.logs())
            assert srv.http("/ready")[0] == 503


def test_namespace_restriction(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    for ns in ("one", "two", "other"):
        api.put(service_import("web", ns, ["10.4.0.1"]))
        api.put(service_import("db", ns, [], typ="Headless"))
        api.put(endpoint_slice("db-a", ns, "db", ["10.4.1.1"]))
    args = ["--kubeconfig", str(kubeconfig), "--namespace", "one", "--namespace", "two"]
    with run_server(args, tmp_path) as srv:
        for ns in ("one", "two"):
            assert addrs(srv, f"web.{ns}.svc.{Z}") == ["10.4.0.1"]
            assert addrs(srv, f"db.{ns}.svc.{Z}") == ["10.4.1.1"]
        assert addrs(srv, f"web.other.svc.{Z}") == "NXDOMAIN"
        assert addrs(srv, f"db.other.svc.{Z}") == "NXDOMAIN"
        api.put(service_import("new", "other", ["10.4.0.9"]))
        api.put(service_import("new", "two", ["10.4.0.2"]))
        assert converges(srv, f"new.two.svc.{Z}", ["10.4.0.2"])
        assert addrs(srv, f"new.other.svc.{Z}") == "NXDOMAIN"
        # a relist of one namespace removes only that namespace's deleted objects
        api.stop()
        api.delete("ServiceImport", "one", "web")
        api.start(reset_watch_cache=True)
        assert converges(srv, f"web.one.svc.{Z}", "NXDOMAIN")
        assert addrs(srv, f"web.two.svc.{Z}") == ["10.4.0.1"]
        assert addrs(srv, f"db.two.svc.{Z}") == ["10.4.1.1"]
        assert addrs(srv, f"db.one.svc.{Z}") == ["10.4.1.1"]
    assert all("/namespaces/other/" not in url and "/namespaces/" in url
               for _, url in api.requests if "serviceimports" in url or "endpointslices" in url)


def test_malformed_objects_are_skipped(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    api.put(service_import("good", "shop", ["10.3.0.1"]))
    api.put(service_import("bad", "shop", ["not-an-ip"]))
    api.put(endpoint_slice("weird", "shop", "x" * 70, ["10.3.1.1"]))
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
        assert addrs(srv, f"good.shop.svc.{Z}") == ["10.3.0.1"]
        assert addrs(srv, f"bad.shop.svc.{Z}") == "NXDOMAIN"
        logs = srv.logs()
        assert "skipped malformed ServiceImport" in logs and "not-an-ip" in logs
        assert "skipped malformed EndpointSlice" in logs
        # malformed objects arriving on the watch do not stop it
        broken = service_import("good", "shop", ["10.3.0.2"])
        broken["spec"] = "nonsense"
        api.put(broken)
        assert converges(srv, f"good.shop.svc.{Z}", "NXDOMAIN")
        odd = copy.deepcopy(broken)
        odd["metadata"]["name"], odd["spec"] = "odd", {"type": "ClusterSetIP", "ips": [{"a": 1}]}
        api.put(odd)
        api.put(service_import("good", "shop", ["10.3.0.3"]))
        assert converges(srv, f"good.shop.svc.{Z}", ["10.3.0.3"])


def test_paged_list_and_api_errors_back_off(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    api.cache_pages = True  # as a watch cache that pages its snapshots
    for i in range(1100):  # more than two list pages of 500
        api.put(service_import(f"s{i}", "many", [f"10.9.{i // 250}.{i % 250 + 1}"]))
    with run_server(["--kubeconfig", str(kubeconfig)], tmp_path) as srv:
        assert addrs(srv, f"s1099.many.svc.{Z}") == ["10.9.4.100"]
        assert addrs(srv, f"s0.many.svc.{Z}") == ["10.9.0.1"]
        lists = [u for _, u in api.requests if "serviceimports" in u and "watch=true" not in u]
        assert len(lists) == 3 and "continue=" in lists[-1]
        # every request fails with 500: retries back off instead of spinning, answers stay
        api.fail_next(10_000)
        mark = len(api.requests)
        api.drop_watches()
        assert wait_for(lambda: srv.metric('mcsdns_source_connected{source="kube"}') == 0)
        time.sleep(2.0)
        assert len(api.requests) - mark < 60, len(api.requests) - mark
        assert addrs(srv, f"s5.many.svc.{Z}") == ["10.9.0.6"]
        assert "HTTP 500" in srv.logs()
        api.fail_next(0)
        api.put(service_import("s5", "many", ["10.9.9.9"]))
        assert converges(srv, f"s5.many.svc.{Z}", ["10.9.9.9"])
        _, text = srv.http("/metrics")
        assert any(line.startswith("mcsdns_source_errors_total{") and 'error="http_500"' in line
                   and float(line.rsplit(" ", 1)[1]) > 0 for line in text.splitlines()), text


def test_a_list_that_failed_after_some_parts_leaves_none_of_them_behind() -> None:
    """A list's objects are applied in parts as they arrive; when that list fails (a 410 on
    its continue token, a broken connection) and the next one no longer has an object that
    a part applied, the end of the next list deletes it."""
    store = Store()
    src = KubeSource(store, None, None)
    c = Collection(SERVICE_IMPORT, None, "/apis/multicluster.x-k8s.io/v1beta1/serviceimports", None,
                   required=True, sole=True)
    src.collections.append(c)
    a, b = (dict(service_import(n, "shop", [ip]), kind=SERVICE_IMPORT) for n, ip in (("a", "10.0.0.1"),
                                                                                     ("b", "10.0.0.2")))
    src._apply([(c, "part", (1, [copy.deepcopy(a)]))])  # list 1: one part, then it failed
    assert set(store.imports) == {("shop", "a")}
    src._apply([(c, "part", (2, [copy.deepcopy(b)])), (c, "list", (2, [], set()))])  # a deleted meanwhile
    assert set(store.imports) == {("shop", "b")}


def test_a_source_begun_before_the_loop_delivers_its_lists_once_started(api: KubeAPI,
                                                                       kubeconfig: Path) -> None:
    """`mcsdns serve` asks for the lists before it imports the rest (`FirstLists`), then
    begins reading them (`begin_reading`): the reflectors take those answers (each list is
    asked for once), and what they read meanwhile waits, and reaches the store, in order,
    once the loop runs."""
    import asyncio

    from mcsdns.sources.kube import begin_reading
    from mcsdns.sources.kubefirst import FirstLists, connect

    for o in example_objects():
        api.put(o)
    first = FirstLists(connect(str(kubeconfig), None, []), [])
    assert wait_for(lambda: sum("resourceVersion=0" in u and "watch" not in u for _, u in api.requests) == 2)
    begun = begin_reading(str(kubeconfig), None, None, first)

    def listed() -> bool:
        inf = begun.source._informers
        return inf is not None and len(inf.reflectors) == 3 and all(r.lists for r in inf.reflectors.values())

    assert wait_for(listed)
    assert not begun.store.imports and not begun.source.synced  # read, not applied: no loop yet

    async def run() -> None:
        await begun.source.start(asyncio.get_running_loop())
        try:
            for _ in range(500):
                if begun.source.synced:
                    break
                await asyncio.sleep(0.01)
        finally:
            await begun.source.stop()

    asyncio.run(run())
    assert begun.source.synced
    want = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in example_objects()
            if o["kind"] == SERVICE_IMPORT}
    assert set(begun.store.imports) == want
    lists = sorted(u.split("?")[0] for _, u in api.requests if "watch" not in u and "limit=" in u)
    assert lists == sorted({"/apis/multicluster.x-k8s.io/v1beta1/serviceimports",
                            "/apis/discovery.k8s.io/v1/endpointslices",
                            "/apis/about.k8s.io/v1beta1/clusterproperties"}), lists  # each once


def test_an_inbox_hands_on_what_was_posted_before_its_loop_in_order() -> None:
    import asyncio

    from mcsdns.sources import Inbox

    got: list[list[int]] = []
    inbox: Inbox[int] = Inbox(got.append)
    for i in range(3):
        assert inbox.post(i)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        inbox.attach(loop)
        await asyncio.sleep(0.01)
        inbox.post(3)
        inbox.post(4)
        await asyncio.sleep(0.01)

    asyncio.run(run())
    assert got == [[0, 1, 2], [3, 4]]
