"""`mcsdns diagnose`: flags, then collect → checks → probe → report; exit 0 without FAIL,
1 with one, 2 for bad configuration."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

from .. import flags
from ..dns.names import encode_name
from ..kube.client import Client
from ..kube.config import connect, parse_cluster
from ..kube.permissions import CONTROLLER, SERVER
from ..members.layout import CLUSTER_ROLE
from ..ops.errors import ConfigError
from . import checks, dnsconfig, liveness, locality, report, serverargs, writers
from .checks import FAIL, Result
from .collect import Snapshot, collect
from .credential import credential_checks

Clusters = dict[str, Client]  # by name, in the order given


def members(args: argparse.Namespace) -> Clusters:
    """The clusters to read, each with its client; ConfigError names the flag."""
    if args.cluster and (args.kubeconfig or args.context):
        raise ConfigError("--cluster: give either --cluster (a clusterset) or --kubeconfig/--context "
                          "(one cluster), not both")
    if args.cluster:
        specs = [parse_cluster(spec) for spec in args.cluster]
        names = [name for name, _, _ in specs]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ConfigError(f"--cluster {dup}: the name is given twice (names must be unique)")
        out: Clusters = {}
        for name, kubeconfig, context in specs:
            out[name] = connect(kubeconfig, context, pool=32, member=name)
        return out
    name = args.context or "cluster"
    c = connect(args.kubeconfig, args.context, pool=32)
    c.name = name
    return {name: c}


def dns_targets(args: argparse.Namespace, ms: Clusters) -> dict[str, tuple[str, int]]:
    """Member name -> the mcsdns address to ask."""
    out: dict[str, tuple[str, int]] = {}
    for spec in args.dns:
        name, sep, addr = spec.rpartition("=")
        if not sep:
            if len(ms) > 1:
                raise ConfigError(f"--dns {spec}: with --cluster, name the member: NAME=HOST:PORT")
            name, addr = next(iter(ms)), spec
        if name not in ms:
            raise ConfigError(f"--dns {spec}: {name} is not one of the clusters {list(ms)}")
        try:
            out[name] = flags.host_port(addr)
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--dns {spec}: {str(e).removeprefix(addr + ': ')}") from None
    return out


def run(args: argparse.Namespace, ms: Clusters, targets: dict[str, tuple[str, int]]) -> list[Result]:
    role, needs = ("the controller", CONTROLLER) if args.cluster else ("mcsdns serve", SERVER)
    with ThreadPoolExecutor(max_workers=len(ms)) as pool:
        snaps: list[Snapshot] = list(pool.map(lambda m: collect(m[0], m[1], needs), ms.items()))
    results: list[Result] = []
    fix = (f"run `mcsdns join` for this member, or bind ClusterRole {CLUSTER_ROLE} of deploy/ to it"
           if args.cluster else "bind the ClusterRole of deploy/ to it")
    for s in snaps:
        results += checks.cluster_checks(s, role, fix)
    results += credential_checks(ms)
    results += checks.unique_ids(snaps)
    live = [s for s in snaps if s.error is None]
    zones = locality.read_zones(ms, live) if args.cluster else {}
    for key in checks.keys(live, args.service):
        results += checks.export_checks(live, key)
        results += checks.import_checks(live, key)
        results += checks.name_checks(live, key, encode_name(args.zone))
        results += locality.checks(live, key, zones) if args.cluster else []
    results += checks.stale_slices(live, args.service)
    results += liveness.controller_checks(snaps, bool(args.cluster))
    results += writers.writer_checks(live)
    for s in live:
        results += dnsconfig.dns_config_checks(s, args.zone)
        results += serverargs.server_checks(s)
    if targets:
        from . import probe  # dnspython: only when asked

    for s in live:
        if s.name in targets:
            results += probe.dns_checks(s, targets[s.name], args.zone, args.service)
    if args.service is not None and not any(r.subject for r in results):
        ns, name = args.service
        results.append(Result(FAIL, "service", "", f"{ns}/{name}", "no ServiceExport or ServiceImport "
                              "of this name in any cluster"))
    return results


def main(args: argparse.Namespace) -> int:
    try:
        ms = members(args)
        targets = dns_targets(args, ms)
    except ConfigError as e:
        return flags.fail(e)
    results = run(args, ms, targets)
    sys.stdout.write(report.as_json(results) if args.output == "json" else report.text(results))
    return 1 if any(r.status == FAIL for r in results) else 0
