"""The per-cluster topology on three REAL kube-apiservers (realk8s.sh, $MCSDNS_REALK8S; skipped
without it), which enforce RBAC: one `mcsdns controller --local NAME --leader-elect` per member,
each reading the other two with the read-only credential `mcsdns join --read-only` issued (which
the API server refuses a write). While member c's kube-apiserver hangs (SIGSTOP), a and b keep
importing each other's changes and c's endpoints leave them after the Endpoint TTL; c catches up
once it answers again. No controller writes into another member. The watches each API server
serves (its apiserver_longrunning_requests) are printed for both topologies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from support.controller_env import Controller, eventually, run_controller
from support.helpers import REPO
from support.real_fleet import addresses, populate, stopped
from support.realk8s import SKIP_REASON, RealK8s, script

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Rejected

pytestmark = pytest.mark.skipif(script() is None, reason=SKIP_REASON)
TTL = 10
IDS = {"a": ("east", "10.1.0.1"), "b": ("west", "10.2.0.1"), "c": ("north", "10.3.0.1")}
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[dict[str, RealK8s]]:
    out: dict[str, RealK8s] = {}
    try:
        names = [f"mcsdns-test-{os.getpid()}-local-{name}" for name in IDS]
        out.update(zip(IDS, RealK8s.up_many(names, tmp_path / "realk8s"), strict=True))
        for name, (cid, ip) in IDS.items():
            populate(out[name], cid, ip)
        yield out
    finally:
        for k in out.values():
            k.down()


def watches(k: RealK8s) -> int:
    """WATCH requests the API server serves now (its /metrics)."""
    code, _, body = k.request("GET", "/metrics")
    assert code == 200, body[:200]
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
                   if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line))


def endpoint(k: RealK8s, name: str, ip: str) -> None:
    """One more source EndpointSlice of shop/web."""
    k.json("POST", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]})


def join_read_only(k: RealK8s, name: str, out: Path) -> Path:
    run = subprocess.run([sys.executable, "-m", "mcsdns", "join", name, "--read-only", "--kubeconfig",
                          str(k.kubeconfig), "--output", str(out)], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr
    return out


def wrote_only_into(ctl: Controller, name: str) -> None:
    """Every write request of this controller went to member `name`."""
    m = ctl.metrics()
    written = {k for k, v in m.items() if v and k.startswith("mcsdns_controller_api_requests_total{")
               and any(f'method="{w}"' in k for w in WRITES)}
    assert written and all(f'member="{name}"' in k for k in written), (name, written)


def test_local_controllers_on_real_members_survive_a_partition_of_one(
        fleet: dict[str, RealK8s], tmp_path: Path) -> None:
    base = {n: watches(k) for n, k in fleet.items()}
    readers = {n: join_read_only(k, n, tmp_path / f"reader-{n}") for n, k in fleet.items()}
    # the reader credential may read, and a write is refused by RBAC
    reader = Client.load(str(readers["b"]), None)
    assert [x["metadata"]["name"] for x in reader.list("/api/v1/namespaces/shop/services")] == ["web"]
    with pytest.raises(Rejected) as e:
        reader.request("POST", "/api/v1/namespaces/shop/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
            "spec": {"ports": [{"port": 1}]}})
    assert e.value.status == 403 and "system:serviceaccount:mcsdns-system:mcsdns-reader" in str(e.value.body)
    reader.close()
    want = {ip for _, ip in IDS.values()}
    with ExitStack() as stack:
        ctls: dict[str, Controller] = {}
        t0 = time.monotonic()
        for n in fleet:
            args = ["--local", n, "--leader-elect", "--lease-namespace", "default",
                    "--endpoint-ttl", str(TTL), "--resync", "600"]
            for m, k in fleet.items():
                args += ["--cluster", f"{m}={k.kubeconfig if m == n else readers[m]}"]
            ctls[n] = stack.enter_context(run_controller(args, tmp_path, f"local-{n}"))
        eventually(lambda: all(addresses(k) == want for k in fleet.values()), timeout=120,
                   what="web from every member in every member")
        first = time.monotonic() - t0
        eventually(lambda: all(c.ready() for c in ctls.values()), what="every controller ready")
        local = {n: watches(k) - base[n] for n, k in fleet.items()}
        apiserver = int((fleet["c"].kubeconfig.parent / "apiserver.pid").read_text())
        with stopped(apiserver):
            t1 = time.monotonic()
            endpoint(fleet["a"], "web-2", "10.1.0.2")
            eventually(lambda: "10.1.0.2" in addresses(fleet["b"]), what="a's change in b")
            during = time.monotonic() - t1
            endpoint(fleet["b"], "web-2", "10.2.0.2")
            eventually(lambda: "10.2.0.2" in addresses(fleet["a"]), what="b's change in a")
            gone = {"10.1.0.1", "10.1.0.2", "10.2.0.1", "10.2.0.2"}
            eventually(lambda: addresses(fleet["a"]) == gone and addresses(fleet["b"]) == gone, timeout=90,
                       what="c's endpoints gone from a and b after the TTL")
            dropped = time.monotonic() - t1
        t2 = time.monotonic()
        everything = gone | {"10.3.0.1"}
        eventually(lambda: all(addresses(k) == everything for k in fleet.values()), timeout=120,
                   what="c back: every change everywhere")
        back = time.monotonic() - t2
        for n, ctl in ctls.items():
            wrote_only_into(ctl, n)
            assert "forbidden" not in ctl.logs().lower(), ctl.logs()[-3000:]
    # the central topology on the same members, for the watch count
    args = ["--writer-grace", "1", "--resync", "600"]
    for m, k in fleet.items():
        args += ["--cluster", f"{m}={k.kubeconfig}"]
    with run_controller(args, tmp_path, "central") as ctl:
        eventually(ctl.ready, timeout=120, what="central ready")
        t3 = time.monotonic()
        endpoint(fleet["a"], "web-3", "10.1.0.3")
        eventually(lambda: all("10.1.0.3" in addresses(k) for k in fleet.values()),
                   what="a's change everywhere (central)")
        central_change = time.monotonic() - t3
        central = {n: watches(k) - base[n] for n, k in fleet.items()}
    print(f"--local x3 on real kube-apiservers: first sync {first:.1f} s; with c hung, a's change in b "
          f"{during:.2f} s, c's endpoints gone from a and b {dropped:.1f} s after the hang (TTL {TTL}); "
          f"c caught up {back:.1f} s after SIGCONT; central: a's change everywhere {central_change:.2f} s")
    print(f"watches served per API server by the controllers: --local {local}, central {central}")
    assert all(local[n] > central[n] for n in fleet)
