"""`mcsdns diagnose` agrees with a real CoreDNS (MCSDNS_COREDNS): each wiring of the zone is
run by CoreDNS in front of a real mcsdns, dig asks through CoreDNS 20 times, and diagnose,
reading the same Corefile and ConfigMaps from the test API server, FAILs exactly when some
answer was wrong.

The cluster is a test API server whose Service CIDR is on loopback, so a Service's
ClusterIP:port is where its process listens (no kube-proxy needed): mcsdns on the mcsdns
Service's, and CoreDNS on the kube-dns Service's target port, as pods reach it. The
node's resolvers (`forward . /etc/resolv.conf` in a real cluster) are a second mcsdns with
no data: NXDOMAIN for every name of the zone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

import pytest
from support.controller_env import Cluster
from support.diagnose_env import NS
from support.helpers import REPO, run_server, stop_process, tool, wait_for
from support.monitoring import coredns_binary
from support.ports import free_port

ZONE_IP = "10.42.0.7"  # the ServiceImport's: what every right answer holds
NAME = "web.shop.svc.clusterset.local"
QUERIES = 20

# $D: the kube-dns Service's target port (where pods' queries reach CoreDNS); $W: another
# port; $MCSDNS: the mcsdns Service's ClusterIP:port; $NX: the node's resolvers
DEFAULT = ".:$D {\n    errors\n    forward . $NX\n}\n"
# AKS's managed Corefile: coredns-custom's keys are the files of custom/ (docs/deploy.md)
AKS = (".:$D {\n    errors\n    forward . $NX\n    loop\n    import custom/*.override\n}\n"
       "import custom/*.server\n")


def block(port: str, targets: str, extra: str = "") -> str:
    return f"clusterset.local:{port} {{\n    errors\n    forward . {targets}{extra}\n}}\n"


@dataclass
class Wiring:
    """A Corefile, the other keys of its ConfigMap and AKS's coredns-custom ConfigMap (None:
    none), and whether every pod query should get the right answer through it."""

    corefile: str
    right: bool
    keys: dict[str, str] = field(default_factory=dict)
    custom: dict[str, str] | None = None


WIRINGS = {
    "correct": Wiring(DEFAULT + block("$D", "$MCSDNS"), True),
    "block on another port": Wiring(DEFAULT + block("$W", "$MCSDNS"), False),
    "forward to a wrong port": Wiring(DEFAULT + block("$D", "$IP:$W"), False),
    "two upstreams": Wiring(DEFAULT + block("$D", "$MCSDNS $NX"), False),
    "two upstreams, sequential": Wiring(DEFAULT + block("$D", "$MCSDNS $NX", " {\n        policy sequential\n"
                                                        "    }"), True),
    "AKS coredns-custom": Wiring(AKS, True, custom={"clusterset.server": block("$D", "$MCSDNS")}),
    "AKS coredns-custom .override": Wiring(  # after the block's own `forward .`: never reached
        AKS, False, custom={"clusterset.override": "forward clusterset.local $MCSDNS\n"}),
    "multicluster plugin": Wiring(".:$D {\n    multicluster clusterset.local {\n        kubeconfig $K\n"
                                  "    }\n    forward . $NX\n}\n", True),
    "correct, via import": Wiring(  # a snippet, and a file beside the Corefile (a key of its ConfigMap)
        "(mcs) {\n    errors\n    forward . $MCSDNS\n}\n" + DEFAULT + "import *.server\n", True,
        keys={"clusterset.server": "clusterset.local:$D {\n    import mcs\n}\n"}),
}


@dataclass
class World:
    """The cluster, mcsdns and the node's resolvers, shared by the wirings."""

    cluster: Cluster
    ports: dict[str, str]  # the Corefile placeholders
    tmp: Path
    binary: str


