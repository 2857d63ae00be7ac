"""`mcsdns diagnose`'s flags; mcsdns.diagnose is imported only when the command runs."""

from __future__ import annotations

import argparse

from . import flags
from .kube.keys import Key
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


def add_parser(sub: argparse._SubParsersAction[flags.Parser]) -> None:
    d = sub.add_parser("diagnose", help="find why a name does not resolve (read-only checks)",
                       description="`mcsdns diagnose`: check a cluster or a clusterset, from the "
                                   "objects and permissions to the DNS answers; changes nothing.")
    d.add_argument("service", nargs="?", type=service, metavar="NAME.NAMESPACE",
                   help="check only this service")
    d.add_argument("--kubeconfig", metavar="PATH", help="one cluster: its kubeconfig (default $KUBECONFIG "
                   "or ~/.kube/config); checks what `mcsdns serve` needs")
    d.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current one)")
    d.add_argument("--cluster", action="append", default=[], metavar="NAME=KUBECONFIG[@CONTEXT]",
                   help="every member of a clusterset, as `mcsdns controller` takes them (repeatable); "
                        "checks what the controller needs")
    d.add_argument("--dns", action="append", default=[], metavar="[NAME=]HOST:PORT",
                   help="also ask this member's mcsdns the names its objects imply (one cluster: "
                        "HOST:PORT; a clusterset: NAME=HOST:PORT, repeatable)")
    d.add_argument("--zone", type=flags.zone, default="clusterset.local", help="the zone mcsdns serves")
    d.add_argument("--output", choices=("text", "json"), default="text",
                   help="text: one line per check (default); json: the checks as one object")
    d.set_defaults(func=_run)
