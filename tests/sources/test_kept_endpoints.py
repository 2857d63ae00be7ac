"""End to end: `mcsdns serve --kubeconfig` keeps a listed slice's endpoints as their text
until its service is first read (ops/load.py, stage 3) and answers, logs and counts exactly
as a start that parses them at once (--state-dir)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import KubeAPI
from support.helpers import run_server, wait_for
from support.kube_objects import addrs, endpoint_slice, service_import

Z = "clusterset.local"


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    with KubeAPI() as a:
        a.put(service_import("db", "shop", []) | {"spec": {"type": "Headless", "ports": []}})
        a.put(service_import("web", "front", ["10.9.0.1"]))
        bad = endpoint_slice("db-a", "shop", "db", ["10.1.0.1", "10.1.0.300", "10.1.0.2"])
        bad["endpoints"][0]["hostname"] = "db-0"
        a.put(bad)
        a.put(endpoint_slice("db-b", "shop", "db", ["10.2.0.1"], cluster="cluster-b"))
        # a ClusterSetIP service's slice, which its records never read (the log is throttled
        # per namespace: another one)
        a.put(endpoint_slice("web-a", "front", "web", ["10.1.1.1", "no-address"]))
        yield a


@pytest.mark.parametrize("state_dir", [False, True], ids=["kept", "parsed-at-once"])
def test_kept_endpoints_answer_log_and_count_as_parsed_ones(api: KubeAPI, tmp_path: Path,
                                                            state_dir: bool) -> None:
    args = ["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc"))]
    if state_dir:
        args += ["--state-dir", str(tmp_path / "state")]
    with run_server(args, tmp_path) as srv:
        assert addrs(srv, f"db.shop.svc.{Z}") == ["10.1.0.1", "10.1.0.2", "10.2.0.1"]
        assert addrs(srv, f"db-0.cluster-a.db.shop.svc.{Z}") == ["10.1.0.1"]
        assert addrs(srv, f"10-1-0-2.cluster-a.db.shop.svc.{Z}") == ["10.1.0.2"]
        assert addrs(srv, f"10-1-0-300.cluster-a.db.shop.svc.{Z}") == "NXDOMAIN"
        assert addrs(srv, f"web.front.svc.{Z}") == ["10.9.0.1"]
        # each slice's malformed endpoint (its address and the endpoint: two parts), once; the
        # web slice's by the background pass
        assert wait_for(lambda: srv.metric('mcsdns_skipped_objects_total{kind="EndpointSlice"}') == 4)
        logs = srv.logs()
        for line in ("shop/db-a: 2 parts: endpoint 1: '10.1.0.300' is not an IP address",
                     "front/web-a: 2 parts: endpoint 1: 'no-address' is not an IP address"):
            assert logs.count(line) == 1, logs