def _service(c: Cluster, ns: str, name: str, port: int, target: int | None = None) -> str:
    """A ClusterIP Service with `port` on UDP and TCP; its ClusterIP."""
    ports = [{"name": n, "port": port, "protocol": p, **({"targetPort": target} if target else {})}
             for n, p in (("dns", "UDP"), ("dns-tcp", "TCP"))]
    c.kube.create(f"/api/v1/namespaces/{ns}/services", {"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": name, "namespace": ns}, "spec": {"ports": ports}})
    svc = c.kube.get(f"/api/v1/namespaces/{ns}/services/{name}")
    assert svc is not None
    return str(svc["spec"]["clusterIP"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("wirings")
    binary = coredns_binary(tmp)
    c = Cluster("a", "east", tmp, service_cidrs=("127.77.0.0/16",))
    try:
        for ns in ("shop", NS, "kube-system"):
            c.kube.namespace(ns)
        c.kube.create(f"{c.kube.mcs}/namespaces/shop/serviceimports", {
            "apiVersion": c.kube.mcs_api_version, "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"type": "ClusterSetIP", "ips": [ZONE_IP], "ports": [{"port": 80, "protocol": "TCP"}]}})
        port, dns_port = free_port(), free_port()
        ip = _service(c, NS, "mcsdns", port)
        c.kube.endpoints(NS, "mcsdns", "mcsdns-abc", [("10.244.0.53", None)], port=("dns", port))
        _service(c, "kube-system", "kube-dns", 53, target=dns_port)
        (tmp / "empty").mkdir()
        with run_server(["--kubeconfig", str(c.kubeconfig), "--listen", f"{ip}:{port}"], tmp), \
                run_server(["--manifests", str(tmp / "empty")], tmp) as nx:
            ports = {"D": str(dns_port), "W": str(free_port()), "IP": ip, "MCSDNS": f"{ip}:{port}",
                     "NX": f"127.0.0.1:{nx.port}", "K": str(c.kubeconfig)}
            yield World(c, ports, tmp, binary)
    finally:
        c.close()


def configmap(c: Cluster, name: str, data: dict[str, str] | None) -> None:
    """ConfigMap kube-system/NAME holds `data` (None: there is none)."""
    path = f"/api/v1/namespaces/kube-system/configmaps/{name}"
    if c.kube.get(path) is not None:
        c.kube.delete(path)
    if data is not None:
        c.kube.create("/api/v1/namespaces/kube-system/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "kube-system"},
            "data": data})


def dig(port: str) -> tuple[str, list[str]]:
    """(status, A records) of one dig through CoreDNS."""
    out = subprocess.run([tool("dig"), "@127.0.0.1", "-p", port, "+tries=1", "+time=4", "+noall",
                          "+comments", "+answer", NAME, "A"], capture_output=True, text=True, timeout=30)
    m = re.search(r"status: (\w+)", out.stdout)
    return (m.group(1) if m else "timeout"), re.findall(r"\sA\s+(\S+)$", out.stdout, re.M)


def coredns_verdict(kubeconfig: Path, repo: Path = REPO) -> tuple[str, str]:
    """(status, message) of diagnose's `coredns` line for the cluster."""
    out = subprocess.run([sys.executable, "-m", "mcsdns", "diagnose", "--kubeconfig", str(kubeconfig),
                          "--output", "json"], capture_output=True, text=True, timeout=60, cwd=repo)
    assert out.returncode in (0, 1), out.stderr
    lines = [r for r in json.loads(out.stdout)["results"] if r["check"] == "coredns"]
    assert len(lines) == 1, lines
    return lines[0]["status"], lines[0]["message"]


def run_wiring(w: World, name: str) -> int:
    """Install wiring `name` (ConfigMaps, and the same files for CoreDNS), run CoreDNS on it,
    dig QUERIES times through it; how many answers were right."""
    wiring, sub = WIRINGS[name], Template.substitute
    d = w.tmp / re.sub(r"\W+", "-", name)
    (d / "custom").mkdir(parents=True)
    files = {"Corefile": sub(Template(wiring.corefile), w.ports),
             **{k: sub(Template(v), w.ports) for k, v in wiring.keys.items()}}
    custom = None if wiring.custom is None else {
        k: sub(Template(v), w.ports) for k, v in wiring.custom.items()}
    for k, v in files.items():
        (d / k).write_text(v)
    for k, v in (custom or {}).items():
        (d / "custom" / k).write_text(v)
    configmap(w.cluster, "coredns", files)
    configmap(w.cluster, "coredns-custom", custom)
    with open(d / "coredns.log", "wb") as log:
        proc = subprocess.Popen([w.binary, "-conf", str(d / "Corefile")], stdout=log,
                                stderr=subprocess.STDOUT, cwd=d)
    try:
        assert wait_for(lambda: dig(w.ports["D"])[0] != "timeout"), (d / "coredns.log").read_text()
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: dig(w.ports["D"]), range(QUERIES)))
    finally:
        stop_process(proc)
    return sum(1 for status, addrs in got if status == "NOERROR" and addrs == [ZONE_IP])


@pytest.mark.parametrize("name", list(WIRINGS))
def test_diagnose_fails_exactly_when_queries_through_coredns_go_wrong(world: World, name: str) -> None:
    right = run_wiring(world, name)
    status, message = coredns_verdict(world.cluster.kubeconfig)
    print(f"\n{name}: dig through CoreDNS {right}/{QUERIES} right; diagnose {status}: {message}")
    assert (right == QUERIES) == WIRINGS[name].right, f"{name}: {right}/{QUERIES} right"
    assert (status != "FAIL") == (right == QUERIES), message
