"""Locality end to end: three real kube-apiservers, the controller, and a real kube-proxy
(iptables, then nftables) in a network namespace as a Node of cluster west in zone z1.
Counts where 30 connections to the ClusterSetIP (the derived Service's ClusterIP) land
before, while and after west's own endpoint is not ready.

Needs MCSDNS_REALK8S (tests/support/realk8s.py), MCSDNS_KUBE_PROXY (tests/support/kubeproxy_env.py), root
and iproute2; skips, saying which is missing, otherwise."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.controller_env import eventually, run_controller
from support.helpers import LIVENESS
from support.kubeproxy_env import SKIP_REASON as NO_KUBE_PROXY
from support.kubeproxy_env import UnixRelay, agent, binary, kube_proxy, netns, probe, rules
from support.kubeproxy_fleet import ENDPOINTS, IDS, NODE_IP, NS, hinted, set_ready, set_up
from support.realk8s import SKIP_REASON, RealK8s, script

from mcsdns.controller.kinds.derivedservice import derived_name

Obj = dict[str, Any]


def set_distribution(ks: dict[str, RealK8s], td: str | None) -> None:
    """Every export's Service's trafficDistribution (None: unset)."""
    for k in ks.values():
        svc = k.json("GET", f"/api/v1/namespaces/{NS}/services/web")
        svc["spec"].pop("trafficDistribution", None)
        if td:
            svc["spec"]["trafficDistribution"] = td
        k.json("PUT", f"/api/v1/namespaces/{NS}/services/web", svc)


@pytest.fixture(scope="module")
def clusterset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Three real control planes exporting shop/web, the controller, west's ClusterSetIP."""
    if script() is None:
        pytest.skip(SKIP_REASON)
    home = tmp_path_factory.mktemp("kube-proxy")
    exe = binary(home)
    if exe is None:
        pytest.skip(NO_KUBE_PROXY)
    ks: dict[str, RealK8s] = {}
    try:
        ks.update(zip(IDS, RealK8s.up_many([f"kp-{n}" for n in IDS], home / "realk8s"), strict=True))
        for n in IDS:
            set_up(n, ks[n])
        args = [a for n, k in ks.items() for a in ("--cluster", f"{n}={k.kubeconfig}")]
        with run_controller(args, home) as ctl:
            eventually(lambda: hinted(ks["b"]), what="hints on west's imported slices")
            vip = ks["b"].json("GET", f"/api/v1/namespaces/{NS}/services/{derived_name((NS, 'web'))}")
            yield {"k8s": ks, "exe": exe, "home": home, "vip": vip["spec"]["clusterIP"], "ctl": ctl}
    finally:
        for k in ks.values():
            k.down()


def moved(ns: str, vip: str, want: str | None, timeout: float = LIVENESS) -> float:
    """Seconds until one connection a probe makes lands at `want` (None: anywhere but west)
    five times in a row."""
    t0, streak = time.monotonic(), 0
    while streak < 5:
        got = next(iter(probe(ns, vip, 80, 1)))
        ok = got == want if want is not None else got in ("east", "north")
        streak = streak + 1 if ok else 0
        assert time.monotonic() - t0 < timeout, f"traffic did not move to {want or 'the other clusters'}"
    return time.monotonic() - t0


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_kube_proxy_keeps_clusterset_ip_traffic_local_until_the_local_endpoint_fails(
        clusterset: dict[str, Any], mode: str, tmp_path: Path) -> None:
    b, vip = clusterset["k8s"]["b"], clusterset["vip"]
    port = int(b.url.rsplit(":", 1)[1])
    relay = UnixRelay(tmp_path, port)
    eps = {ENDPOINTS[n][0]: IDS[n] for n in IDS}
    with netns(f"mcsdns-kp-{os.getpid()}", [*eps, NODE_IP]) as ns:
        srv = agent(ns, tmp_path, [port], eps)
        proxy = kube_proxy(clusterset["exe"], ns, b.kubeconfig, "b-1", mode, tmp_path / "kube-proxy.log")
        try:
            try:
                eventually(lambda: probe(ns, vip, 80, 1).get("west"), what="kube-proxy routing")
            except AssertionError:
                log = (tmp_path / "kube-proxy.log").read_text()[-3000:]
                raise AssertionError(f"{vip}: {probe(ns, vip, 80, 3)}; {log}\n{rules(ns)}") from None
            before = probe(ns, vip, 80)
            set_ready(b, False)
            failover = moved(ns, vip, None)
            during = probe(ns, vip, 80)
            set_ready(b, True)
            failback = moved(ns, vip, "west")
            after = probe(ns, vip, 80)
            set_distribution(clusterset["k8s"], None)  # opted out: spread over every cluster again
            eventually(lambda: not hinted(b) and len(probe(ns, vip, 80)) == 3, what="even spread")
            opted_out = probe(ns, vip, 80)
        finally:
            set_distribution(clusterset["k8s"], "PreferSameZone")
            set_ready(b, True)
            for p in (proxy, srv):
                p.terminate()
                p.wait(10)
            relay.close()
    print(json.dumps({"mode": mode, "before": before, "during": during, "after": after,
                      "opted_out": opted_out, "failover_s": round(failover, 2),
                      "failback_s": round(failback, 2)}))
    assert before == Counter(west=30)
    assert during["west"] == 0 and during["east"] + during["north"] == 30
    assert during["east"] and during["north"]
    assert after == Counter(west=30)
    assert sum(opted_out.values()) == 30 and set(opted_out) == {"west", "east", "north"}
