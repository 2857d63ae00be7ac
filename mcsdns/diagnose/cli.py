"""`mcsdns diagnose`: flags, then collect → checks → probe → report; exit 0 without FAIL,
1 with one, 2 for bad configuration."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

from .. import flags
from ..dns.names import encode_name
from ..kube.apiclient.client import Client
from ..kube.permissions import CONTROLLER, SERVER
from ..members.layout import CLUSTER_ROLE
from ..ops.errors import ConfigError
from . import checks, dnsconfig, identity, liveness, locality, members, report, serverargs, writers
from .checks import FAIL, Result
from .collect import Snapshot, collect
from .credential import credential_checks
from .members import Clusters


def dns_targets(args: argparse.Namespace, ms: dict[str, Client]) -> dict[str, tuple[str, int]]:
    """Member name -> the mcsdns address to ask."""
    out: dict[str, tuple[str, int]] = {}
    for spec in args.dns:
        name, sep, addr = spec.rpartition("=")
        if not sep:
            if len(ms) > 1:
                raise ConfigError(f"--dns {spec}: with several clusters, name the member: NAME=HOST:PORT")
            name, addr = next(iter(ms)), spec
        if name not in ms:
            raise ConfigError(f"--dns {spec}: {name} is not one of the clusters {list(ms)}")
        try:
            out[name] = flags.host_port(addr)
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--dns {spec}: {str(e).removeprefix(addr + ': ')}") from None
    return out


def run(args: argparse.Namespace, cs: Clusters, targets: dict[str, tuple[str, int]]) -> list[Result]:
    ms, clusterset = cs.clients, cs.clusterset
    role, needs = ("the controller", CONTROLLER) if clusterset else ("mcsdns serve", SERVER)

    def read(name: str, c: Client) -> Snapshot:
        if name in cs.files:  # the controller's own credential: the caller is the identity
            return collect(name, c, needs)
        return collect(name, c, needs, identity.CONTROLLER if clusterset else identity.SERVER,
                       args.service_account)

    with ThreadPoolExecutor(max_workers=len(ms)) as pool:
        snaps: list[Snapshot] = list(pool.map(lambda m: read(*m), ms.items()))
    results: list[Result] = list(cs.problems)
    fix = (f"run `mcsdns join` for this member, or bind ClusterRole {CLUSTER_ROLE} of deploy/ to it"
           if clusterset else "bind the ClusterRole of deploy/ to it")
    for s in snaps:
        results += checks.cluster_checks(s, role, fix)
    results += credential_checks(ms)
    results += checks.unique_ids(snaps)
    live = [s for s in snaps if s.error is None]
    zones = locality.read_zones(ms, live) if clusterset else {}
    for key in checks.keys(live, args.service):
        results += checks.export_checks(live, key)
        results += checks.import_checks(live, key)
        results += checks.name_checks(live, key, encode_name(args.zone))
        results += locality.checks(live, key, zones) if clusterset else []
    results += checks.stale_slices(live, args.service, cs.complete)
    results += liveness.controller_checks(snaps, clusterset)
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
        cs = members.read(args)
        targets = dns_targets(args, cs.clients)
    except ConfigError as e:
        return flags.fail(e)
    results = run(args, cs, targets)
    sys.stdout.write(report.as_json(results) if args.output == "json" else report.text(results))
    return 1 if any(r.status == FAIL for r in results) else 0
