"""`mcsdns controller`: sync ServiceExports into ServiceImports, derived Services and EndpointSlices
across member clusters."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import threading
from types import FrameType

from .. import flags
from ..flags import CIDR, DERIVED
from ..kube.apiclient.errors import Unreachable
from ..kube.names import valid_cluster_id
from ..ops.errors import ConfigError, os_reason, show_addr
from ..ops.http import HTTPEndpoints, serve_http
from .lease import LeaderElector, MemberLeases
from .leaseholder import lease_member
from .manager import Manager
from .member.client import Member
from .member.directory import MembersDir
from .member.live import Membership
from .metrics import registry, render
from .probe import UNREACHABLE_AFTER
from .writers import Writers, lease_identity, members_hash, members_identity

log = logging.getLogger("mcsdns.controller")


def _members(args: argparse.Namespace) -> tuple[list[Member], Membership | None]:
    """The --cluster members, then the --members-dir ones (and that directory's Membership)."""
    if not args.cluster and not args.members_dir:
        raise ConfigError("at least one --cluster NAME=KUBECONFIG[@CONTEXT] or a --members-dir is needed")
    members = [Member.parse(s) for s in args.cluster]
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"--cluster {dup}: the name is given twice (names must be unique)")
    for m in members:
        m.connect(pool=args.concurrent_reconciles + 8)
    membership = None
    if args.members_dir:
        if not os.path.isdir(args.members_dir):
            raise ConfigError(f"--members-dir {args.members_dir}: no such directory")
        membership = Membership(None, MembersDir(args.members_dir), set(names),
                                args.concurrent_reconciles + 8, allow_exec=args.members_allow_exec)
        members += membership.initial()
        names = [m.name for m in members]
    if not members:
        raise ConfigError(f"--members-dir {args.members_dir}: no member kubeconfig in it (and no --cluster)")
    if args.lease_cluster and args.lease_cluster not in names:
        raise ConfigError(f"--lease-cluster {args.lease_cluster}: expected one of {names}")
    for spec in args.cluster_id:
        name, sep, cid = spec.partition("=")
        if not sep or name not in names:
            raise ConfigError(f"--cluster-id {spec}: expected NAME=ID with NAME one of {names}")
        if not valid_cluster_id(cid):
            raise ConfigError(f"--cluster-id {spec}: {cid!r} is not a valid cluster ID "
                              "(a DNS label or two joined by a dot)")
        members[names.index(name)].cluster_id = cid
    return members, membership


def _local(args: argparse.Namespace, mode: str) -> None:
    """--local NAME: one of the --cluster members, derived mode, its Leases in NAME; else ConfigError."""
    if not args.local:
        return
    names = [Member.parse(s).name for s in args.cluster]
    if args.local not in names:
        raise ConfigError(f"--local {args.local}: expected one of the --cluster names {names} (the "
                          "cluster this controller runs in and writes into)")
    if mode == CIDR:
        raise ConfigError("--clusterset-ip cidr: not with --local (each cluster's controller would allocate "
                          "from the range on its own, so a service's ClusterSetIP would differ or collide "
                          "between clusters); use derived")
    if args.lease_cluster and args.lease_cluster != args.local:
        raise ConfigError(f"--lease-cluster {args.lease_cluster}: with --local {args.local} the Leases are "
                          f"in {args.local}")


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
                 f"@{m.context}" if m.context else "",
                 extra={"event": "member", "cluster": m.name, "cluster_id": m.cluster_id,
                        "kubeconfig": m.kubeconfig, "context": m.context})
    ids = [m.cluster_id for m in members if m.cluster_id]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError(f"cluster ID(s) {', '.join(sorted(dup))} used by more than one member")


