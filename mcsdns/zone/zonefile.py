"""The zone as RFC 1035 master-file text (what `mcsdns records` prints)."""

from __future__ import annotations

from ..dns import rdata
from ..dns.names import decode_name
from ..dns.types import TYPE_NAMES
from .rrsets import rrsets_at
from .zone import Zone


def zone_text(zone: Zone) -> str:
    """Every RRset in the zone; names in DNSSEC canonical order, apex first."""
    def order(name: bytes) -> list[str]:
        return decode_name(name).lower().split(".")[::-1]

    zone.complete()
    lines = [f"$ORIGIN {decode_name(zone.origin)}", f"$TTL {zone.ttl}"]
    for name in sorted(zone.names, key=order):
        rrsets = rrsets_at(zone.names[name])
        for rtype in sorted(rrsets):
            for rd in rrsets[rtype].records():
                lines.append(f"{decode_name(name)}\t{zone.ttl}\tIN\t{TYPE_NAMES[rtype]}\t"
                             f"{rdata.text(rtype, rd)}")
    return "\n".join(lines) + "\n"
