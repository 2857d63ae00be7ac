"""The faults of the fault suite, one at a time: each is injected, held `hold` seconds, and
undone; `undo` is safe to call twice and after a failed `inject` (the runner calls it in
`finally`). Member faults hit c (a holds the Lease in the central topology) unless said."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

from robustness.fault_cluster import EPS, MCS, NS, Member, wait
from robustness.fault_world import World


class Fault:
    """A fault: what it does, to which member, for how long."""

    name = ""
    what = ""
    member: str | None = None  # the member it hits: the workload leaves it alone meanwhile
    recovery = 2.0  # writes per service allowed on top of twice the baseline's per change
    central_only = False

    def __init__(self, w: World) -> None:
        self.w = w
        self.note = ""
        self.hold = w.ttl + 10
        self.touched: set[str] = set()  # services whose ClusterSetIP the fault changes on purpose

    def inject(self) -> None:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError

    @property
    def target(self) -> Member | None:
        return self.w.by[self.member] if self.member else None


class KillFirstSync(Fault):
    """kill -9 of the controller(s) a quarter into the first sync, then started again."""

    name, what, recovery = "kill-first-sync", "controller kill -9 mid first sync", 24.0

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.hold = 1.0

    def inject(self) -> None:
        w = self.w
        w.start_controllers()
        b = w.by["b"]

        def imported() -> int | None:
            out = b.send("GET", f"{MCS}/namespaces/{NS}/serviceimports?resourceVersion=0", timeout=2)
            k = len(json.loads(out[1])["items"]) if out and out[0] == 200 else 0
            return k if k >= w.n // 4 or all(p.ctl.ready() for p in w.procs) else None

        k = wait(imported, 180, step=0.05)
        ready = all(p.ctl.ready() for p in w.procs)
        for p in w.procs:
            p.kill()
        self.note = f"killed at {k} of {w.n} imports in b" + (" (first sync had finished)" if ready else "")

    def undo(self) -> None:
        if not any(p.proc.poll() is None for p in self.w.procs):
            self.w.start_controllers()


class KillSteady(KillFirstSync):
    """kill -9 of the controller(s) in steady state, started again 2 s later."""

    name, what, recovery = "kill-steady", "controller kill -9, steady state", 2.0

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.hold = 2.0

    def inject(self) -> None:
        for p in self.w.procs:
            p.kill()


class ApiRestart(Fault):
    """c's etcd and kube-apiserver stopped (data kept) past the TTL, then started again."""

    name, what, member, recovery = "apiserver-restart", "API server stop/start (c)", "c", 8.0

    def inject(self) -> None:
        self.stopped = True
        self.w.by["c"].stop()

    def undo(self) -> None:
        if getattr(self, "stopped", False):
            self.stopped = False
            self.w.by["c"].start()


class Stop(Fault):
    """A process of c SIGSTOPped, SIGCONTed at the end."""

    proc = "apiserver"
    member = "c"
    recovery = 8.0

    def inject(self) -> None:
        self.pid = self.w.by["c"].pid(self.proc)
        os.kill(self.pid, signal.SIGSTOP)

    def undo(self) -> None:
        if hasattr(self, "pid"):
            os.kill(self.pid, signal.SIGCONT)


class Hang(Stop):
    """c's kube-apiserver SIGSTOPped longer than the TTL."""

    name, what = "apiserver-hang", "API server SIGSTOP > TTL (c)"


class EtcdStop(Stop):
    """c's etcd SIGSTOPped: its API server up, its reads and writes hanging."""

    name, what, proc = "etcd-stop", "etcd SIGSTOP (c)", "etcd"

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.hold = 20.0


class Partition(Fault):
    """Every packet to and from c's API server port dropped (iptables on loopback), or,
    where iptables cannot be used, its kube-apiserver SIGSTOPped instead (said in the note)."""

    name, what, member, recovery = "partition", "network partition (c)", "c", 8.0

    def rules(self) -> list[list[str]]:
        port = str(self.target.port) if self.target else ""
        tag = ["-m", "comment", "--comment", f"mcsdns-faults-{os.getpid()}"]
        return [["INPUT", "-i", "lo", "-p", "tcp", d, port, *tag, "-j", "DROP"]
                for d in ("--dport", "--sport")]

    def inject(self) -> None:
        self.added: list[list[str]] = []
        ipt = shutil.which("iptables")
        for r in self.rules():
            if ipt and subprocess.run([ipt, "-I", *r], capture_output=True).returncode == 0:
                self.added.append(r)
        if len(self.added) < 2:
            self.undo()
            self.pid = self.target.pid("apiserver") if self.target else 0
            os.kill(self.pid, signal.SIGSTOP)
            self.note = "iptables unusable here: kube-apiserver SIGSTOPped instead"

    def undo(self) -> None:
        ipt = shutil.which("iptables") or "iptables"
        for r in getattr(self, "added", []):
            subprocess.run([ipt, "-D", *r], capture_output=True)
        self.added = []
        if getattr(self, "pid", 0):
            os.kill(self.pid, signal.SIGCONT)


