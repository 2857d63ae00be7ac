"""The baseline: what a Python developer writes first with dnslib.

A `BaseResolver` over a dict built from the generated zone file, served by
dnslib's `DNSServer` (socketserver, a thread per request) on UDP and TCP.
Per query it decodes a `DNSRecord`, builds a reply object and packs it.

    python bench/dnslib_server.py --zone OUT/clusterset.local.zone --port 5300
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

from dnslib import QTYPE, RCODE, RR, DNSLabel, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer


class ZoneDictResolver(BaseResolver):  # type: ignore[misc]
    """Authoritative answers from {name: {qtype: [RR]}}: NXDOMAIN/NODATA with SOA."""

    def __init__(self, zone_text: str, origin: str = "clusterset.local.") -> None:
        self.origin = DNSLabel(origin)
        self.names: dict[DNSLabel, dict[int, list[Any]]] = {}
        for rr in RR.fromZone(zone_text):
            self.names.setdefault(rr.rname, {}).setdefault(rr.rtype, []).append(rr)
            # empty non-terminals exist too (NODATA, not NXDOMAIN)
            label = rr.rname
            while label != self.origin and len(label.label) > len(self.origin.label):
                label = DNSLabel(label.label[1:])
                self.names.setdefault(label, {})
        self.soa = self.names[self.origin][QTYPE.SOA][0]

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        reply = request.reply()
        reply.header.ra = reply.header.ad = 0
        qname, qtype = request.q.qname, request.q.qtype
        if not qname.matchSuffix(self.origin):
            reply.header.aa = 0
            reply.header.rcode = RCODE.REFUSED
            return reply
        node = self.names.get(qname)
        if node is None:
            reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(self.soa)
            return reply
        rrs = node.get(qtype)
        if not rrs:
            reply.add_auth(self.soa)
            return reply
        for rr in rrs:
            reply.add_answer(rr)
            if qtype == QTYPE.SRV:
                for extra in self.names.get(rr.rdata.target, {}).get(QTYPE.A, []):
                    reply.add_ar(extra)
        return reply


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zone", type=Path, required=True, help="zone file (from gen_clusterset.py)")
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args(argv)
    resolver = ZoneDictResolver(a.zone.read_text())
    quiet = DNSLogger("-request,-reply,-truncated,-error,-recv,-send,-data", False)
    servers = [DNSServer(resolver, a.address, a.port, tcp=tcp, logger=quiet) for tcp in (False, True)]
    for s in servers:
        s.start_thread()
    print(f"dnslib server ready on {a.address}:{a.port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    for s in servers:
        s.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
