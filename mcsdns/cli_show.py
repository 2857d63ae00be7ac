"""`mcsdns show`'s flags; mcsdns.show is imported only when the command runs."""

from __future__ import annotations

import argparse

from . import flags
from .cli_diagnose import add_cluster_args


def _run(args: argparse.Namespace) -> int:
    from .show.cli import main

    return main(args)


def add_parser(sub: argparse._SubParsersAction[flags.Parser]) -> None:
    s = sub.add_parser("show", help="list what is exported and imported where (read-only)",
                       description="`mcsdns show`: per service, the members that export and import it, its "
                                   "ClusterSetIPs, conflicts and locality; per member, whether its API "
                                   "answers and when its credential expires. Changes nothing.")
    add_cluster_args(s, "its exports and imports", "every member named")
    s.add_argument("--output", choices=("table", "json"), default="table",
                   help="table: services, then members (default); json: one object")
    s.add_argument("--json", dest="output", action="store_const", const="json", help="as --output json")
    s.set_defaults(func=_run)
