"""`mcsdns controller`: sync ServiceExports into ServiceImports + EndpointSlices across member clusters."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from ..objects import valid_cluster_id
from .clusters import ConfigError, Member, Unreachable, watch_forever
from .exports import SLICES
from .ipam import Allocator
from .lease import LeaderElector
from .reconcile import Reconciler

log = logging.getLogger("mcsdns.controller")

MIN_INTERVAL = 0.2  # seconds between two reconcile passes
DEGRADED_RETRY = 1.0  # seconds between passes while a member is unreachable


def _host_port(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {s!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _cidr(s: str) -> str:
    try:
        return str(ipaddress.ip_network(s, strict=False))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"bad CIDR {s!r}: {e}") from e


def add_parser(subparsers: Any) -> None:
    """Add the `controller` subcommand (func=main)."""
    c = subparsers.add_parser("controller", help="sync ServiceExports to ServiceImports across clusters",
                              description=__doc__)
    c.add_argument("--cluster", action="append", default=[], metavar="NAME=KUBECONFIG[@CONTEXT]",
                   help="a member cluster (repeatable)")
    c.add_argument("--cluster-id", action="append", default=[], metavar="NAME=ID",
                   help="cluster ID of member NAME (default: its ClusterProperty "
                        "cluster.clusterset.k8s.io or id.k8s.io)")
    c.add_argument("--clusterset-cidr", action="append", default=[], type=_cidr, metavar="CIDR",
                   help="range for ClusterSetIPs (repeatable; one IPv4 and/or one IPv6)")
    c.add_argument("--endpoint-ttl", type=float, default=60.0, metavar="SECONDS",
                   help="drop an unreachable member's endpoints after this long (default 60)")
    c.add_argument("--resync", type=float, default=300.0, metavar="SECONDS",
                   help="full reconcile at least this often (default 300)")
    c.add_argument("--leader-elect", action="store_true", help="only write while holding a Lease")
    c.add_argument("--lease-namespace", default="kube-system")
    c.add_argument("--lease-name", default="mcsdns-controller")
    c.add_argument("--lease-cluster", default="", metavar="NAME",
                   help="member holding the Lease (default: the first --cluster)")
    c.add_argument("--lease-duration", type=float, default=15.0, metavar="SECONDS")
    c.add_argument("--identity", default=f"{socket.gethostname()}-{os.getpid()}",
                   help="this replica's name in the Lease (default HOSTNAME-PID)")
    c.add_argument("--health", type=_host_port, metavar="HOST:PORT",
                   help="/health (always 200) and /ready (200 after the first full pass, or while following)")
    c.add_argument("--once", action="store_true", help="one reconcile pass, then exit")
    c.add_argument("--log-level", default="INFO")
    c.add_argument("--log-format", choices=("text", "json"), default="text")
    c.set_defaults(func=main)


def _members(args: argparse.Namespace) -> list[Member]:
    if not args.cluster:
        raise ConfigError("at least one --cluster NAME=KUBECONFIG[@CONTEXT] is needed")
    members = [Member.parse(s) for s in args.cluster]
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise ConfigError("--cluster names must be unique")
    for spec in args.cluster_id:
        name, sep, cid = spec.partition("=")
        if not sep or name not in names:
            raise ConfigError(f"--cluster-id {spec!r}: expected NAME=ID with NAME one of {names}")
        if not valid_cluster_id(cid):
            raise ConfigError(f"--cluster-id {spec!r}: {cid!r} is not a valid cluster ID "
                              "(a DNS label or two joined by a dot)")
        members[names.index(name)].cluster_id = cid
    for m in members:
        m.connect()
    return members


def _resolve_ids(members: list[Member]) -> None:
    """Read cluster IDs now; unreachable members get theirs on first contact."""
    for m in members:
        if m.cluster_id is None:
            try:
                m.cluster_id = m.read_cluster_id()
            except Unreachable as e:
                log.warning("cluster %s unreachable at start (%s); its ID is read on first contact",
                            m.name, e)
                continue
        log.info("cluster %s: ID %s (%s%s)", m.name, m.cluster_id, m.kubeconfig,
                 f"@{m.context}" if m.context else "")
    ids = [m.cluster_id for m in members if m.cluster_id]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError(f"cluster ID(s) {', '.join(sorted(dup))} used by more than one member")


class _Health(BaseHTTPRequestHandler):
    ready: threading.Event

    def do_GET(self) -> None:  # noqa: N802
        ok = self.path == "/health" or (self.path == "/ready" and self.ready.is_set())
        code = 200 if ok else (503 if self.path == "/ready" else 404)
        body = b"ok\n" if ok else b"not ready\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def _start_health(addr: tuple[str, int], ready: threading.Event) -> ThreadingHTTPServer:
    handler = type("Health", (_Health,), {"ready": ready})
    srv = ThreadingHTTPServer(addr, handler)
    threading.Thread(target=srv.serve_forever, daemon=True, name="health").start()
    return srv


def _start_watches(members: list[Member], dirty: threading.Event, stop: threading.Event) -> None:
    for m in members:
        paths = ["/api/v1/namespaces", "/api/v1/services", SLICES]
        try:
            if m.mcs_version is None:
                m.discover()
        except Unreachable:
            pass
        version = m.mcs_version or "v1beta1"
        paths += [f"/apis/multicluster.x-k8s.io/{version}/{p}" for p in ("serviceexports", "serviceimports")]
        for path in paths:
            threading.Thread(target=watch_forever, args=(m, path, dirty.set, stop), daemon=True,
                             name=f"watch-{m.name}-{path.rsplit('/', 1)[1]}").start()


def run(args: argparse.Namespace) -> int:
    """The controller loop; returns the exit code."""
    try:
        members = _members(args)
        _resolve_ids(members)
    except ConfigError as e:
        print(f"mcsdns controller: {e}", file=sys.stderr)
        return 2
    rec = Reconciler(members, Allocator(args.clusterset_cidr), args.endpoint_ttl)
    if args.once:
        return 0 if rec.reconcile() else 1
    stop, dirty, ready = threading.Event(), threading.Event(), threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        dirty.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    health = _start_health(args.health, ready) if args.health else None
    elector = None
    if args.leader_elect:
        holder = next((m for m in members if m.name == args.lease_cluster), members[0])
        elector = LeaderElector(holder, args.lease_namespace, args.lease_name, args.identity,
                                args.lease_duration)
    _start_watches(members, dirty, stop)
    dirty.set()
    last_full = last_pass = last_lease = 0.0
    try:
        while not stop.is_set():
            now = time.monotonic()
            if elector is not None and now - last_lease >= elector.duration / 3:
                was = elector.is_leader()
                last_lease = now
                if elector.step() and not was:
                    dirty.set()  # a new leader starts with a full pass
            leading = elector is None or elector.is_leader()
            if not leading:
                ready.set()  # a healthy follower
            resync = min(args.resync, DEGRADED_RETRY) if rec.degraded() else args.resync
            due = now - last_full >= resync or dirty.is_set()
            if leading and due and now - last_pass >= MIN_INTERVAL:
                dirty.clear()
                last_pass = now
                try:
                    ok = rec.reconcile()
                except Exception:
                    log.exception("reconcile failed")
                    ok = False
                if not ok:
                    dirty.set()
                else:
                    last_full = now
                if rec.synced:
                    ready.set()
                continue
            wait = MIN_INTERVAL if dirty.is_set() else min(DEGRADED_RETRY, args.resync)
            if elector is not None:
                wait = min(wait, elector.duration / 3)
            dirty.wait(wait) if not dirty.is_set() else stop.wait(MIN_INTERVAL)
    finally:
        stop.set()
        if elector is not None:
            elector.release()
        if health is not None:
            health.shutdown()
        log.info("stopped; %d writes", sum(m.writes for m in members))
    return 0


def main(args: argparse.Namespace) -> int:
    """Entry point for `mcsdns controller` (logging is set up by the caller)."""
    return run(args)


def _standalone(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mcsdns")
    add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["controller", *(argv if argv is not None else sys.argv[1:])])
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(_standalone())