class PartitionLease(Partition):
    """The Lease cluster (a) partitioned."""

    name, what, member = "partition-lease", "network partition of the Lease cluster (a)", "a"


class TwoWriters(Fault):
    """A second controller, no leader election, members {a, b}, runs beside the first."""

    name, what, central_only = "two-writers", "second writer, members {a,b}", True

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.hold = 30.0

    def inject(self) -> None:
        self.p = self.w.spawn(self.w.clusters("ab"), "second-writer")

    def undo(self) -> None:
        if hasattr(self, "p") and self.p.proc.poll() is None:
            yields = self.p.ctl.logs().count("leaves them to it")
            self.p.stop()
            self.note = f"the second writer logged {yields} 'leaves them to it'"


class LeaderOrder(Fault):
    """--leader-elect replicas with --cluster in other orders: without --lease-cluster one is
    refused; with it a second replica (c, b, a) stands by, takes over after kill -9 of the
    first, and hands back on SIGTERM to a new first replica (a, b, c)."""

    name, what, central_only = "leader-order", "--leader-elect replicas, flags in other orders", True

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.hold = 10.0

    def inject(self) -> None:
        w, notes = self.w, []
        refused = w.spawn([*w.clusters("cba"), "--leader-elect"], "replica-refused")
        code = wait(lambda: refused.proc.poll() is not None, 60) and refused.proc.returncode
        notes.append(f"c,b,a without --lease-cluster: exit {code}")
        self.b = w.spawn([*w.clusters("cba"), "--leader-elect", "--lease-cluster", "a"], "replica-cba")
        wait(self.b.ctl.ready, 60)
        t0 = time.monotonic()
        for p in w.procs:
            p.kill()
        took = wait(lambda: self.b.metric("mcsdns_controller_leader") == 1.0, 60)
        notes.append(f"c,b,a leads {time.monotonic() - t0:.1f} s after kill -9" if took
                     else "c,b,a never led")
        self.note = "; ".join(notes)

    def undo(self) -> None:
        w = self.w
        if not any(p.proc.poll() is None for p in w.procs):
            w.start_controllers()
            wait(lambda: all(p.ctl.ready() for p in w.procs), 60)
        if hasattr(self, "b") and self.b.proc.poll() is None:
            t0 = time.monotonic()
            self.b.stop()
            took = wait(lambda: all(p.metric("mcsdns_controller_leader") == 1.0 for p in w.procs), 60)
            self.note += f"; a,b,c leads {time.monotonic() - t0:.1f} s after SIGTERM" if took else \
                "; a,b,c never led"


class ForeignEdits(Fault):
    """Someone else edits the controller's objects in b: an imported slice's endpoints, an
    imported slice deleted, a ServiceImport's ips, a derived Service deleted."""

    name, what, recovery = "foreign-edits", "foreign edits of our objects (b)", 1.0

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.hold = 0.0

    def inject(self) -> None:
        b = self.w.by["b"]
        out = b.send("GET", f"{EPS}/namespaces/{NS}/endpointslices?labelSelector="
                            "endpointslice.kubernetes.io%2Fmanaged-by%3Dmcsdns-controller")
        slices = json.loads(out[1])["items"] if out and out[0] == 200 else []
        sis = b.send("GET", f"{MCS}/namespaces/{NS}/serviceimports")
        imports = json.loads(sis[1])["items"] if sis and sis[0] == 200 else []
        if len(slices) < 2 or len(imports) < 2:
            self.note = "nothing to edit"
            return
        merge = "application/merge-patch+json"
        codes = [b.write("PATCH", f"{EPS}/namespaces/{NS}/endpointslices/{slices[0]['metadata']['name']}",
                         json.dumps({"endpoints": [{"addresses": ["192.0.2.1"]}]}).encode(), ctype=merge),
                 b.write("DELETE", f"{EPS}/namespaces/{NS}/endpointslices/{slices[1]['metadata']['name']}")]
        si0, si1 = imports[0]["metadata"], imports[1]["metadata"]
        codes.append(b.write("PATCH", f"{MCS}/namespaces/{NS}/serviceimports/{si0['name']}",
                             json.dumps({"spec": {"ips": ["10.255.255.254"]}}).encode(), ctype=merge))
        derived = (si1.get("annotations") or {}).get("multicluster.kubernetes.io/derived-service")
        if derived:
            codes.append(b.write("DELETE", f"/api/v1/namespaces/{NS}/services/{derived}"))
            self.touched.add(si1["name"])  # a new derived Service: a new ClusterIP, as documented
        self.note = f"{len(codes)} edits in b, answered {codes}"

    def undo(self) -> None:
        pass


ALL: list[type[Fault]] = [KillFirstSync, KillSteady, ApiRestart, Hang, EtcdStop, Partition, PartitionLease,
                          TwoWriters, LeaderOrder, ForeignEdits]
BY_NAME = {f.name: f for f in ALL}
