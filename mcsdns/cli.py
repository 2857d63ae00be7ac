"""Command line: `mcsdns serve` and `mcsdns records` here; `controller`, `diagnose` and `show`
from cli_controller, cli_diagnose and cli_show (their packages are imported only when they run).

`serve` with a Kubernetes source asks for its lists before it imports the server (ops/load.py,
stage 1): what this module imports at its top is what parsing the flags needs, no more."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from typing import TYPE_CHECKING

from . import flags
from .cli_controller import add_parser as add_controller
from .cli_diagnose import add_parser as add_diagnose
from .cli_join import add_parsers as add_join
from .cli_show import add_parser as add_show
from .nameserver import CACHE_BYTES
from .ops import load, tsigkeys
from .ops.errors import ConfigError
from .ops.logs import setup_logging
from .sources.limits import MANIFEST_MAX_BYTES
from .zone.locality import ORDER, POLICIES, Locality

if TYPE_CHECKING:
    from .serveconfig import Config
    from .sources.kubefirst import FirstLists

ZONE = "clusterset.local"  # served without --zone


def _add_source_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--zone", type=flags.zone,  # no default: checking one imports the zone code
                   help=f"the zone served (default {ZONE})")
    s.add_argument("--ttl", type=flags.ttl, default=5, help="TTL of every record (default 5)")
    s.add_argument("--manifests", type=flags.directory, metavar="DIR",
                   help="serve objects from a directory of YAML/JSON files")
    s.add_argument("--max-manifest-bytes", type=flags.positive, default=MANIFEST_MAX_BYTES, metavar="N",
                   help=f"skip manifest files larger than N bytes (default {MANIFEST_MAX_BYTES}: 16 MiB)")
    s.add_argument("--kubeconfig", type=flags.readable_file, metavar="PATH",
                   help="watch a Kubernetes API (default: in-cluster)")
    s.add_argument("--context", type=flags.non_empty, metavar="NAME",
                   help="the kubeconfig context (default: its current one)")
    s.add_argument("--namespace", action="append", default=[], dest="namespaces", type=flags.dns_label,
                   help="only watch these namespaces (repeatable; default all)")
    loc = s.add_argument_group("locality (headless answers ordered local cluster, region, rest)")
    loc.add_argument("--cluster-id", type=flags.cluster_id, default="",
                     help="this server's cluster ID (default: the watched ClusterProperty "
                          "cluster.clusterset.k8s.io; without one, locality is off)")
    loc.add_argument("--region", type=flags.label_value, default="", help="this server's region")
    loc.add_argument("--topology-zone", type=flags.label_value, default="",
                     help="this server's zone: local endpoints in it are listed first")
    loc.add_argument("--cluster-region", action="append", default=[], type=flags.cluster_region,
                     metavar="CLUSTER=REGION", help="region of a member cluster (repeatable)")
    loc.add_argument("--prefer-local", choices=POLICIES, default=ORDER,
                     help="order: every endpoint, local first (default); only-when-available: "
                          "only local endpoints while at least one is ready")
    loc.add_argument("--terminating-fallback", action="store_true",
                     help="answer serving+terminating endpoints of a headless service while none "
                          "is ready (as kube-proxy does; the spec says NXDOMAIN)")
    flags.add_log_args(s)
    flags.add_version(s)


ABOUT = ("mcsdns: an authoritative DNS server for the Kubernetes Multi-Cluster Services zone "
         "clusterset.local (KEP-1645), answering from ServiceImports and EndpointSlices read from a "
         "Kubernetes API or from manifest files, and a controller that syncs ServiceExports across "
         "the member clusters of a clusterset.")
MORE = "`mcsdns COMMAND --help` lists a command's flags; README.md and docs/ say more."


class MainParser(flags.Parser):
    """`mcsdns`: its help says what the tool is, then lists each command with its one line."""

    def format_help(self) -> str:
        sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
        rows = [(c.dest, c.help or "") for c in sub._get_subactions()]
        width = max(len(name) for name, _ in rows) + 2
        self.description = "\n".join([textwrap.fill(ABOUT, 78), "", "commands:",
                                      *(f"  {name:<{width}}{text}" for name, text in rows)])
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    p = MainParser(prog="mcsdns", usage="%(prog)s [-h] [--version] command ...", epilog=MORE,
                   formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_version(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="command", help=argparse.SUPPRESS,
                           parser_class=flags.Parser, prog="mcsdns")
    s = sub.add_parser("serve", help="serve the clusterset.local zone",
                       description="`mcsdns serve`: answer DNS queries for the zone (UDP and TCP), "
                                   "from a Kubernetes API or a directory of manifests.")
    s.add_argument("--listen", action="append", type=flags.host_port, metavar="HOST:PORT",
                   help="UDP+TCP address (repeatable; default 0.0.0.0:53)")
    _add_source_args(s)
    _add_serve_args(s)
    _add_transfer_args(s)
    r = sub.add_parser("records", help="print the zone mcsdns would serve, as a zone file",
                       description="`mcsdns records`: wait for the first sync, print the zone "
                                   "`serve` would answer from, as a zone file, and exit.")
    _add_source_args(r)
    r.add_argument("--timeout", type=flags.seconds, default=30,
                   help="seconds to wait for the first sync, then exit 1 (default 30)")
    add_controller(sub)
    add_diagnose(sub)
    add_show(sub)
    add_join(sub)
    return p


def _add_serve_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--health", type=flags.host_port, metavar="HOST:PORT", help="/health and /ready")
    s.add_argument("--metrics", type=flags.host_port, metavar="HOST:PORT", help="Prometheus /metrics")
    s.add_argument("--tcp-max-conns", type=flags.positive, default=1000,
                   help="open TCP connections; when full, an idle one (or one holding part of "
                        "a message) is closed for a new one (default 1000)")
    s.add_argument("--tcp-max-conns-per-client", type=flags.positive, default=100, metavar="N",
                   help="open TCP connections from one IPv4 address or IPv6 /64; beyond, the "
                        "client's oldest idle one is closed, else the new one refused (default 100)")
    s.add_argument("--tcp-idle-timeout", type=flags.seconds, default=10.0,
                   help="close a TCP connection idle this many seconds (default 10)")
    s.add_argument("--tcp-read-timeout", type=flags.seconds, default=5.0,
                   help="close a TCP connection holding part of a message this many seconds "
                        "without a whole one (default 5)")
    s.add_argument("--workers", type=flags.positive, default=1,
                   help="server processes sharing the port with SO_REUSEPORT (default 1)")
    s.add_argument("--reuse-port", action="store_true",
                   help="share the port with other servers (SO_REUSEPORT); the port is bound "
                        "once the zone is loaded, so a new server takes no queries before")
    s.add_argument("--lameduck", type=flags.seconds_or_zero, default=5.0, metavar="SECONDS",
                   help="on SIGTERM, /ready answers 503 at once and queries are answered for "
                        "SECONDS more before the listeners close (default 5; 0: close at once)")
    s.add_argument("--log-queries", action="store_true",
                   help="log every query as CoreDNS' log plugin does (slow: UDP then skips batched I/O)")
    s.add_argument("--cache-size", type=flags.non_negative, default=CACHE_BYTES >> 20, metavar="MIB",
                   help=f"response cache budget in MiB, UDP and TCP together "
                        f"(default {CACHE_BYTES >> 20}; 0: no response cache)")
    s.add_argument("--state-dir", type=flags.dir_or_new, metavar="DIR",
                   help="keep the last synced Kubernetes objects in DIR/objects.json and serve "
                        "them after a restart until the API answers; the SOA serial in DIR/serial")
    s.add_argument("--state-interval", type=flags.seconds_or_zero, default=10.0, metavar="SECONDS",
                   help="write the state at most this often while changes arrive (default 10)")


def _add_transfer_args(s: argparse.ArgumentParser) -> None:
    x = s.add_argument_group("zone transfers (AXFR/IXFR over TCP, NOTIFY; default: all REFUSED)")
    x.add_argument("--allow-transfer", action="append", default=[], type=flags.cidr, metavar="CIDR",
                   help="clients allowed AXFR/IXFR (repeatable; default none)")
    x.add_argument("--notify", action="append", default=[], type=flags.host_port, metavar="HOST:PORT",
                   help="secondary to send NOTIFY to after each change (repeatable)")
    x.add_argument("--tsig-key-file", action="append", default=[], type=flags.readable_file,
                   metavar="PATH",
                   help="TSIG keys (repeatable): BIND's key file (tsig-keygen), knot's (keymgr -t), "
                        "or NAME:ALGORITHM:BASE64SECRET lines. With keys, transfers must be signed "
                        "with one; signed queries are verified and answered signed; NOTIFY is "
                        f"signed with the first. Without this and --tsig-key: ${tsigkeys.ENV}")
    x.add_argument("--tsig-key", action="append", default=[], metavar="NAME:ALGORITHM:BASE64SECRET",
                   help="a TSIG key on the command line (repeatable; visible in ps: prefer a file)")
    x.add_argument("--tsig-allow-weak", action="store_true",
                   help="accept hmac-md5 and hmac-sha1 keys (refused by default)")


def config_from(args: argparse.Namespace) -> Config:
    from .serveconfig import Config
    from .transport.tcpconns import TCPLimits

    cfg = Config(
        zone=(args.zone or ZONE).rstrip("."), ttl=args.ttl, manifests=args.manifests,
        max_manifest_bytes=args.max_manifest_bytes,
        kubeconfig=args.kubeconfig, context=args.context, namespaces=args.namespaces,
        locality=Locality(args.cluster_id.lower(), args.region, args.topology_zone,
                          dict(args.cluster_region), args.prefer_local, args.terminating_fallback),
    )
    if args.command == "serve":
        cfg.listen = args.listen or [("0.0.0.0", 53)]
        cfg.health, cfg.metrics = args.health, args.metrics
        cfg.log_queries, cfg.workers = args.log_queries, max(1, args.workers)
        cfg.cache_mib = args.cache_size
        cfg.tcp_limits = TCPLimits(args.tcp_max_conns, args.tcp_idle_timeout, args.tcp_read_timeout,
                                   args.tcp_max_conns_per_client)
        cfg.state_dir, cfg.state_interval = args.state_dir, max(0.0, args.state_interval)
        cfg.allow_transfer, cfg.notify = args.allow_transfer, args.notify
        cfg.reuse_port = args.reuse_port
        cfg.lameduck = max(0.0, args.lameduck)
    return cfg


async def print_records(cfg: Config, timeout: float) -> int:
    from .roles.loader import loader_for
    from .zone.zonefile import zone_text

    loader = loader_for(cfg, serving=False, keep_state=False)

    def waiting() -> None:
        what = "; ".join(s.target() for s in loader.sources)
        flags.tell(f"mcsdns: waiting up to {timeout:g}s for {what}")

    missing = await loader.load_once(timeout, waiting=waiting, answer=False)
    if missing:
        flags.tell(f"mcsdns: no first sync within {timeout:g}s: {'; '.join(missing)}")
        return 1
    sys.stdout.write(zone_text(loader.pipeline.zone))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(getattr(args, "log_level", "INFO"), getattr(args, "log_format", "text"))
    if args.command not in ("serve", "records"):
        return int(args.func(args))
    try:
        first = ask_first(args)
        cfg = config_from(args)
        if args.command == "records":
            import asyncio

            return asyncio.run(print_records(cfg, args.timeout))
        try:
            cfg.tsig_keys = tsigkeys.configured_keys(args.tsig_key, args.tsig_key_file, os.environ,
                                                     args.tsig_allow_weak)
        except ValueError as e:
            raise ConfigError(e) from None
        return serve(cfg, args.tsig_key, first)
    except ConfigError as e:
        return flags.fail(e)


def ask_first(args: argparse.Namespace) -> FirstLists | None:
    """Stage 1 (ops/load.py): `serve` with a Kubernetes source asks for its lists now, before
    it imports the server; None for any other start. ConfigError when the kubeconfig does
    not load."""
    if args.command != "serve" or not load.reads_first(args.workers, args.manifests):
        return None
    from .sources.kubefirst import FirstLists, connect

    load.gc_off()
    return FirstLists(connect(args.kubeconfig, args.context, args.namespaces), args.namespaces)


def serve(cfg: Config, tsig_on_command_line: list[str], first: FirstLists | None = None) -> int:
    """`mcsdns serve`, until SIGTERM; ConfigError when an address cannot be bound or a
    source cannot start. `first`: the lists stage 1 asked for (`ask_first`)."""
    if tsig_on_command_line:
        logging.getLogger("mcsdns").warning(
            "--tsig-key shows the secret to anyone who can list processes: prefer --tsig-key-file "
            "or $%s", tsigkeys.ENV)
    if cfg.workers > 1:
        from .roles.supervisor import Supervisor

        return Supervisor(cfg).run()
    begun = None
    if load.reads_first(cfg.workers, cfg.manifests):  # decoded as they come, while the rest is set up
        from .sources.kube import begin_reading

        begun = begin_reading(cfg.kubeconfig, cfg.context, cfg.namespaces, first,
                              later=cfg.state_dir is None)
    from .roles.single import SingleProcess

    return SingleProcess(cfg, begun).run()
