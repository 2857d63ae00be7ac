"""The clusterset of the fault suite (robustness/faults.py): three REAL control planes (realk8s.sh),
N services exported over them, a workload making one export, unexport or endpoint change a second,
and the processes under test (`mcsdns controller`, an `mcsdns serve` per member).

Every request here is plain HTTP (tests/realk8s.py, urllib) as the admin: nothing of the
controller's own client is used to set up, change or count."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.controller_env import Controller  # noqa: E402
from support.helpers import run_server, stop_process  # noqa: E402
from support.ports import free_port  # noqa: E402
from support.realk8s import RealK8s  # noqa: E402

NS = "ns"
MCS = "/apis/multicluster.x-k8s.io/v1beta1"
EPS = "/apis/discovery.k8s.io/v1"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
OURS = ("serviceimports", "services", "endpointslices", "serviceexports")  # what writes are counted on
__all__ = ["run_server"]  # for fault_world: `mcsdns serve` as the tests run it


class Member:
    """One member cluster: a realk8s control plane, reached over plain HTTP."""

    def __init__(self, name: str, home: Path) -> None:
        self.name, self.home = name, home
        self.k8s = RealK8s.up(name, home)
        self.cid = name.rsplit("-", 1)[-1]  # the cluster ID: a, b or c
        self.written = 0  # writes this suite (workload, foreign edits) made and got an answer to

    @property
    def kubeconfig(self) -> str:
        return str(self.k8s.kubeconfig)

    @property
    def port(self) -> int:
        return int(self.k8s.url.rsplit(":", 1)[1])

    def pid(self, what: str) -> int:
        """The pid of its `apiserver` or `etcd` (as realk8s.sh recorded it)."""
        return int((self.k8s.kubeconfig.parent / f"{what}.pid").read_text())

    def send(self, method: str, path: str, body: Any = None, timeout: float = 5.0,
             ctype: str | None = None) -> tuple[int, bytes] | None:
        """One request: (status, body), None when no answer came (refused, timed out)."""
        try:
            code, _, data = self.k8s.request(method, path, body, {"Content-Type": ctype} if ctype else None,
                                             timeout=timeout)
        except OSError:
            return None
        return code, data

    def write(self, method: str, path: str, body: Any = None, ctype: str | None = None) -> int | None:
        """A write of ours; counted when the API server answered it (it counts it too)."""
        out = self.send(method, path, body, ctype=ctype)
        if out is None:
            return None
        self.written += 1
        return out[0]

    def api_writes(self) -> float | None:
        """Write requests its API server answered on OURS, from clients outside it
        (apiserver_request_total, system_client=""); None when it does not answer."""
        out = self.send("GET", "/metrics", timeout=5)
        if out is None or out[0] != 200:
            return None
        total = 0.0
        for line in out[1].decode().splitlines():
            if line.startswith("apiserver_request_total{"):
                lb = dict(re.findall(r'(\w+)="([^"]*)"', line.rsplit(" ", 1)[0]))
                ours = lb.get("resource") in OURS and not lb.get("system_client")
                if ours and lb.get("verb") in WRITE_VERBS:
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        """Stop its etcd and kube-apiserver, keeping their data (`realk8s.sh down`)."""
        sh = os.environ["MCSDNS_REALK8S"]
        subprocess.run([sh, "down", self.name], env=dict(os.environ, REALK8S_HOME=str(self.home)),
                       capture_output=True, timeout=60, check=False)

    def start(self) -> None:
        """Start it again with its data, on the same ports."""
        self.k8s = RealK8s.up(self.name, self.home)

    def down(self) -> None:
        self.k8s.down()


def populate(members: list[Member], n: int) -> list[tuple[str, int]]:
    """Cluster IDs, namespace NS everywhere, and n services: s{i} exported by member i % 3 and,
    for every fourth, by the next member too (one Service, one EndpointSlice with one ready
    endpoint, one ServiceExport each). Returns the (cluster ID, service index) exports."""
    pairs = [(members[i % 3], i) for i in range(n)] + [(members[(i + 1) % 3], i) for i in range(0, n, 4)]
    for m in members:
        m.k8s.json("POST", "/apis/about.k8s.io/v1alpha1/clusterproperties", {
            "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": m.cid}})
        m.k8s.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NS}})

    def one(pair: tuple[Member, int]) -> None:
        m, i = pair
        m.k8s.json("POST", f"/api/v1/namespaces/{NS}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": f"s{i}", "namespace": NS},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
        m.k8s.json("POST", f"{EPS}/namespaces/{NS}/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"s{i}-{m.cid}", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": f"s{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints(m, i, 0)})
        m.k8s.json("POST", f"{MCS}/namespaces/{NS}/serviceexports", {
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": f"s{i}", "namespace": NS}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, pairs))
    return [(m.cid, i) for m, i in pairs]


def endpoints(m: Member, i: int, gen: int) -> list[dict[str, Any]]:
    """The endpoints of generation `gen` of member m's slice of s{i}: one or two ready addresses."""
    net = "abc".index(m.cid) + 1
    return [{"addresses": [f"10.{net}.{(i + gen + k) % 200}.{(gen * 7 + k) % 250 + 1}"],
             "conditions": {"ready": True}} for k in range(1 + gen % 2)]


