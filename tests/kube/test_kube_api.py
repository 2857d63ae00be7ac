"""tests/fakeapi/ through the real kubernetes client: what other tests rely on."""

from __future__ import annotations

import ipaddress
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeapi import KubeAPI
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from support.helpers import run_server, wait_for
from support.kube_objects import addrs, endpoint_slice, service_import
from support.official import official_client

from mcsdns.kube.apiclient.client import Client

MCS = "multicluster.x-k8s.io"


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as a:
        yield a


@pytest.fixture
def kc(api: KubeAPI, tmp_path: Path) -> client.ApiClient:
    return client_for(api, tmp_path)


def client_for(api: KubeAPI, tmp: Path) -> client.ApiClient:
    """The kubernetes client, configured by the test API server's kubeconfig."""
    return official_client(str(api.write_kubeconfig(tmp / "kc")))


def raw(resp: Any) -> Any:
    return json.loads(resp.data)


def test_label_selectors_and_paging(api: KubeAPI, kc: client.ApiClient) -> None:
    for i, svc in enumerate(["a", "b", "c", "a"]):
        api.put(endpoint_slice(f"e{i}", "ns", svc, ["10.0.0.1"], cluster=f"c{i}"))
    plain = endpoint_slice("plain", "ns", "a", ["10.0.0.1"])
    plain["metadata"]["labels"] = {}
    api.put(plain)
    d: Any = client.DiscoveryV1Api(kc)  # models with Optional fields everywhere: read as Any

    def names(sel: str) -> list[str]:
        return [s.metadata.name for s in d.list_namespaced_endpoint_slice("ns", label_selector=sel).items]

    svc = "multicluster.kubernetes.io/service-name"
    assert names(svc) == ["e0", "e1", "e2", "e3"]
    assert names(f"!{svc}") == ["plain"]
    assert names(f"{svc}=a") == ["e0", "e3"]
    assert names(f"{svc}!=a") == ["e1", "e2", "plain"]
    assert names(f"{svc} in (b, c)") == ["e1", "e2"]
    assert names(f"{svc} notin (b,c),{svc}") == ["e0", "e3"]
    page = d.list_endpoint_slice_for_all_namespaces(limit=2)
    api.delete("EndpointSlice", "ns", "e3")  # pages come from the first page's snapshot
    rest = d.list_endpoint_slice_for_all_namespaces(limit=10, _continue=page.metadata._continue)
    assert [s.metadata.name for s in page.items + rest.items] == ["e0", "e1", "e2", "e3", "plain"]
    assert rest.metadata.resource_version == page.metadata.resource_version
    api.compact()
    with pytest.raises(ApiException) as e:
        d.list_endpoint_slice_for_all_namespaces(limit=2, _continue=page.metadata._continue)
    assert e.value.status == 410


def test_discovery_follows_served_versions(tmp_path: Path) -> None:
    with KubeAPI(groups={MCS: ("v1alpha1",), "about.k8s.io": ()}) as api:
        kc = client_for(api, tmp_path)
        apis: Any = client.ApisApi(kc)
        served = apis.get_api_versions().groups
        groups = {g.name: [v.version for v in g.versions] for g in served}
        assert groups[MCS] == ["v1alpha1"] and "about.k8s.io" not in groups
        co: Any = client.CustomObjectsApi(kc)
        res = co.get_api_resources(MCS, "v1alpha1")
        assert {r.name for r in res.resources} >= {"serviceimports", "serviceexports",
                                                   "serviceimports/status"}
        with pytest.raises(ApiException) as e:
            co.list_cluster_custom_object(MCS, "v1beta1", "serviceimports")
        assert e.value.status == 404


def test_writes_conflicts_and_status(api: KubeAPI, kc: client.ApiClient) -> None:
    co: Any = client.CustomObjectsApi(kc)
    body = service_import("web", "ns", ["10.1.0.1"])
    body["status"] = {"clusters": [{"cluster": "x"}]}
    made = co.create_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", body)
    assert "status" not in made and made["metadata"]["generation"] == 1 and made["metadata"]["uid"]
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", body)
    assert e.value.status == 409
    stale = dict(made, spec={"type": "ClusterSetIP", "ips": ["10.1.0.2"]})
    co.patch_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", "web", {"spec": {"ips": []}})
    with pytest.raises(ApiException) as e:
        co.replace_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", "web", stale)
    assert e.value.status == 409
    st = co.patch_namespaced_custom_object_status(MCS, "v1beta1", "ns", "serviceimports", "web",
                                                  {"status": {"clusters": [{"cluster": "c1"}]}})
    assert st["status"] == {"clusters": [{"cluster": "c1"}]} and st["metadata"]["generation"] == 2
    co.delete_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", "web")
    assert api.get("ServiceImport", "ns", "web") is None


def test_watch_events_bookmarks_and_gone(api: KubeAPI, kc: client.ApiClient) -> None:
    api.bookmark_interval = 0.2
    co: Any = client.CustomObjectsApi(kc)
    api.put(service_import("first", "ns", ["10.1.0.9"]))
    rv = co.list_cluster_custom_object(MCS, "v1beta1", "serviceimports")["metadata"]["resourceVersion"]
    api.put(service_import("a", "ns", ["10.1.0.1"]))
    api.put(service_import("a", "ns", ["10.1.0.2"]))
    api.delete("ServiceImport", "ns", "a")
    resp = co.list_cluster_custom_object(MCS, "v1beta1", "serviceimports", watch=True, resource_version=rv,
                                         allow_watch_bookmarks=True, timeout_seconds=1,
                                         _preload_content=False)
    events = [json.loads(line) for line in resp.data.splitlines() if line.strip()]
    types = [e["type"] for e in events]
    assert types[:3] == ["ADDED", "MODIFIED", "DELETED"] and "BOOKMARK" in types
    assert [int(e["object"]["metadata"]["resourceVersion"]) - int(rv) for e in events[:3]] == [1, 2, 3]
    api.compact()
    resp = co.list_cluster_custom_object(MCS, "v1beta1", "serviceimports", watch=True, resource_version=rv,
                                         _preload_content=False)
    (event,) = [json.loads(line) for line in resp.data.splitlines() if line.strip()]
    assert event["type"] == "ERROR" and event["object"]["code"] == 410


