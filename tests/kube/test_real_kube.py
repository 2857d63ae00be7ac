"""The kube client's error taxonomy and the reflector's list/watch/relist on a real
kube-apiserver (MCSDNS_REALK8S; skipped without it): what the test API server imitates,
checked against the thing itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.helpers import wait_for
from support.realk8s import RealK8s
from support.realk8s_probe import si

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Conflict, NotFound, Rejected, explain
from mcsdns.kube.apiclient.reflector import Reflector
from mcsdns.kube.resources import SERVICE_IMPORTS

V = "v1beta1"


@pytest.fixture
def ns(real_k8s: RealK8s) -> str:
    return real_k8s.namespace("kube")


@pytest.fixture
def client(real_k8s: RealK8s) -> Iterator[Client]:
    c = Client.load(str(real_k8s.kubeconfig), None, name="real")
    yield c
    c.close()


def test_each_real_refusal_is_one_error_of_the_taxonomy(client: Client, ns: str) -> None:
    path = SERVICE_IMPORTS.path(ns, version=V)
    with pytest.raises(NotFound):
        client.get(SERVICE_IMPORTS.path(ns, "nope", version=V))
    made = client.request("POST", path, body=si("db"))
    with pytest.raises(Conflict):
        client.request("POST", path, body=si("db"))  # AlreadyExists
    stale = dict(made, spec=dict(made["spec"], type="Headless"))
    client.request("PUT", SERVICE_IMPORTS.path(ns, "db", version=V), body=dict(made, metadata=dict(
        made["metadata"], labels={"v": "2"})))
    with pytest.raises(Conflict):
        client.request("PUT", SERVICE_IMPORTS.path(ns, "db", version=V), body=stale)  # old resourceVersion
    with pytest.raises(Rejected) as e:
        client.request("POST", path, body=dict(si("x"), metadata={"name": "Bad_Name"}))
    assert e.value.status == 422
    assert 'ServiceImport.multicluster.x-k8s.io "Bad_Name" is invalid' in explain(e.value)
    with pytest.raises(Rejected) as e:
        client.get(path, {"limit": 1, "continue": "garbage"})
    assert e.value.status == 400


def test_forbidden_is_explained_with_the_rule_that_allows_it(real_k8s: RealK8s, ns: str) -> None:
    c = Client.load(str(real_k8s.token_for(ns, "reader")), None)
    try:
        with pytest.raises(Rejected) as e:
            c.list(SERVICE_IMPORTS.path(ns, version=V))
    finally:
        c.close()
    text = explain(e.value)
    assert text.startswith("HTTP 403 Forbidden: ")
    assert f'User "system:serviceaccount:{ns}:reader" cannot list' in text
    assert text.endswith(f'add to a Role in namespace "{ns}" (or the ClusterRole): apiGroups: '
                         '["multicluster.x-k8s.io"], resources: ["serviceimports"], verbs: ["list"]')


class Seen:
    """What a Reflector told."""

    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.health: list[bool] = []
        self.names: set[str] = set()  # what the lists and events add up to

    def on_list(self, items: list[Any], deleted: set[Any]) -> None:
        self.lists.append(sorted(o["metadata"]["name"] for o in items))
        self.names = set(self.lists[-1])

    def on_event(self, typ: str, obj: Any) -> None:
        self.events.append((typ, obj["metadata"]["name"]))
        (self.names.discard if typ == "DELETED" else self.names.add)(obj["metadata"]["name"])


def test_reflector_lists_watches_and_relists_after_410(client: Client, ns: str) -> None:
    path = SERVICE_IMPORTS.path(ns, version=V)
    for name in ("a", "b"):
        client.request("POST", path, body=si(name))
    seen, stop = Seen(), threading.Event()
    r = Reflector("imports", client, path, on_list=seen.on_list, on_event=seen.on_event, stop=stop,
                  on_error=seen.errors.append, on_health=lambda ok, e: seen.health.append(ok),
                  page_size=1, backoff=(0.05, 0.2))
    r.start()
    try:
        # the first list asks for resourceVersion "0", the watch cache's view, which may be a
        # moment old (as client-go's): what it lacks arrives as events
        assert wait_for(lambda: seen.names == {"a", "b"}), (seen.lists, seen.events, seen.errors)
        client.request("POST", path, body=si("c"))
        assert wait_for(lambda: ("ADDED", "c") in seen.events)
        # a real server may also answer 410 on its own (a re-initialized watch cache): a
        # relist only ever follows one
        assert len(seen.lists) <= 1 + seen.errors.count("expired"), (seen.lists, seen.errors)
        lists, expired = len(seen.lists), seen.errors.count("expired")
        r.rv = "1"  # long compacted out of the watch cache: the real server answers 410
        r.interrupt()
        assert wait_for(lambda: len(seen.lists) > lists), seen.errors
        # after a 410 a list asks for the latest state: complete
        assert seen.lists[lists] == ["a", "b", "c"] and seen.errors.count("expired") > expired
        lists = len(seen.lists)
        r.request_relist()  # SIGHUP: the latest state, from etcd, paged
        assert wait_for(lambda: len(seen.lists) > lists)
        assert seen.lists[lists] == ["a", "b", "c"]
        client.request("DELETE", SERVICE_IMPORTS.path(ns, "a", version=V))
        assert wait_for(lambda: ("DELETED", "a") in seen.events)
        assert seen.names == {"b", "c"} and seen.health[-1] is True
    finally:
        stop.set()
        r.interrupt()
        if r.thread is not None:
            r.thread.join(5)
