"""The writes of a first sync, per service, by member, resource and verb: what the API servers pay
for each exported service (see BENCHMARKS.md, "Controller first sync on real kube-apiservers").
Counted from the controller's own mcsdns_controller_writes_total and checked against the test API
servers' request logs, so that a write added to the first sync fails here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.controller_checks import CIDR, DERIVED_WRITES, args_for, source_slice, writes_by_member
from support.controller_env import IDS, Cluster, eventually, run_controller

N = 6  # exported services, spread round-robin over the members
# With --clusterset-cidr the import is created with its ips: no derived Service, no second write.
CIDR_MODE = {("serviceimports", "create"): 1, ("serviceimports/status", "update"): 1,
             ("endpointslices", "create"): 1}


def done(si: dict[str, Any] | None) -> bool:
    """A ServiceImport with its ips and its status written."""
    return si is not None and bool(si.get("status")) and bool(si["spec"].get("ips"))


@pytest.mark.parametrize("mode", ["derived", "cidr"])
def test_first_sync_writes_per_service(tmp_path: Path, mode: str) -> None:
    cl = [Cluster(n, i, tmp_path) for n, i in IDS]
    try:
        for c in cl:
            c.kube.namespace("ns")
        for i in range(N):
            src = cl[i % len(cl)]
            src.kube.service("ns", f"s{i}")
            src.api.put(source_slice("ns", f"s{i}", f"s{i}-x", [f"10.9.0.{i + 1}"]))
            src.kube.export("ns", f"s{i}")
        marks = [len(c.api.requests) for c in cl]
        extra = ("--clusterset-cidr", CIDR) if mode == "cidr" else ()
        with run_controller(args_for(*cl, extra=extra), tmp_path) as ctl:
            eventually(ctl.ready, what="first full sync")
            for c in cl:
                eventually(lambda c=c: all(done(c.kube.serviceimport("ns", f"s{i}")) for i in range(N)),
                           what=f"imports in {c.name}")
            for c in cl:  # every export's status written (Ready)
                eventually(lambda c=c: all(c.kube.conditions("ns", f"s{i}").get("Ready", {}).get("status")
                                           == "True" for i in range(cl.index(c), N, len(cl))),
                           what=f"exports Ready in {c.name}")
            got = writes_by_member(ctl.metrics())
            logs = ctl.logs()
        per_member = DERIVED_WRITES if mode == "derived" else CIDR_MODE
        exported = {c.name: len(range(cl.index(c), N, len(cl))) for c in cl}
        for c in cl:
            want = Counter({k: v * N for k, v in per_member.items()})
            want[("serviceexports/status", "update")] = exported[c.name]
            assert got[c.name] == want, (c.name, got[c.name], logs[-3000:])
        total = sum(sum(v.values()) for v in got.values())
        assert total == (len(per_member) * len(cl) + 1) * N  # derived: 16 per service, cidr: 10
        # the API servers saw exactly those writes
        for c, mark in zip(cl, marks, strict=True):
            seen = [p for m, p in list(c.api.requests)[mark:]
                    if m != "GET" and "/leases" not in p and "/events" not in p]
            assert len(seen) == sum(got[c.name].values()), seen
    finally:
        for c in cl:
            c.close()
