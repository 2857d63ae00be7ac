"""Port conflicts between exports (issue 19, item 6): every exported endpoint is either served
through the derived Service or reported as not served. kube-proxy matches an EndpointSlice's ports
to its Service's by name and protocol, so the imported slices must name each port as the derived
Service does. Test API servers as members, the controller as a process; the older export (east)
wins every conflict."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from support.controller_checks import Ports, args_for, export, slices_of, svc_of
from support.controller_env import Cluster, eventually, run_controller

from mcsdns.kube.names import SOURCE_CLUSTER_LABEL


def keys(ports: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """What kube-proxy matches a slice port to a Service port on: (name, protocol)."""
    return {(p.get("name") or "", p.get("protocol") or "TCP") for p in ports}


def ready(cl: Cluster) -> dict[str, Any] | None:
    c = cl.kube.conditions("ns", "api").get("Ready")
    return c if c and c["status"] in ("True", "False") and c["reason"] != "Pending" else None


CASES: dict[str, tuple[Ports, Ports, dict[str, str]]] = {
    # kind: (east's ports, west's ports, west's served ports: its name -> the merged name)
    # same number and protocol, other name: west's port is the merged `http`
    "name": ((("http", 80, "TCP"),), (("web", 80, "TCP"),), {"web": "http"}),
    # same name and protocol, other number: served on the merged number, to west's target port
    "number": ((("http", 80, "TCP"),), (("http", 8080, "TCP"),), {"http": "http"}),
    # same name and number, other protocol: no merged port can carry west's TCP port
    "protocol": ((("dns", 53, "UDP"),), (("dns", 53, "TCP"),), {}),
    # a port only west has: the union serves it
    "missing": ((("http", 80, "TCP"),), (("http", 80, "TCP"), ("metrics", 9090, "TCP")),
                {"http": "http", "metrics": "metrics"}),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_port_conflict_is_served_or_reported(kind: str, clusters2: list[Cluster],
                                                  tmp_path: Path) -> None:
    old, new, served = CASES[kind]
    a, b = clusters2
    export(a, old, 8000, "10.1.0.1")
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    export(b, new, 9000, "10.2.0.1")
    with run_controller(args_for(a, b), tmp_path) as ctl:
        def settled() -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]] | None:
            svc = svc_of(a, "ns", "api")
            sl = {s["metadata"]["labels"][SOURCE_CLUSTER_LABEL]: s.get("ports") or []
                  for s in slices_of(a, "ns", "api")}
            ok = svc is not None and set(sl) == {"east", "west"} and ready(a) and ready(b)
            return (svc, sl) if ok and svc is not None else None

        svc, sl = eventually(settled, what="derived Service, both clusters' slices and Ready in east")
        # every imported port is one of the derived Service's: kube-proxy routes to both clusters
        assert keys(sl["east"]) == keys([{"name": n, "protocol": pr} for n, _, pr in old])
        assert keys(sl["west"]) <= keys(svc["spec"]["ports"])
        # named as the merged port, at the endpoints' own (target) port number
        assert sorted((p["name"], p["port"]) for p in sl["west"]) == sorted(
            (served[n], p + 9000) for n, p, _ in new if n in served)
        assert (ready(a) or {})["status"] == "True"
        c = b.kube.conditions("ns", "api")
        assert (c["Conflict"]["status"], c["Conflict"]["reason"]) == ("True", "PortConflict")
        metric = f'mcsdns_controller_unserved_ports{{member="{b.name}"}}'
        if kind == "protocol":
            assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "PortConflict")
            assert "dns 53/TCP" in c["Ready"]["message"] and "dns 53/UDP" in c["Ready"]["message"]
            eventually(lambda: ctl.metrics().get(metric) == 1, what="unserved port counted")
            line = next(ln for ln in ctl.logged("get no traffic").splitlines() if "get no traffic" in ln)
            assert f"cluster {b.name}:" in line and "ns/api" in line and "dns 53/TCP" in line
            # west moves its port to UDP: served, Ready, no longer counted
            for kind_, name in (("Service", "api"), ("EndpointSlice", "api-b")):
                obj = b.api.get(kind_, "ns", name)
                assert obj is not None
                for p in (obj.get("spec") or obj)["ports"]:
                    p["protocol"] = "UDP"
                b.api.put(obj)
            eventually(lambda: (ready(b) or {}).get("status") == "True", what="Ready=True on west")
            eventually(lambda: ctl.metrics().get(metric) == 0, what="unserved count back to 0")
            eventually(lambda: [(p["name"], p["protocol"]) for s in slices_of(a, "ns", "api")
                                for p in s.get("ports") or []
                                if s["metadata"]["labels"][SOURCE_CLUSTER_LABEL] == "west"]
                       == [("dns", "UDP")], what="west's slice port served in east")
            ctl.logged("every port is served now")
        else:
            assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("True", "Exported")
            assert ctl.metrics().get(metric) == 0 and "get no traffic" not in ctl.logs()
        assert ctl.metrics().get(f'mcsdns_controller_unserved_ports{{member="{a.name}"}}') == 0
