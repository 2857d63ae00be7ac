"""`mcsdns join` and `mcsdns leave`: the flags' clients, the work (`join`, `leave`), its
lines on stderr; exit 0 when done, 1 when the API refused or failed, 2 for bad flags."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .. import flags
from ..controller.lease import LEASE_NAMESPACES
from ..kube.apiclient.client import Client
from ..kube.apiclient.errors import ApiError, explain
from ..kube.config import connect
from ..ops.errors import EXIT_CONFIG, ConfigError
from .admission import guard
from .join import Refused, join
from .kubeconfig import admin_cluster, dump, read_ca
from .leave import purge_imports, revoke
from .left import Denied, check, drop_lease, exports_ask, lease_asks, mark_exports
from .record import WrongMember, check_leave
from .secret import drop_key, put_key


def _client(kubeconfig: str | None, context: str | None, flag: str, name: str) -> Client:
    """`kube.config.connect`, its error naming `flag` (--kubeconfig, --controller-kubeconfig)."""
    origin = ""
    if flag != "--kubeconfig":
        path = f"{flag} {kubeconfig or '(default)'}"
        origin = f"{flag.replace('kubeconfig', 'context')} {context} ({path})" if context else path
    c = connect(kubeconfig, context, origin=origin)
    c.name = name
    return c


def _clients(args: argparse.Namespace) -> tuple[Client, Client | None]:
    """The member's client and the controller cluster's (None without --controller-kubeconfig);
    --output checked: ConfigError before any work."""
    member = _client(args.kubeconfig, args.context, "--kubeconfig", args.member)
    _check_output(args.output)
    ctl = None
    if args.controller_kubeconfig:
        ctl = _client(args.controller_kubeconfig, args.controller_context, "--controller-kubeconfig",
                      "controller")
    return member, ctl


def _check_output(path: str | None) -> None:
    """--output names a file that can be written (or -): ConfigError before any work."""
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise ConfigError(f"--output {path}: a directory, not a file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise ConfigError(f"--output {path}: no such directory")


def _say(member: str, where: str = "") -> Callable[[str], None]:
    return lambda line: flags.tell(f"{member}{where}: {line}")


def _write(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _wrong(verb: str, member: str, e: WrongMember) -> int:
    """The one line of a member-name refusal; exit 2."""
    flags.tell(f"mcsdns {verb}: {member}: {e}")
    return EXIT_CONFIG


def join_main(args: argparse.Namespace) -> int:
    if not args.output and not args.controller_kubeconfig:
        return flags.fail("join: give --output FILE and/or --controller-kubeconfig PATH (the members Secret)")
    try:
        member, ctl = _clients(args)
        ca = read_ca(args.certificate_authority) if args.certificate_authority else None
        cluster = admin_cluster(member.transport.cfg.server, args.insecure_skip_tls_verify, ca)
        if args.server:
            cluster["server"] = args.server
    except ConfigError as e:
        return flags.fail(e)
    if args.read_only and args.lease_namespace:
        return flags.fail("join: --read-only and --lease-namespace: a reader holds no Lease")
    say = _say(args.member)
    try:
        text = dump(join(member, args.member, cluster, args.namespace, args.token_duration, say,
                         args.lease_namespace, args.read_only))
        if args.admission_policy and not args.read_only:  # after join's check of the member name
            guard(member, args.namespace, args.member, say)
        if args.output:
            _write(args.output, text)
            say(f"kubeconfig written to {'stdout' if args.output == '-' else args.output}")
        if ctl is not None:
            ns, name = args.secret
            state = put_key(ctl, ns, name, args.member, text)
            _say(args.member, " (controller cluster)")(f"secret {ns}/{name} key {args.member}: {state}")
    except WrongMember as e:
        return _wrong("join", args.member, e)
    except (ApiError, OSError, Refused) as e:
        flags.tell(f"mcsdns join: {args.member}: {explain(e) if isinstance(e, ApiError) else e}")
        return 1
    return 0


def _lease_cluster(args: argparse.Namespace, ctl: Client | None) -> tuple[Client | None, str]:
    """The cluster holding the controller's Leases: --lease-kubeconfig's, else the
    controller cluster; and how the output names it."""
    if args.lease_kubeconfig:
        return _client(args.lease_kubeconfig, args.lease_context, "--lease-kubeconfig", "lease"), \
            f"the lease cluster (--lease-kubeconfig {args.lease_kubeconfig})"
    return ctl, f"the controller cluster (--controller-kubeconfig {args.controller_kubeconfig})"


def leave_main(args: argparse.Namespace) -> int:
    try:
        member, ctl = _clients(args)
        lease, where = _lease_cluster(args, ctl)
    except ConfigError as e:
        return flags.fail(e)
    say = _say(args.member)
    lease_ns = [args.lease_namespace] if args.lease_namespace else list(LEASE_NAMESPACES)
    try:
        check_leave(member, args.member, args.namespace, args.force)
        check(member, [exports_ask(f"the member (--kubeconfig {args.kubeconfig or 'default'})")])
        if lease is not None:
            check(lease, lease_asks(where, lease_ns))
        if ctl is not None:
            ns, name = args.secret
            gone = "deleted" if drop_key(ctl, ns, name, args.member) else "not found"
            _say(args.member, " (controller cluster)")(f"secret {ns}/{name} key {args.member}: {gone}")
        if args.output:
            gone = "deleted" if Path(args.output).exists() else "not found"
            Path(args.output).unlink(missing_ok=True)
            say(f"kubeconfig {args.output}: {gone}")
        def marks() -> None:  # the controller's access is gone: neither is written again
            mark_exports(member, args.member, say)
            if lease is None:
                say("member lease: not looked for (give --lease-kubeconfig or --controller-kubeconfig)")
            else:
                cluster = "lease" if args.lease_kubeconfig else "controller"
                drop_lease(lease, args.member, lease_ns, _say(args.member, f" ({cluster} cluster)"))

        revoke(member, args.member, args.namespace, say, args.lease_namespace, args.force, marks)
        if args.purge_imports:
            purge_imports(member, say)
    except WrongMember as e:
        return _wrong("leave", args.member, e)
    except (ApiError, OSError, Denied) as e:
        flags.tell(f"mcsdns leave: {args.member}: {explain(e) if isinstance(e, ApiError) else e}")
        return 1
    return 0
