"""Time one cached answer on the C path alone: 64 copies of a query per
`_batchio.serve()` over a Unix datagram pair, answered from the handler's
response cache (client send and receive included). Prints the best of 7 runs
in ns per query. To compare two checkouts, run it with each on PYTHONPATH:

    PYTHONSAFEPATH=1 PYTHONPATH=DIR taskset -c 0 python bench/cached_hit.py db.shop.svc.clusterset.local. A
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from pathlib import Path

import dns.message

from mcsdns.publish.pipeline import Pipeline
from mcsdns.roles.loader import loader_for
from mcsdns.serveconfig import Config
from mcsdns.transport import _batchio

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "clusterset"


async def load(manifests: Path) -> Pipeline:
    loader = loader_for(Config(listen=[], manifests=str(manifests)))
    assert not await loader.load_once(10.0)
    return loader.pipeline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("rdtype", nargs="?", default="A")
    ap.add_argument("--bursts", type=int, default=3000)
    ap.add_argument("--manifests", type=Path, default=EXAMPLE)
    a = ap.parse_args()
    h = asyncio.run(load(a.manifests)).handler
    srv, cli = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.setblocking(False)
    cli.setblocking(False)
    q = dns.message.make_query(a.name, a.rdtype)
    q.flags = 0
    wire = q.to_wire()
    table = h.cache.tables[False]

    def burst() -> int:
        for _ in range(64):
            cli.send(wire)
        n, _, _ = _batchio.serve(srv.fileno(), h.respond, print, table, h.cache.serial)
        for _ in range(n):
            cli.recv(65536)
        return int(n)

    for _ in range(100):
        burst()
    best = float("inf")
    for _ in range(7):
        t, total = time.perf_counter_ns(), 0
        for _ in range(a.bursts):
            total += burst()
        best = min(best, (time.perf_counter_ns() - t) / total)
    print(f"{_batchio.__file__}: {best:.0f} ns per query", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
