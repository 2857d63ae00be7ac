"""Fault injection with an independent invariant checker (issue 39), on REAL kube-apiservers.

Three control planes (realk8s.sh: $MCSDNS_REALK8S or --realk8s; without it this says so and
exits 0), N services exported over them, one export/unexport/endpoint change a second, the
controller of a topology (central: one `mcsdns controller` of a, b and c, `--leader-elect`
with its Lease in a; local: one per member, where the checkout has `--local`), an
`mcsdns serve` per member, and the checker (robustness/fault_checker.py) reading every member
and asking every DNS server every second. Then the faults, one at a time
(robustness/fault_kinds.py): before each the workload pauses until every member holds what
it should; the fault is injected, the workload goes on (leaving the faulted member alone),
the fault is undone, the member it hit makes one endpoint change (is it heard again?) and the
workload pauses until the clusterset is consistent.

Printed, a Markdown table, one row a fault:
- converged: seconds from the undo until every member read holds what it should and every
  DNS server answers as its member's objects say;
- max lag: the oldest difference the checker saw in a member it could read, during and after;
- NXDOMAIN s, DNS wrong s: summed over members and services (fault_checker.py);
- ClusterSetIPs changed: imports whose ips differ from before the fault (services the
  workload exported or unexported meanwhile left out), of those there before;
- writes during / after: API writes on ServiceImports, Services, EndpointSlices and
  ServiceExports the API servers answered (apiserver_request_total, the suite's own taken
  off), during the fault and from its undo until converged + 2 s; bounded when at most twice
  the no-fault phase's writes per change times the changes, plus `recovery` per service;
- eps gone: seconds from the fault until no member held the faulted member's endpoints;
- violations: kinds of differences older than --bound (T), "writes", "no convergence",
  "leaders" (more than one replica of the Lease leading at once).

    MCSDNS_REALK8S=/path/to/realk8s.sh .venv/bin/python robustness/faults.py [-n 150]
        [--faults kill-steady,apiserver-hang] [--ttl 20] [--bound 30] [--topology central]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from robustness.fault_checker import Stats  # noqa: E402
from robustness.fault_cluster import REPO, wait  # noqa: E402
from robustness.fault_kinds import ALL, BY_NAME, Fault, KillFirstSync  # noqa: E402
from robustness.fault_world import TOPOLOGIES, World, has_local  # noqa: E402

SETTLE = 120.0  # seconds to wait for a consistent clusterset before a fault
CONVERGE = 180.0  # and after one


@dataclass
class Row:
    """One fault's outcome."""

    fault: str
    hold: float
    converged: float | None
    max_lag: float
    nxdomain: float
    dns_wrong: float
    ips_changed: int
    ips_total: int
    writes_during: float
    writes_after: float
    bound: float
    eps_gone: float | None
    violations: list[str]
    note: str


def baseline(w: World, seconds: float) -> tuple[float, Row]:
    """Writes per change with no fault, over `seconds` of the workload."""
    w.workload.pause()
    tp = time.monotonic()
    wait(lambda: w.checker.consistent(tp), SETTLE, step=0.5)
    w0, c0 = w.writes(), w.workload.changes
    w.checker.phase()
    w.workload.resume()
    time.sleep(seconds)
    w.workload.pause()
    tp = time.monotonic()
    conv = wait(lambda: w.checker.consistent(tp), CONVERGE, step=0.2)
    st = w.checker.phase()
    changes = max(1, w.workload.changes - c0)
    per = (w.writes() - w0) / changes
    v = sorted(st.violations) + ([] if conv else ["no convergence"])
    return per, Row("none (no fault)", seconds, 0.0, st.max_lag, st.nxdomain, st.dns_wrong, 0, 0,
                    per * changes, 0.0, 0.0, None, v, f"{changes} changes, {per:.1f} writes per change")


def run_fault(w: World, f: Fault, per_change: float) -> Row:
    """Settle, inject, hold, undo (always), converge; the row."""
    first = not w.procs
    w.workload.pause()
    tp = time.monotonic()
    if not first:
        wait(lambda: w.checker.consistent(tp), SETTLE, step=0.5)
    ips0, t0, w0, c0 = w.checker.ips(), time.monotonic(), w.writes(), w.workload.changes
    w.checker.phase(f.member, reset=True)
    w.workload.avoid = {f.member} if f.member else set()
    w.workload.resume()
    try:
        f.inject()
        time.sleep(f.hold)
        during = w.checker.phase(f.member)
        w1 = w.writes()
    finally:
        w.workload.pause()
        f.undo()
    tu = time.monotonic()
    if f.member:  # a change in the member back: does it reach the others?
        w.workload.change_in(f.member)
    conv = wait(lambda: w.checker.consistent(tu), CONVERGE, step=0.2)
    converged = conv - tu if conv else None
    time.sleep(2)
    after = w.checker.phase()
    w.workload.avoid = set()
    w2, changes = w.writes(), w.workload.changes - c0
    touched = {f"s{i}" for i, t in w.workload.touched.items() if t >= t0} | f.touched
    ips1 = w.checker.ips()
    before = {k: v for k, v in ips0.items() if v and k[1] not in touched}
    changed = sum(1 for k, v in before.items() if ips1.get(k) != v)
    bound = 2 * per_change * changes + f.recovery * w.n
    v = sorted(during.violations | after.violations)
    v += [] if converged is not None else ["no convergence"]
    v += ["writes"] if (w2 - w0) > bound else []
    v += ["leaders"] if max(s.extra_max.get("leaders", 0) for s in (during, after)) > 1 else []
    return Row(f.name, f.hold, converged, max(during.max_lag, after.max_lag),
               during.nxdomain + after.nxdomain, during.dns_wrong + after.dns_wrong, changed, len(before),
               w1 - w0, w2 - w1, bound,
               during.eps_gone if f.member else None, v, f.note + _unread(during) + _nx(during, after))


