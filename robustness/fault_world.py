"""Everything one run of the fault suite holds: the members, their `mcsdns serve`, the
checker, the workload and the controller processes of a topology. `close` undoes all of it
(processes stopped, control planes down and purged)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from robustness.fault_checker import Checker
from robustness.fault_cluster import NS, Member, Proc, Workload, populate, run_server

TOPOLOGIES = ("central", "local")


def has_local(repo: Path) -> bool:
    """Whether that checkout's controller has the per-cluster topology (`--local NAME`)."""
    out = subprocess.run([sys.executable, "-m", "mcsdns.controller", "--help"], capture_output=True,
                         text=True, cwd=repo, env=dict(os.environ, PYTHONPATH=str(repo)), timeout=60)
    return "--local" in out.stdout


class World:
    """Three members a, b, c (the Lease cluster: a), N services, DNS, checker, workload."""

    def __init__(self, n: int, ttl: float, bound: float, topology: str, repo: Path, dns: str) -> None:
        self.n, self.ttl, self.topology, self.repo = n, ttl, topology, repo
        self.tmp = Path(tempfile.mkdtemp(prefix="mcsdns-faults-"))
        self.stack = ExitStack()
        self.members: list[Member] = []
        self.procs: list[Proc] = []  # the controller(s) of the topology, as running now
        self.others: list[Proc] = []  # processes a fault started
        self._api: dict[str, tuple[float, float]] = {}  # cid -> (last reading, total)
        try:
            for cid in "abc":
                self.members.append(Member(f"mcsdns-faults-{os.getpid()}-{cid}", self.tmp / f"realk8s-{cid}"))
            self.by = {m.cid: m for m in self.members}
            self.pairs = populate(self.members, n)
            ports = {}
            for cid in dns:
                srv = self.stack.enter_context(run_server(
                    ["--kubeconfig", self.by[cid].kubeconfig, "--namespace", NS], self.tmp, timeout=60))
                ports[cid] = srv.port
            self.checker = Checker(self.members, [f"s{i}" for i in range(n)], ports, bound, self.leaders)
            self.workload = Workload(self.members, self.pairs)
        except BaseException:
            self.close()
            raise

    # --- the controller(s) ------------------------------------------------------------
    def clusters(self, order: str = "abc") -> list[str]:
        return [x for cid in order for x in ("--cluster", f"{cid}={self.by[cid].kubeconfig}")]

    def common(self) -> list[str]:
        return ["--endpoint-ttl", f"{self.ttl:g}", "--resync", "600"]

    def topology_args(self) -> list[tuple[str, list[str]]]:
        """(name, flags) of each controller process of the topology. central: one controller of
        a, b and c, leader-elected in a. local (issue 39's per-cluster topology, where the
        checkout has it): one per member, reading every member and writing only into its own."""
        if self.topology == "central":
            return [("controller", [*self.clusters(), "--leader-elect", "--lease-cluster", "a",
                                    *self.common()])]
        return [(f"controller-{cid}", [*self.clusters(), "--local", cid, "--leader-elect", *self.common()])
                for cid in "abc"]

    def start_controllers(self) -> None:
        self.procs = [Proc(args, self.tmp, name, self.repo) for name, args in self.topology_args()]

    def spawn(self, args: list[str], name: str) -> Proc:
        """Another controller process (stopped by `close` if the fault does not)."""
        p = Proc([*args, *self.common()], self.tmp, name, self.repo)
        self.others.append(p)
        return p

    def leaders(self) -> dict[str, float]:
        """Controller processes of the Lease (the topology's, and any a fault started with
        --leader-elect) that say they lead."""
        live = [p for p in [*self.procs, *self.others] if p.proc.poll() is None and p.leader_elect]
        per_lease: dict[str, float] = {}
        for p in live:
            per_lease[p.lease] = per_lease.get(p.lease, 0.0) + (p.metric("mcsdns_controller_leader") or 0.0)
        return {"leaders": max(per_lease.values(), default=0.0)}  # the most leading one Lease at once

    # --- counting ---------------------------------------------------------------------
    def writes(self) -> float:
        """Write requests the members' API servers answered on the objects the controller
        writes, less the suite's own (workload, foreign edits); an API server restarted
        starts its count again (taken as a reset)."""
        for m in self.members:
            v = m.api_writes()
            if v is None:
                continue
            last, total = self._api.get(m.cid, (0.0, 0.0))
            self._api[m.cid] = (v, total + (v - last if v >= last else v))
        return sum(t for _, t in self._api.values()) - sum(m.written for m in self.members)

    def close(self) -> None:
        for obj in ("workload", "checker"):
            if hasattr(self, obj):
                getattr(self, obj).close()
        for p in [*self.procs, *self.others]:
            p.stop()
        self.stack.close()
        for m in self.members:
            m.down()
