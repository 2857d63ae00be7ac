"""The test API server (tests/fakeapi/) and a real kube-apiserver answer alike where tests and
benchmarks depend on it: every test here runs against both (the real one when MCSDNS_REALK8S
names realk8s.sh, else that half skips), asserting the real server's answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fakeapi import KubeAPI
from support.realk8s import RealK8s
from support.realk8s_probe import EPS, MCS, Send, events, fake_send, js, si, slice_

from mcsdns.kube.apiclient.client import METADATA_ONLY

UA = {"User-Agent": "parity-test/1.0"}


class Server:
    """One API server under test, with a namespace of its own."""

    def __init__(self, send: Send, ns: str) -> None:
        self.send, self.ns = send, ns

    def __call__(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
                 ) -> tuple[int, dict[str, str], bytes]:
        return self.send(method, path.replace("NS", self.ns), body, {**UA, **(headers or {})})

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        a = self(method, path, body)
        assert 200 <= a[0] < 300, a
        return js(a)


@pytest.fixture(params=["fake", "real"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "real":
        real: RealK8s = request.getfixturevalue("real_k8s")
        yield Server(real.request, real.namespace("parity"))
        return
    with KubeAPI() as api:
        send = fake_send(api)
        send("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": "p"}})
        yield Server(send, "p")


def test_writes_record_managed_fields_and_generation(server: Server) -> None:
    o = server.ok("POST", f"{MCS}/namespaces/NS/serviceimports", si("db"))
    (mf,) = o["metadata"]["managedFields"]
    assert (mf["manager"], mf["operation"], mf["fieldsType"]) == ("parity-test", "Update", "FieldsV1")
    assert mf["fieldsV1"]["f:spec"] == {".": {}, "f:ports": {}, "f:type": {}}
    assert o["metadata"]["generation"] == 1 and "status" not in o
    path = f"{MCS}/namespaces/NS/serviceimports/db"
    o["metadata"]["labels"] = {"app": "y"}
    assert server.ok("PUT", path, o)["metadata"]["generation"] == 1  # metadata is not the body
    o = server.ok("GET", path)
    o["spec"]["ports"][0]["port"], o["status"] = 81, {"clusters": [{"cluster": "a"}]}
    o = server.ok("PUT", path, o)
    assert o["metadata"]["generation"] == 2 and "status" not in o  # status only through /status
    o["spec"]["ports"][0]["port"], o["status"] = 82, {"clusters": [{"cluster": "b"}]}
    s = server.ok("PUT", path + "/status", o)
    assert (s["metadata"]["generation"], s["spec"]["ports"][0]["port"], s["status"]) == (
        2, 81, {"clusters": [{"cluster": "b"}]})
    assert sorted(m.get("subresource", "") for m in s["metadata"]["managedFields"]) == ["", "status"]


def test_services_have_defaults_and_no_generation(server: Server) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
           "spec": {"ports": [{"port": 80}]}}
    o = server.ok("POST", "/api/v1/namespaces/NS/services", svc)
    assert "generation" not in o["metadata"] and o["status"] == {"loadBalancer": {}}
    assert (o["spec"]["internalTrafficPolicy"], o["spec"]["ipFamilies"]) == ("Cluster", ["IPv4"])
    (mf,) = o["metadata"]["managedFields"]
    assert 'k:{"port":80,"protocol":"TCP"}' in mf["fieldsV1"]["f:spec"]["f:ports"]
    hl = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hl"}, "spec": {"clusterIP": "None"}}
    o = server.ok("POST", "/api/v1/namespaces/NS/services", hl)
    assert (o["spec"]["ipFamilyPolicy"], o["spec"]["ipFamilies"]) == ("RequireDualStack", ["IPv4", "IPv6"])
    bad = js(server("POST", "/api/v1/namespaces/NS/services", dict(svc, metadata={"name": "a.b"})))
    assert bad["code"] == 422 and bad["message"] == (
        'Service "a.b" is invalid: metadata.name: Invalid value: "a.b": must not contain dots')


def test_endpointslice_generation_defaults_and_limits(server: Server) -> None:
    path = f"{EPS}/namespaces/NS/endpointslices"
    o = server.ok("POST", path, slice_("s"))
    assert o["metadata"]["generation"] == 1 and o["endpoints"][0]["conditions"] == {}
    o["endpoints"].append({"addresses": ["10.9.9.9"]})
    o = server.ok("PUT", f"{path}/s", o)
    o["metadata"]["labels"]["x"] = "y"
    assert (o["metadata"]["generation"], server.ok("PUT", f"{path}/s", o)["metadata"]["generation"]) == (2, 3)
    assert server("POST", path, slice_("full", n=1000))[0] == 201
    big = js(server("POST", path, slice_("big", n=1001)))
    assert (big["code"], big["message"]) == (
        422, 'EndpointSlice.discovery.k8s.io "big" is invalid: endpoints: Too many: 1001: '
        "must have at most 1000 items")
    assert big["details"]["causes"][0]["field"] == "endpoints"


def test_lists_page_except_from_the_watch_cache(server: Server) -> None:
    for i in range(5):
        server.ok("POST", f"{MCS}/namespaces/NS/serviceimports", si(f"s{i}"))
    base = f"{MCS}/namespaces/NS/serviceimports"
    whole = server.ok("GET", f"{base}?limit=2&resourceVersion=0")
    assert len(whole["items"]) == 5 and not whole["metadata"].get("continue")  # limit ignored
    page = server.ok("GET", f"{base}?limit=2")
    assert len(page["items"]) == 2 and page["metadata"]["remainingItemCount"] == 3
    rest = server.ok("GET", f"{base}?limit=3&continue={page['metadata']['continue']}")
    assert [o["metadata"]["name"] for o in page["items"] + rest["items"]] == [f"s{i}" for i in range(5)]
    assert js(server("GET", f"{base}?limit=2&continue=garbage"))["code"] == 400
    assert js(server("GET", f"{base}?fieldSelector=spec.type%3Dx"))["message"] == (
        "field label not supported: spec.type")
    meta = server("GET", base, headers={
        "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
    assert js(meta)["kind"] == "PartialObjectMetadataList" and "spec" not in js(meta)["items"][0]
    assert server("GET", base, headers={"Accept": "application/vnd.kubernetes.protobuf"})[0] == 406


def test_watches_refuse_what_the_real_server_refuses(server: Server) -> None:
    base = f"{MCS}/namespaces/NS/serviceimports"
    server.ok("POST", base, si("w"))
    rv = server.ok("GET", base)["metadata"]["resourceVersion"]
    w = f"{base}?watch=1&timeoutSeconds=1"
    assert [t for t, _ in events(server("GET", f"{w}&resourceVersion=0"))] == ["ADDED"]
    # bookmarks from "now" make a streaming list, which this etcd (3.4, no progress notify) cannot serve
    a = server("GET", f"{w}&resourceVersion=0&allowWatchBookmarks=true")
    ((typ, st),) = events(a)
    assert (typ, st["code"], st["reason"]) == ("ERROR", 500, "InternalError")
    assert "RequestWatchProgress" in st["message"]
    bad = js(server("GET", f"{w}&sendInitialEvents=true"))
    assert bad["code"] == 422 and bad["details"]["causes"][0]["field"] == "resourceVersionMatch"
    server.ok("POST", base, si("w2"))
    evs = events(server("GET", f"{w}&allowWatchBookmarks=true&resourceVersion={rv}"))
    assert [(t, o["metadata"]["name"]) for t, o in evs if t != "BOOKMARK"] == [("ADDED", "w2")]
    assert json.dumps(evs[0][1]).count("managedFields") == 1  # watch events carry them too


def test_token_requests_are_answered_alike(server: Server) -> None:
    """What `mcsdns join` asks: a TokenRequest for a ServiceAccount, with a lifetime."""
    path = "/api/v1/namespaces/NS/serviceaccounts/joiner/token"
    req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    code, _, body = server("POST", path, req)
    assert code == 404 and 'serviceaccounts "joiner" not found' in js((code, {}, body))["message"]
    server.ok("POST", "/api/v1/namespaces/NS/serviceaccounts",
              {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "joiner"}})
    code, _, body = server("POST", path, {**req, "spec": {"expirationSeconds": 599}})
    assert code == 422, body
    assert "may not specify a duration less than 10 minutes" in js((code, {}, body))["message"]
    tok = server.ok("POST", path, req)
    assert tok["kind"] == "TokenRequest" and tok["spec"]["expirationSeconds"] == 3600
    assert tok["status"]["token"]
    day = server.ok("POST", path, {**req, "spec": {"expirationSeconds": 86400}})
    assert day["spec"]["expirationSeconds"] == 86400 and day["status"]["token"] != tok["status"]["token"]
    assert day["status"]["expirationTimestamp"] > tok["status"]["expirationTimestamp"]


def test_metadata_only_lists_and_watches_of_nodes(server: Server) -> None:
    """What the controller's Node watch asks for (client.METADATA_ONLY): the list's media type
    for lists, the object's for watches; the other way round a list is 406."""
    name = f"{server.ns}-n1"
    server.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"topology.kubernetes.io/zone": "z1"}}})
    try:
        lst = js(server("GET", "/api/v1/nodes", headers={"Accept": METADATA_ONLY[0]}))
        mine = [o for o in lst["items"] if o["metadata"]["name"] == name]
        assert lst["kind"] == "PartialObjectMetadataList" and mine[0]["kind"] == "PartialObjectMetadata"
        assert mine[0]["metadata"]["labels"]["topology.kubernetes.io/zone"] == "z1"
        assert server("GET", "/api/v1/nodes", headers={"Accept": METADATA_ONLY[1]})[0] == 406
        w = events(server("GET", "/api/v1/nodes?watch=1&timeoutSeconds=1&resourceVersion=0",
                          headers={"Accept": METADATA_ONLY[1]}))
        got = [o for t, o in w if t == "ADDED" and o["metadata"]["name"] == name]
        assert got[0]["kind"] == "PartialObjectMetadata" and "spec" not in got[0] and "status" not in got[0]
    finally:
        server("DELETE", f"/api/v1/nodes/{name}")