def _unread(st: Stats) -> str:
    return f" (checker could not read {','.join(sorted(st.unread))})" if st.unread else ""


def _nx(*st: Stats) -> str:
    names = sorted(set().union(*(s.nx_names for s in st)))
    more = " ..." if len(names) > 4 else ""
    return f" NXDOMAIN: {', '.join(f'{s} in {m}' for m, s in names[:4])}{more}" if names else ""


def table(rows: list[Row]) -> str:
    def s(x: float | None) -> str:
        return "—" if x is None else f"{x:.1f}"
    out = ["| fault | held s | converged s | max lag s | NXDOMAIN s | DNS wrong s | ClusterSetIPs changed "
           "| writes during / after (bound) | eps gone s | violations | note |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        out.append(f"| {r.fault} | {r.hold:g} | {s(r.converged)} | {r.max_lag:.1f} | {r.nxdomain:.0f} | "
                   f"{r.dns_wrong:.0f} | {r.ips_changed} of {r.ips_total} | {r.writes_during:.0f} / "
                   f"{r.writes_after:.0f} ({r.bound:.0f}) | {s(r.eps_gone)} | "
                   f"{', '.join(r.violations) or 'none'} | {r.note.strip()} |")
    return "\n".join(out)


def run(args: argparse.Namespace, faults: list[type[Fault]]) -> list[Row]:
    w = World(args.n, args.ttl, args.bound, args.topology, args.repo, args.dns)
    rows: list[Row] = []
    try:
        print(f"{args.n} services, {len(w.pairs)} exports; controllers: {args.topology}", flush=True)
        todo = [cls(w) for cls in faults if not (cls.central_only and args.topology != "central")]
        if todo and type(todo[0]) is KillFirstSync:
            rows.append(run_fault(w, todo.pop(0), 0.0))
        else:
            w.start_controllers()
        per, row = baseline(w, args.baseline)
        rows.insert(0, row)
        for f in todo:
            print(f"fault {f.name} ...", flush=True)
            rows.append(run_fault(w, f, per))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        w.close()
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=150, help="services (default 150)")
    p.add_argument("--faults", default="all", help=f"comma-separated, of: {', '.join(BY_NAME)} (default all)")
    p.add_argument("--ttl", type=float, default=20.0, help="the controller's --endpoint-ttl (default 20)")
    p.add_argument("--bound", type=float, default=30.0, help="T: seconds a difference may last (default 30)")
    p.add_argument("--baseline", type=float, default=20.0, help="seconds of the no-fault phase (default 20)")
    p.add_argument("--topology", choices=TOPOLOGIES, default="central")
    p.add_argument("--dns", default="abc", help="members that get an mcsdns serve (default abc)")
    p.add_argument("--realk8s", default=os.environ.get("MCSDNS_REALK8S"))
    p.add_argument("--repo", type=Path, default=REPO, help="the checkout whose controller runs")
    args = p.parse_args()
    names = list(BY_NAME) if args.faults == "all" else args.faults.split(",")
    bad = [n for n in names if n not in BY_NAME]
    if bad or not set(args.dns) <= set("abc"):
        print(f"faults.py: unknown fault or member: {', '.join(bad) or args.dns}", file=sys.stderr)
        return 2
    if not args.realk8s or not Path(args.realk8s).is_file():
        print("faults.py: no real API server: set MCSDNS_REALK8S (or --realk8s) to realk8s.sh; skipped")
        return 0
    os.environ["MCSDNS_REALK8S"] = args.realk8s
    if args.topology == "local" and not has_local(args.repo):
        print(f"faults.py: the controller of {args.repo} has no --local (per-cluster topology)",
              file=sys.stderr)
        return 2
    t0 = time.monotonic()
    rows = run(args, [c for c in ALL if c.name in names])
    print(f"\n{args.topology} topology, {args.n} services, --endpoint-ttl {args.ttl:g}, T {args.bound:g} s, "
          f"{time.monotonic() - t0:.0f} s\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