class Workload:
    """One change a second on a random export (60 % endpoint change, 20 % unexport, 20 %
    export again), skipping the members in `avoid` (cluster IDs: the faulted one) and pausing
    on `pause`."""

    def __init__(self, members: list[Member], pairs: list[tuple[str, int]], seed: int = 39) -> None:
        self.by_name = {m.cid: m for m in members}
        self.pairs = pairs
        self.exported = set(pairs)
        self.rng = random.Random(seed)
        self.avoid: set[str] = set()
        self.changes = 0
        self.touched: dict[int, float] = {}  # service index -> time of its last export or unexport
        self.running = threading.Event()
        self._stop = threading.Event()
        self._gen: Counter[tuple[str, int]] = Counter()
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self._stop.set()
        self.running.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.running.wait()
            if not self._stop.is_set():
                self.step()

    def step(self) -> None:
        """One change."""
        ok = [p for p in self.pairs if p[0] not in self.avoid]
        on = [p for p in ok if p in self.exported]
        off = [p for p in ok if p not in self.exported]
        r = self.rng.random()
        if off and (r < 0.2 or not on):
            self._export(self.rng.choice(off))
        elif on and r < 0.4:
            self._unexport(self.rng.choice(on))
        elif on:
            self._endpoints(self.rng.choice(on))

    def change_in(self, cid: str) -> None:
        """One endpoint change of an export of member `cid` (if it has one)."""
        on = [p for p in self.pairs if p[0] == cid and p in self.exported]
        if on:
            self._endpoints(self.rng.choice(on))

    def _export(self, p: tuple[str, int]) -> None:
        code = self.by_name[p[0]].write("POST", f"{MCS}/namespaces/{NS}/serviceexports", {
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": f"s{p[1]}", "namespace": NS}})
        if code in (201, 409):
            self.exported.add(p)
            self._done(p[1], True)

    def _unexport(self, p: tuple[str, int]) -> None:
        if self.by_name[p[0]].write("DELETE", f"{MCS}/namespaces/{NS}/serviceexports/s{p[1]}") in (200, 404):
            self.exported.discard(p)
            self._done(p[1], True)

    def _endpoints(self, p: tuple[str, int]) -> None:
        m = self.by_name[p[0]]
        self._gen[p] += 1
        body = json.dumps({"endpoints": endpoints(m, p[1], self._gen[p])}).encode()
        if m.write("PATCH", f"{EPS}/namespaces/{NS}/endpointslices/s{p[1]}-{m.cid}", body,
                   ctype="application/merge-patch+json") == 200:
            self._done(p[1], False)

    def _done(self, i: int, export: bool) -> None:
        self.changes += 1
        if export:
            self.touched[i] = time.monotonic()


class Proc:
    """A controller process of the suite (tests/controller_env.Controller: logs, metrics, ready)."""

    def __init__(self, args: list[str], tmp: Path, name: str, repo: Path) -> None:
        self.health = free_port()
        self.leader_elect = "--leader-elect" in args
        # whose Lease it elects a leader for: its own cluster's (--local), else the Lease cluster's
        self.lease = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--local"), "central")
        self.log = tmp / f"{name}-{self.health}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(repo))
        cmd = [sys.executable, "-m", "mcsdns.controller", "--health", f"127.0.0.1:{self.health}", *args]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=repo)
        self.ctl = Controller(self.proc, self.log, self.health)

    def metric(self, name: str) -> float | None:
        try:
            v: float | None = self.ctl.metrics().get(name)
            return v
        except OSError:
            return None

    def kill(self) -> None:
        """kill -9."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (a leader releases its Lease), then wait."""
        stop_process(self.proc)


def wait(pred: Any, timeout: float, step: float = 0.1) -> Any:
    """Poll `pred()` until truthy (returned) or `timeout` seconds pass (None)."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v or None
        time.sleep(step)