def test_sighup_relists(api: KubeAPI, tmp_path: Path) -> None:
    api.put(service_import("web", "shop", ["10.2.0.1"]))
    with run_server(["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc"))], tmp_path) as srv:
        def lists() -> list[str]:
            return [u for _, u in api.requests if "serviceimports" in u and "watch=" not in u]

        before = len(lists())
        srv.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: len(lists()) > before)
        api.put(service_import("web", "shop", ["10.2.0.2"]))
        assert wait_for(lambda: addrs(srv, "web.shop.svc.clusterset.local") == ["10.2.0.2"])


def test_services_get_cluster_ips_as_a_real_api_server_allocates_them(tmp_path: Path) -> None:
    with KubeAPI(service_cidrs=("10.96.0.0/24", "fd00:96::/120")) as api:
        v1: Any = client.CoreV1Api(client_for(api, tmp_path))

        def create(name: str, **spec: Any) -> Any:
            body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                    "spec": {"ports": [{"name": "http", "port": 80}], **spec}}
            return v1.create_namespaced_service("ns", body).spec

        single = create("single")
        assert single.cluster_ip in [str(a) for a in ipaddress.ip_network("10.96.0.0/24")]
        assert single.cluster_ips == [single.cluster_ip] and single.ip_families == ["IPv4"]
        assert single.ip_family_policy == "SingleStack" and single.ports[0].target_port == 80
        dual = create("dual", ipFamilyPolicy="PreferDualStack")
        assert dual.ip_families == ["IPv4", "IPv6"] and len(set(dual.cluster_ips)) == 2
        assert ipaddress.ip_address(dual.cluster_ips[1]) in ipaddress.ip_network("fd00:96::/120")
        v6 = create("v6", ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv6", "IPv4"])
        assert [ipaddress.ip_address(a).version for a in v6.cluster_ips] == [6, 4]
        headless = create("headless", clusterIP="None")
        assert headless.cluster_ips == ["None"]
        assert len({single.cluster_ip, dual.cluster_ip, v6.cluster_ips[1]}) == 3  # never reused
        # immutable: an update without clusterIP keeps it, a different one is rejected
        cur = v1.read_namespaced_service("single", "ns")
        cur.spec.cluster_ip, cur.spec.cluster_ips, cur.spec.session_affinity = None, None, "ClientIP"
        assert v1.replace_namespaced_service("single", "ns", cur).spec.cluster_ip == single.cluster_ip
        cur = v1.read_namespaced_service("single", "ns")
        cur.spec.cluster_ip = cur.spec.cluster_ips[0] = "10.96.0.200"
        with pytest.raises(ApiException) as e:
            v1.replace_namespaced_service("single", "ns", cur)
        assert e.value.status == 422
        with pytest.raises(ApiException) as e:  # in use
            create("taken", clusterIP=dual.cluster_ip)
        assert e.value.status == 422
        v1.delete_namespaced_service("dual", "ns")
        assert create("taken", clusterIP=dual.cluster_ip).cluster_ip == dual.cluster_ip  # released


def test_streaming_lists_when_the_server_has_them(api: KubeAPI, tmp_path: Path) -> None:
    c = Client.load(str(api.write_kubeconfig(tmp_path / "kc2")), None)
    api.put(service_import("a", "ns", ["10.1.0.1"]))
    api.put(service_import("b", "ns", ["10.1.0.2"]))

    def stream() -> list[Any]:
        resp = c.open("GET", f"/apis/{MCS}/v1beta1/serviceimports", {
            "watch": True, "timeoutSeconds": 1, "sendInitialEvents": True,
            "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": True})
        return [json.loads(line) for line in resp.data.splitlines() if line.strip()]

    (refused,) = stream()  # as a real server on etcd 3.4 (no progress notifications)
    assert refused["type"] == "ERROR" and "RequestWatchProgress" in refused["object"]["message"]
    api.watch_list = True
    evs = stream()
    assert [e["type"] for e in evs] == ["ADDED", "ADDED", "BOOKMARK"]
    end = evs[-1]["object"]["metadata"]
    assert end == {"resourceVersion": str(api.rv), "annotations": {"k8s.io/initial-events-end": "true"}}


def test_managed_fields_one_entry_per_manager(api: KubeAPI, kc: client.ApiClient) -> None:
    co: Any = client.CustomObjectsApi(kc)
    api.put(service_import("a", "ns", ["10.1.0.1"]))  # manager "kubeapi"
    o = co.get_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", "a")
    o["metadata"]["labels"] = {"x": "y"}
    del o["metadata"]["managedFields"]  # omitted: the stored ones are kept
    o = co.replace_namespaced_custom_object(MCS, "v1beta1", "ns", "serviceimports", "a", o,
                                            field_manager="mcsdns-controller")
    mf = {m["manager"]: m for m in o["metadata"]["managedFields"]}
    assert sorted(mf) == ["kubeapi", "mcsdns-controller"]
    assert mf["mcsdns-controller"]["fieldsV1"]["f:metadata"] == {"f:labels": {".": {}, "f:x": {}}}