class _Endpoints:
    """/health, /ready and /metrics (mcsdns.ops.http, with its limits) on a thread."""

    def __init__(self, addrs: dict[tuple[str, int], str], mgr: Manager, refused: dict[str, str]) -> None:
        """Serve on each address (its value: the flag that gave it); ConfigError when one
        cannot be bound, before the thread starts. `refused`: Membership.refused."""
        self.loop = asyncio.new_event_loop()
        reg = registry(mgr, refused)
        for (host, port), flag in addrs.items():
            ep = HTTPEndpoints(mgr.ready.is_set, lambda: render(reg))
            try:
                self.loop.run_until_complete(serve_http(host, port, ep))
            except OSError as e:
                self.loop.close()
                addr = show_addr(host, port)
                raise ConfigError(f"{flag} {addr}: {os_reason(e)}") from None
        threading.Thread(target=self.loop.run_forever, daemon=True, name="health").start()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def _mode(args: argparse.Namespace) -> str:
    mode: str = args.clusterset_ip or (CIDR if args.clusterset_cidr else DERIVED)
    if mode == DERIVED and args.clusterset_cidr:
        raise ConfigError(f"--clusterset-cidr {','.join(args.clusterset_cidr)}: only with "
                          "--clusterset-ip cidr")
    return mode


def _writers(args: argparse.Namespace, members: list[Member], holder: Member) -> Writers:
    """Our writer identity (`writers`): the Lease with --leader-elect, else the member set."""
    names = [m.name for m in members]
    identity = (lease_identity(holder.name, args.lease_namespace, args.lease_name)
                if args.leader_elect else members_identity(names))
    if args.local:  # not the same writer as a central controller of the same Lease or members
        identity = f"local:{args.local}:{identity}"
    log.info("writer identity %s (members %s)", identity, ", ".join(sorted(names)),
             extra={"event": "writer", "writer": identity})
    return Writers(identity, members_hash(names), args.writer_grace)


def run(args: argparse.Namespace) -> int:
    """The controller; returns the exit code."""
    try:
        mode = _mode(args)
        _local(args, mode)
        members, membership = _members(args)
        _resolve_ids(members)
        holder = lease_member(members, len(args.cluster), args.lease_cluster or args.local,
                              args.leader_elect and not args.once)
    except ConfigError as e:
        return flags.fail(e)
    writers = _writers(args, members, holder)
    elector = None
    if args.leader_elect and not args.once:
        elector = LeaderElector(holder, args.lease_namespace, args.lease_name, args.identity,
                                args.lease_duration)
    leases = MemberLeases(holder, args.lease_namespace, args.identity, args.endpoint_ttl)
    after = UNREACHABLE_AFTER if args.unreachable_after is None else args.unreachable_after
    mgr = Manager(members, mode, args.clusterset_cidr, args.endpoint_ttl, args.resync,
                  workers=max(1, args.concurrent_reconciles), elector=elector, member_leases=leases,
                  import_grace=args.import_grace, unreachable_after=after, local=args.local or None)
    mgr.rec.writers = writers
    if membership is not None and not args.once:
        membership.mgr = mgr
        mgr.tick = membership.tick
    endpoints = None
    if not args.once:
        try:
            endpoints = _Endpoints(flags.http_addrs(args.health, args.metrics), mgr,
                                   membership.refused if membership is not None else {})
        except ConfigError as e:
            return flags.fail(e)
    log.info("ClusterSetIP mode: %s%s", mode, f" ({', '.join(args.clusterset_cidr)})" if mode == CIDR else "")
    if args.local:
        log.info("per-cluster topology: writing into %s only; reading %s", args.local,
                 ", ".join(sorted(m.name for m in members if m.name != args.local)) or "no other member")
    mgr.start()
    if args.once:
        try:
            return 0 if mgr.run_once(args.endpoint_ttl + 120) else 1
        finally:
            mgr.shutdown()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        mgr.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        mgr.run()
    finally:
        mgr.shutdown()
        if elector is not None:
            elector.release()
        if endpoints is not None:
            endpoints.stop()
        log.info("stopped; %d writes", mgr.writes())
    return 0


def main(args: argparse.Namespace) -> int:
    """Entry point for `mcsdns controller` (logging is set up by the caller)."""
    return run(args)
