"""`mcsdns diagnose`'s flags; mcsdns.diagnose is imported only when the command runs."""

from __future__ import annotations

import argparse

from . import flags
from .kube.apiclient.keys import Key
from .kube.names import is_dns_label


def _run(args: argparse.Namespace) -> int:
    from .diagnose.cli import main

    return main(args)


def service(s: str) -> Key:
    """NAME.NAMESPACE -> (namespace, name)."""
    name, _, ns = s.partition(".")
    if not (is_dns_label(name) and is_dns_label(ns)):
        raise argparse.ArgumentTypeError(f"{s}: expected NAME.NAMESPACE (a service and its namespace)")
    return ns, name


def account(s: str) -> tuple[str, str]:
    """NAMESPACE/NAME of a ServiceAccount."""
    ns, sep, name = s.partition("/")
    if not sep or not is_dns_label(ns) or not all(is_dns_label(p) for p in name.split(".")):
        raise argparse.ArgumentTypeError(f"{s}: expected NAMESPACE/NAME (a namespace, then a DNS "
                                         "subdomain name)")
    return ns, name


def add_cluster_args(p: argparse.ArgumentParser, one: str, clusterset: str) -> None:
    """The clusters to read, as `diagnose` and `show` take them (mcsdns.diagnose.members)."""
    p.add_argument("--kubeconfig", metavar="PATH", help="one cluster: its kubeconfig (default $KUBECONFIG "
                   f"or ~/.kube/config); {one}. With --members-secret: the controller's cluster")
    p.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current one)")
    p.add_argument("--cluster", action="append", default=[], metavar="NAME=KUBECONFIG[@CONTEXT]",
                   help="a member of a clusterset, as `mcsdns controller` takes them (repeatable); "
                        f"{clusterset}")
    p.add_argument("--members-secret", type=account, metavar="NAMESPACE/NAME",
                   help="every member: the controller's members Secret (e.g. mcsdns-system/mcsdns-members), "
                        "read from the --kubeconfig/--context cluster, which is member `local`")
    p.add_argument("--members-dir", metavar="DIR", help="every member: a folder of member kubeconfigs, "
                   "as `mcsdns controller --members-dir` takes it (with --cluster: more members)")
    p.add_argument("--service-account", type=account, metavar="NAMESPACE/NAME",
                   help="check the permissions of this ServiceAccount (default: deploy/'s, "
                        "mcsdns-system/mcsdns for serve, mcsdns-system/mcsdns-controller or "
                        "mcsdns-member for the controller, when it exists; else the caller's)")


def add_parser(sub: argparse._SubParsersAction[flags.Parser]) -> None:
    d = sub.add_parser("diagnose", help="find why a name does not resolve (read-only checks)",
                       description="`mcsdns diagnose`: check a cluster or a clusterset, from the "
                                   "objects and permissions to the DNS answers; changes nothing.")
    d.add_argument("service", nargs="?", type=service, metavar="NAME.NAMESPACE",
                   help="check only this service")
    add_cluster_args(d, "checks what `mcsdns serve` needs", "checks what the controller needs")
    d.add_argument("--dns", action="append", default=[], metavar="[NAME=]HOST:PORT",
                   help="also ask this member's mcsdns the names its objects imply (one cluster: "
                        "HOST:PORT; a clusterset: NAME=HOST:PORT, repeatable)")
    d.add_argument("--zone", type=flags.zone, default="clusterset.local", help="the zone mcsdns serves")
    d.add_argument("--output", choices=("text", "json"), default="text",
                   help="text: one line per check (default); json: the checks as one object")
    d.set_defaults(func=_run)
