"""Locality-aware headless answers: the same query from two clusters, and failover."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import dns.rcode
import pytest
from support.helpers import REPO, Server, run_server, wait_for

EXAMPLE = REPO / "examples" / "locality"
NAME = "api.shop.svc.clusterset.local."
SRV = "_grpc._tcp." + NAME
REGIONS = ["--cluster-region", "cluster-a=eu-west", "--cluster-region", "cluster-b=eu-west",
           "--cluster-region", "cluster-c=us-east"]


def a_list(srv: Server) -> list[str]:
    return [rd.to_text() for rr in srv.query(NAME, "A", tcp=True).answer for rd in rr]


def srv_priorities(srv: Server) -> dict[str, int]:
    """SRV target cluster -> set of priorities seen."""
    out: dict[str, int] = {}
    for rr in srv.query(SRV, "SRV", tcp=True).answer:
        for rd in rr:
            cluster = rd.target.labels[1].decode()
            assert out.setdefault(cluster, rd.priority) == rd.priority
    return out


def tiers(addrs: list[str]) -> list[str]:
    """The /16 network of each address, in answer order, with repeats collapsed."""
    out: list[str] = []
    for a in addrs:
        net = ".".join(a.split(".")[:2])
        if not out or out[-1] != net:
            out.append(net)
    return out


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / "m"))


@pytest.fixture
def views(mdir: Path, tmp_path: Path) -> Iterator[dict[str, Server]]:
    with ExitStack() as stack:
        yield {
            c: stack.enter_context(run_server(
                ["--manifests", str(mdir), "--cluster-id", c, *REGIONS], tmp_path))
            for c in ("cluster-a", "cluster-c")
        }


def test_same_query_from_two_clusters_orders_differently(views: dict[str, Server]) -> None:
    a, c = views["cluster-a"], views["cluster-c"]
    for _ in range(4):  # rotation keeps the tier order
        assert tiers(a_list(a)) == ["10.1", "10.2", "10.3"]
        from_c = a_list(c)
        # cluster-a and cluster-b are one tier (another region) from cluster-c
        assert tiers(from_c[:2]) == ["10.3"] and "10.3" not in tiers(from_c[2:])
    assert set(a_list(a)) == set(a_list(c))  # same endpoints, different order
    assert srv_priorities(a) == {"cluster-a": 0, "cluster-b": 10, "cluster-c": 20}
    assert srv_priorities(c) == {"cluster-c": 0, "cluster-a": 20, "cluster-b": 20}
    # within a tier, answers still rotate
    firsts = {a_list(a)[0] for _ in range(6)}
    assert firsts == {"10.1.0.1", "10.1.0.2"}


def test_failover_when_local_endpoints_go_not_ready(views: dict[str, Server], mdir: Path) -> None:
    a = views["cluster-a"]
    f = mdir / "api.yaml"
    text = f.read_text()
    head, sep, rest = text.partition("name: api-cluster-a")
    block, sep2, tail = rest.partition("---")
    f.write_text(head + sep + block.replace("ready: true", "ready: false") + sep2 + tail)
    assert wait_for(lambda: tiers(a_list(a)) == ["10.2", "10.3"])
    assert srv_priorities(a) == {"cluster-b": 10, "cluster-c": 20}
    # the per-pod names of a not-ready pod are gone
    assert a.query("api-1.cluster-a." + NAME).rcode() == dns.rcode.NXDOMAIN


def test_only_when_available_answers_local_then_falls_back(mdir: Path, tmp_path: Path) -> None:
    args = ["--manifests", str(mdir), "--cluster-id", "cluster-a", "--prefer-local",
            "only-when-available", *REGIONS]
    with run_server(args, tmp_path) as a:
        assert sorted(a_list(a)) == ["10.1.0.1", "10.1.0.2"]
        assert srv_priorities(a) == {"cluster-a": 0}
        # per-pod names of other clusters still resolve
        assert a.query("api-1.cluster-c." + NAME).answer
        f = mdir / "api.yaml"
        one_down = f.read_text().replace('"10.1.0.1"]\n  hostname: api-1\n  zone: eu-west-a\n'
                                         '  conditions: {ready: true}',
                                         '"10.1.0.1"]\n  hostname: api-1\n  zone: eu-west-a\n'
                                         '  conditions: {ready: false}')
        assert one_down != f.read_text()
        f.write_text(one_down)
        assert wait_for(lambda: a_list(a) == ["10.1.0.2"])
        # all of cluster-a down: fall back to every ready endpoint, in tier order
        f.write_text(_set_cluster_ready(f.read_text(), "cluster-a", False))
        assert wait_for(lambda: tiers(a_list(a)) == ["10.2", "10.3"])


def test_locality_off_without_cluster_id(mdir: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        assert set(srv_priorities(srv).values()) == {0}
        assert len(a_list(srv)) == 6


def _set_cluster_ready(text: str, cluster: str, ready: bool) -> str:
    docs = text.split("---")
    for i, d in enumerate(docs):
        if f"name: api-{cluster}" in d:
            docs[i] = d.replace("ready: true", f"ready: {str(ready).lower()}")
    return "---".join(docs)


DRAINING = """apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: drain, namespace: shop}
spec: {type: Headless}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: drain-a
  namespace: shop
  labels:
    multicluster.kubernetes.io/service-name: drain
    multicluster.kubernetes.io/source-cluster: cluster-a
addressType: IPv4
endpoints:
- addresses: ["10.5.0.1"]
  conditions: {ready: false, serving: true, terminating: true}
- addresses: ["10.5.0.2"]
  conditions: {ready: false, serving: false, terminating: true}
"""


@pytest.mark.parametrize("fallback", [False, True])
def test_terminating_fallback_is_opt_in(tmp_path: Path, fallback: bool) -> None:
    mdir = tmp_path / "d"
    mdir.mkdir()
    (mdir / "drain.yaml").write_text(DRAINING)
    args = ["--manifests", str(mdir)] + (["--terminating-fallback"] if fallback else [])
    with run_server(args, tmp_path) as srv:
        r = srv.query("drain.shop.svc.clusterset.local.", "A")
        if fallback:  # serving+terminating answered while nothing is ready, as kube-proxy does
            assert [rd.to_text() for rr in r.answer for rd in rr] == ["10.5.0.1"]
        else:  # the spec: no ready endpoint, NXDOMAIN
            assert r.rcode() == dns.rcode.NXDOMAIN
