"""`mcsdns controller`'s flags; mcsdns.controller is imported only when the command runs."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from . import flags
from .flags import CIDR, DERIVED

DESCRIPTION = ("`mcsdns controller`: sync ServiceExports into ServiceImports, derived Services and "
               "EndpointSlices across member clusters.")
CONCURRENT_RECONCILES = "--concurrent-reconciles"  # was --workers (a deprecated alias now)


def _run(args: argparse.Namespace) -> int:
    from .controller.cli import main

    return main(args)


def add_parser(subparsers: Any) -> None:
    """Add the `controller` subcommand (func=main)."""
    c = subparsers.add_parser("controller", help="sync ServiceExports to ServiceImports across clusters",
                              description=DESCRIPTION)
    c.add_argument("--cluster", action="append", default=[], metavar="NAME=KUBECONFIG[@CONTEXT]",
                   help="a member cluster (repeatable)")
    c.add_argument("--members-dir", metavar="DIR",
                   help="also every member kubeconfig in DIR, one file each named for the member (a mounted "
                        "Secret: one key per member); watched: a file added, removed or changed adds, "
                        "removes or reloads that member without a restart. A member file is data only: "
                        "server, certificate-authority-data, tls-server-name, proxy-url, "
                        "insecure-skip-tls-verify, token, client-certificate-data, client-key-data; a file "
                        "with anything else (exec, auth-provider, tokenFile, a file path) is refused")
    c.add_argument("--members-allow-exec", action="store_true",
                   help="let --members-dir files carry an exec credential plugin, run as this process's "
                        "user (only when you alone write that directory: whoever can write one of its "
                        "files then runs code here)")
    c.add_argument("--local", default="", metavar="NAME",
                   help="the per-cluster topology: write only into member NAME (a --cluster: the cluster "
                        "this runs in), leader-elected there; every other member is only read (a read-only "
                        "credential: `mcsdns join --read-only`). Derived ClusterSetIPs only")
    c.add_argument("--cluster-id", action="append", default=[], metavar="NAME=ID",
                   help="cluster ID of member NAME (default: its ClusterProperty "
                        "cluster.clusterset.k8s.io or id.k8s.io)")
    c.add_argument("--clusterset-ip", choices=(DERIVED, CIDR), default=None,
                   help="where ClusterSetIPs come from: a derived Service's ClusterIP in each importing "
                        "cluster (derived, the default) or --clusterset-cidr (cidr; the default when a "
                        "--clusterset-cidr is given)")
    c.add_argument("--clusterset-cidr", action="append", default=[], type=flags.cidr, metavar="CIDR",
                   help="range for ClusterSetIPs in cidr mode (repeatable; one IPv4 and/or one IPv6)")
    c.add_argument("--endpoint-ttl", type=flags.seconds, default=60.0, metavar="SECONDS",
                   help="drop an unreachable member's endpoints this long after the last contact with it "
                        "(default 60)")
    c.add_argument("--import-grace", type=flags.seconds_or_zero, default=86400.0, metavar="SECONDS",
                   help="keep the ServiceImports, derived Services and ClusterSetIPs of an unreachable "
                        "member's exports this long after the last contact (default 86400, a day; at "
                        "most the --endpoint-ttl: they go with its endpoints); a member that comes back "
                        "no longer exporting a service takes its import away at once")
    c.add_argument("--unreachable-after", type=flags.seconds, default=None, metavar="SECONDS",
                   help="a member is unreachable once its probe (a GET of namespace default, a 2 s "
                        "deadline, every second) has failed this long, or a write to it timed out "
                        "(default 6)")
    c.add_argument("--resync", type=flags.seconds, default=300.0, metavar="SECONDS",
                   help="re-queue every service at least this often (default 300)")
    c.add_argument(CONCURRENT_RECONCILES, type=flags.positive, default=16, metavar="N",
                   help="services reconciled in parallel in each member (its own queue), so at "
                        "most this many writes in flight per member (default 16)")
    c.add_argument("--workers", type=flags.positive, metavar="N", action=flags.DeprecatedAlias,
                   new=CONCURRENT_RECONCILES, dest=CONCURRENT_RECONCILES[2:].replace("-", "_"))
    # (its name up to 0.1.0; `serve --workers` counts processes, hence the new name)
    c.add_argument("--leader-elect", action="store_true", help="only write while holding a Lease")
    c.add_argument("--lease-namespace", type=flags.dns_label, default="kube-system", metavar="NS",
                   help="namespace of the Lease (default kube-system)")
    c.add_argument("--lease-name", type=flags.dns_subdomain, default="mcsdns-controller", metavar="NAME",
                   help="name of the Lease (default mcsdns-controller)")
    c.add_argument("--lease-cluster", default="", metavar="NAME",
                   help="member holding the Leases (default: the cluster this pod runs in when it is a "
                        "member, else the only --cluster; --leader-elect with several --cluster and neither "
                        "is refused: every replica must find the same Lease)")
    c.add_argument("--lease-duration", type=flags.seconds, default=15.0, metavar="SECONDS",
                   help="how long a Lease not renewed stays held; a standby takes over after it "
                        "(default 15)")
    c.add_argument("--identity", type=flags.non_empty, default=f"{socket.gethostname()}-{os.getpid()}",
                   metavar="NAME",
                   help="this replica's name in the Lease (default HOSTNAME-PID)")
    c.add_argument("--writer-grace", type=flags.seconds, default=30.0, metavar="SECONDS",
                   help="another controller found writing this one's objects keeps them until it has "
                        "written nothing for this long (default 30)")
    c.add_argument("--health", type=flags.host_port, metavar="HOST:PORT",
                   help="/health (always 200), /ready (200 after the first full sync, or while following) "
                        "and /metrics")
    c.add_argument("--metrics", type=flags.host_port, metavar="HOST:PORT",
                   help="also serve /metrics (and /health, /ready) here")
    c.add_argument("--once", action="store_true", help="sync every service once, then exit")
    flags.add_log_args(c)
    flags.add_version(c)
    c.set_defaults(func=_run)
