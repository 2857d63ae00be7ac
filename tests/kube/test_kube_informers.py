"""The one informer set (mcsdns/kube/apiclient/informers.py): discovery retried, a set of collections
whose health is combined (healthy only while every one is), and each distinct problem told
once however many collections have it and however often they retry."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeapi import KubeAPI
from support.helpers import wait_for

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Unreachable
from mcsdns.kube.apiclient.informers import DISCOVERY, Informers
from mcsdns.kube.resources import ENDPOINT_SLICES, SERVICE_IMPORTS


class Seen:
    """What an Informers told: every (healthy, changed), every problem."""

    def __init__(self) -> None:
        self.health: list[tuple[bool, bool]] = []
        self.problems: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def on_health(self, ok: bool, changed: bool) -> None:
        with self.lock:
            self.health.append((ok, changed))

    def on_problem(self, who: str, text: str) -> None:
        with self.lock:
            self.problems.append((who, text))

    def changes(self) -> list[bool]:
        with self.lock:
            return [ok for ok, changed in self.health if changed]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[KubeAPI, Informers, Seen]]:
    with KubeAPI() as api:
        c = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None)
        stop, seen = threading.Event(), Seen()
        inf = Informers(c, stop, backoff=(0.02, 0.1), on_health=seen.on_health, on_problem=seen.on_problem)
        try:
            yield api, inf, seen
        finally:
            stop.set()
            for t in inf.interrupt():
                t.join(2)
            c.close()


def watch_both(inf: Informers) -> None:
    noop: Any = lambda *a: None  # noqa: E731
    inf.watch("imports", SERVICE_IMPORTS.path(version="v1beta1"), on_list=noop, on_event=noop)
    inf.watch("slices", ENDPOINT_SLICES.path(), on_list=noop, on_event=noop)
    inf.start()


def test_healthy_only_while_every_collection_is(env: tuple[KubeAPI, Informers, Seen]) -> None:
    api, inf, seen = env
    api.deny("endpointslices")
    watch_both(inf)
    assert wait_for(lambda: inf.ok["imports"] and len(seen.problems) == 1)
    assert not inf.healthy and seen.changes() == []  # one of two collections is not enough
    assert seen.problems[0][0] == "slices" and "HTTP 403" in seen.problems[0][1]
    assert inf.last_error.startswith("slices: HTTP 403")
    api.allow()
    assert wait_for(lambda: inf.healthy)
    assert seen.changes() == [True]
    api.fail_next(10_000, 500, message="etcd down")
    api.drop_watches()
    assert wait_for(lambda: not inf.healthy)
    api.fail_next(0)
    assert wait_for(lambda: inf.healthy)
    assert seen.changes() == [True, False, True]


def test_each_problem_told_once(env: tuple[KubeAPI, Informers, Seen]) -> None:
    api, inf, seen = env
    api.fail_next(10_000, 500, message="etcd down")
    watch_both(inf)
    # both collections fail, again and again, with one problem: told once
    assert wait_for(lambda: inf.errors["http_500"] >= 10)
    assert seen.problems == [("imports", "HTTP 500 InternalError: etcd down")] or \
        seen.problems == [("slices", "HTTP 500 InternalError: etcd down")]
    api.fail_next(0)
    assert wait_for(lambda: inf.healthy)
    api.fail_next(10_000, 500, message="etcd down")  # a new outage is a new problem
    api.drop_watches()
    assert wait_for(lambda: len(seen.problems) == 2)
    api.fail_next(10_000, 503, message="shutting down")  # and another problem is too
    assert wait_for(lambda: len(seen.problems) == 3)
    assert seen.problems[2][1] == "HTTP 503 InternalError: shutting down"
    assert inf.errors["http_500"] + inf.errors["http_503"] >= 3


def test_discovery_retried_and_told_once(env: tuple[KubeAPI, Informers, Seen]) -> None:
    _, inf, seen = env
    calls: list[int] = []

    def step() -> bool:
        calls.append(1)
        if len(calls) <= 5:
            raise Unreachable("refused")
        return len(calls) >= 7  # then not served, twice

    assert inf.discover(step)
    assert len(calls) == 7
    assert seen.problems == [(DISCOVERY, "refused")] and not inf.healthy
    assert DISCOVERY not in inf.problems.held  # over once discovery succeeded


def _slice(name: str, addr: str) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "ns"}, "addressType": "IPv4",
            "endpoints": [{"addresses": [addr]}]}


def test_a_write_result_arriving_after_the_deletion_does_not_bring_the_object_back(
        env: tuple[KubeAPI, Informers, Seen]) -> None:
    """A reconcile's write returns; before its result reaches the cache, someone deletes the
    object and the watch's DELETED event is applied: the late result must not re-add it (it
    would stay until the next relist, and the controller would act on a deleted object)."""
    api, inf, _ = env
    changes: list[tuple[Any, ...]] = []
    cache = inf.cache("slices", ENDPOINT_SLICES.path(), lambda k, old, new: changes.append((k, new)))
    inf.start()
    written = api.put(_slice("web-1", "10.0.0.1"))  # what our write got back
    assert wait_for(lambda: cache.get(("ns", "web-1")) is not None)
    api.delete("EndpointSlice", "ns", "web-1")
    assert wait_for(lambda: cache.get(("ns", "web-1")) is None)
    cache.note_written(written)  # the write's result, late
    assert cache.get(("ns", "web-1")) is None
    again = api.put(_slice("web-1", "10.0.0.2"))  # created again: newer than the deletion
    assert wait_for(lambda: (cache.get(("ns", "web-1")) or {}).get("endpoints") == again["endpoints"])


def test_discovery_waits_as_long_as_a_429_asks(env: tuple[KubeAPI, Informers, Seen]) -> None:
    """A 429's Retry-After is waited (up to 30 s), however short the own backoff is."""
    _, inf, _ = env
    asked: list[float] = []

    def wait(timeout: float | None = None) -> bool:
        asked.append(timeout or 0.0)
        return False

    inf.stop.wait = wait  # type: ignore[method-assign]
    calls: list[int] = []

    def step() -> bool:
        calls.append(1)
        if len(calls) <= 2:
            raise Unreachable("throttled", status=429, retry_after=(7.0, 90.0)[len(calls) - 1])
        return True

    assert inf.discover(step)
    assert asked == [7.0, 30.0]
