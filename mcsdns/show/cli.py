"""`mcsdns show`: members (diagnose.members) → inventory → table or JSON; exit 0, or 2 for
bad configuration."""

from __future__ import annotations

import argparse
import sys

from .. import flags
from ..diagnose import members
from ..ops.errors import ConfigError
from . import inventory, render


def main(args: argparse.Namespace) -> int:
    try:
        cs = members.read(args)
    except ConfigError as e:
        return flags.fail(e)
    inv = inventory.read(cs)
    for r in cs.problems:
        flags.tell(f"mcsdns show: {r.cluster}: {r.message}")
    sys.stdout.write(render.as_json(inv) if args.output == "json" else render.table(inv))
    return 0
