"""The one Kubernetes client (mcsdns/kube/apiclient/client.py): each failure maps to one error of the
taxonomy (404, 409, 410, 429/5xx, other 4xx, no answer), discovery picks the preferred
served version, and every resource path is built in one place."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import KubeAPI

from mcsdns.kube.apiclient import errors
from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import (
    ApiError,
    Conflict,
    Expired,
    NotFound,
    Rejected,
    Unreachable,
    error_kind,
    explain,
)
from mcsdns.kube.names import PREFERRED
from mcsdns.kube.resources import (
    CLUSTER_PROPERTIES,
    ENDPOINT_SLICES,
    LEASES,
    NAMESPACES,
    SERVICE_IMPORTS,
    SERVICES,
)

MCS = "multicluster.x-k8s.io"
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as a:
        yield a


@pytest.fixture
def client(api: KubeAPI, tmp_path: Path) -> Iterator[Client]:
    c = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None, name="east")
    yield c
    c.close()


def test_ok_request_list_and_get(api: KubeAPI, client: Client) -> None:
    made = client.request("POST", NAMESPACES.path(), body=NS)
    assert made["metadata"]["name"] == "shop"
    assert client.get(NAMESPACES.path(name="shop"))["metadata"]["uid"] == made["metadata"]["uid"]
    for i in range(3):
        api.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"s{i}", "namespace": "shop"},
                 "spec": {"ports": [{"port": 80}]}})
    assert sorted(o["metadata"]["name"] for o in client.list(SERVICES.path("shop"))) == ["s0", "s1", "s2"]


@pytest.mark.parametrize(("code", "cls", "kind"), [
    (404, NotFound, "http_404"),
    (409, Conflict, "http_409"),
    (410, Expired, "http_410"),
    (429, Unreachable, "http_429"),
    (500, Unreachable, "http_500"),
    (503, Unreachable, "http_503"),
    (400, Rejected, "http_400"),
    (403, Rejected, "http_403"),
    (422, Rejected, "http_422"),
])
def test_each_status_maps_to_one_error(api: KubeAPI, client: Client, code: int, cls: type[ApiError],
                                       kind: str) -> None:
    api.fail_next(1, code, message="told so")
    with pytest.raises(ApiError) as e:
        client.get(SERVICES.path("shop"))
    assert type(e.value) is cls and e.value.status == code and error_kind(e.value) == kind
    assert str(e.value).startswith(f"east: GET /api/v1/namespaces/shop/services: {code} ")
    assert explain(e.value).startswith(f"HTTP {code} ") and ": told so" in explain(e.value)
    assert client.list(SERVICES.path("shop")) == []  # the next request is answered


def test_real_answers_map_too(api: KubeAPI, client: Client) -> None:
    with pytest.raises(NotFound):
        client.get(NAMESPACES.path(name="nope"))
    client.request("POST", NAMESPACES.path(), body=NS)
    with pytest.raises(Conflict):
        client.request("POST", NAMESPACES.path(), body=NS)
    api.deny("services", ["create"])
    with pytest.raises(Rejected) as e:
        client.request("POST", SERVICES.path("shop"), body={"metadata": {"name": "web"}})
    assert explain(e.value).endswith('add to a Role in namespace "shop" (or the ClusterRole): '
                                     'apiGroups: [""], resources: ["services"], verbs: ["create"]')


def test_no_answer_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with KubeAPI() as api:
        kc = api.write_kubeconfig(tmp_path / "kc")
    text = kc.read_text().replace(f":{api.port}", f":{port}")
    kc.write_text(text)
    c = Client.load(str(kc), None, name="gone", timeout=(1.0, 1.0))
    try:
        with pytest.raises(Unreachable) as e:
            c.get("/version")
    finally:
        c.close()
    assert e.value.status == 0 and error_kind(e.value) == "unreachable"
    assert str(e.value).startswith("gone: GET /version: ")
    assert "Connection refused" in explain(e.value) and "\n" not in explain(e.value)


@pytest.mark.parametrize(("served", "want"), [
    (("v1beta1", "v1alpha1"), "v1beta1"),
    (("v1alpha1",), "v1alpha1"),
    (("v1alpha1", "v1beta1"), "v1beta1"),  # ours, not the server's, preference
    (("v2",), None),
    ((), None),
])
def test_preferred_version(tmp_path: Path, served: tuple[str, ...], want: str | None) -> None:
    with KubeAPI(groups={MCS: served}) as api:
        c = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None)
        try:
            assert c.versions(MCS) == list(served)
            assert c.preferred(MCS, PREFERRED) == want
        finally:
            c.close()


def test_resource_paths() -> None:
    assert ENDPOINT_SLICES.path() == "/apis/discovery.k8s.io/v1/endpointslices"
    assert ENDPOINT_SLICES.path("shop", "web-x") == \
        "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices/web-x"
    assert SERVICES.path("shop") == "/api/v1/namespaces/shop/services"
    assert NAMESPACES.path("ignored", "shop") == "/api/v1/namespaces/shop"  # cluster-scoped
    assert SERVICE_IMPORTS.path("shop", "db", "status", version="v1alpha1") == \
        "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/shop/serviceimports/db/status"
    assert CLUSTER_PROPERTIES.path(name="id.k8s.io", version="v1beta1") == \
        "/apis/about.k8s.io/v1beta1/clusterproperties/id.k8s.io"
    assert LEASES.api_version() == "coordination.k8s.io/v1" and SERVICES.api_version() == "v1"
    with pytest.raises(ValueError, match="not discovered"):
        SERVICE_IMPORTS.path("shop")
    for r in (ENDPOINT_SLICES, SERVICES, LEASES):  # what RBAC sees of each path is the resource
        req = errors.Request.of(r.path("ns", "x", "status"), method="PUT")
        assert req is not None
        assert (req.group, req.resource, req.namespace) == (r.group, r.plural + "/status", "ns")


def test_paths_work_against_the_api(api: KubeAPI, client: Client) -> None:
    client.request("POST", NAMESPACES.path(), body=NS)
    si = {"apiVersion": SERVICE_IMPORTS.api_version("v1beta1"), "kind": SERVICE_IMPORTS.kind,
          "metadata": {"name": "db", "namespace": "shop"}, "spec": {"type": "ClusterSetIP", "ports": []}}
    client.request("POST", SERVICE_IMPORTS.path("shop", version="v1beta1"), body=si)
    got = client.get(SERVICE_IMPORTS.path("shop", "db", version="v1beta1"))
    assert got["metadata"]["name"] == "db"
    assert [o["metadata"]["name"] for o in client.list(SERVICE_IMPORTS.path(version="v1alpha1"))] == ["db"]


def test_requests_counted_by_method_and_code(client: Client, tmp_path: Path) -> None:
    client.request("POST", NAMESPACES.path(), body=NS)
    with pytest.raises(Conflict):
        client.request("POST", NAMESPACES.path(), body=NS)
    with pytest.raises(NotFound):
        client.get(NAMESPACES.path(name="nope"))
    client.get(NAMESPACES.path(name="shop"))
    assert client.counts == {("POST", "201"): 1, ("POST", "409"): 1, ("GET", "404"): 1, ("GET", "200"): 1}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "dead"
    kc.write_text(f"apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                  f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
                  "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n")
    dead = Client.load(str(kc), None, timeout=(1.0, 1.0))
    with pytest.raises(Unreachable):
        dead.get(NAMESPACES.path())
    assert dead.counts == {("GET", "<error>"): 1}
