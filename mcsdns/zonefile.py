"""The zone as RFC 1035 master-file text (what `mcsdns records` prints)."""

from __future__ import annotations

import ipaddress
import struct

from .wire import AAAA, NS, SOA, SRV, TXT, TYPE_NAMES, A, decode_name
from .zone import Zone


def _name_at(rdata: bytes, i: int) -> tuple[str, int]:
    end = i
    while rdata[end]:
        end += rdata[end] + 1
    return decode_name(rdata[i:end + 1]), end + 1


def rdata_text(rtype: int, rdata: bytes) -> str:
    if rtype in (A, AAAA):
        return str(ipaddress.ip_address(rdata))
    if rtype == SRV:
        prio, weight, port = struct.unpack_from("!HHH", rdata)
        return f"{prio} {weight} {port} {_name_at(rdata, 6)[0]}"
    if rtype == NS:
        return _name_at(rdata, 0)[0]
    if rtype == SOA:
        mname, i = _name_at(rdata, 0)
        rname, i = _name_at(rdata, i)
        return f"{mname} {rname} " + " ".join(str(v) for v in struct.unpack_from("!IIIII", rdata, i))
    if rtype == TXT:
        out, i = [], 0
        while i < len(rdata):
            n = rdata[i]
            out.append('"' + rdata[i + 1:i + 1 + n].decode("utf-8", "replace") + '"')
            i += n + 1
        return " ".join(out)
    return f"\\# {len(rdata)} {rdata.hex()}"


def zone_text(zone: Zone) -> str:
    """Every RRset in the zone; names in DNSSEC canonical order, apex first."""
    def order(name: bytes) -> list[str]:
        return decode_name(name).lower().split(".")[::-1]

    lines = [f"$ORIGIN {decode_name(zone.origin)}", f"$TTL {zone.ttl}"]
    for name in sorted(zone.names, key=order):
        node = zone.names[name]
        for rtype in sorted(node.rrsets):
            for rd in node.rrsets[rtype].rdatas:
                lines.append(f"{decode_name(name)}\t{zone.ttl}\tIN\t{TYPE_NAMES[rtype]}\t"
                             f"{rdata_text(rtype, rd)}")
    return "\n".join(lines) + "\n"
