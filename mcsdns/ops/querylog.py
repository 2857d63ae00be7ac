"""--log-queries: one line per query, as CoreDNS' `log` plugin writes it:

    127.0.0.1:53124 - 4711 "A IN web.shop.svc.clusterset.local. udp 59 false 1232" NOERROR qr,aa 98 0.000123s

client address and port, ID, "type class name protocol request-size DO-bit
bufsize", rcode, response flags, response size and duration. The same values
are the line's JSON fields (client, port, id, qtype, qclass, qname, proto,
size, do, bufsize, rcode, rflags, rsize, duration in seconds). A message the server does not answer has rcode,
flags and size `-`.
"""

from __future__ import annotations

import logging
from typing import Any

from ..dns.errors import FormErr
from ..dns.names import decode_name, read_name
from ..dns.types import QTYPE_LABELS, RCODE_NAMES

log = logging.getLogger("mcsdns.query")

_CLASSES = {1: "IN", 3: "CH", 4: "HS", 254: "NONE", 255: "ANY"}
_FLAGS = (("qr", 0x8000), ("aa", 0x0400), ("tc", 0x0200), ("rd", 0x0100), ("ra", 0x0080),
          ("ad", 0x0020), ("cd", 0x0010))


def _question(q: bytes) -> tuple[str, int, int, int]:
    """Name, type, class of the first question and its end (raises IndexError or
    FormErr on a message without a plain one: compressed, or over 255 octets)."""
    name, i = read_name(q, 12, "question")
    if i + 4 > len(q):
        raise IndexError
    return decode_name(name), (q[i] << 8) | q[i + 1], (q[i + 2] << 8) | q[i + 3], i + 4


def _client(peer: Any) -> tuple[str, int]:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return str(peer), 0


def fields(query: bytes, response: bytes | None, proto: str, peer: Any, elapsed_ns: int) -> dict[str, Any]:
    """The values of one query's log line."""
    host, port = _client(peer)
    name, qtype, qclass, do, bufsize = "-", "-", "-", False, 512
    try:
        name, t, c, end = _question(query)
        qtype = QTYPE_LABELS.get(t, f"TYPE{t}")
        qclass = _CLASSES.get(c, f"CLASS{c}")
        if query[10:12] != b"\x00\x00" and query[end:end + 3] == b"\x00\x00\x29":  # OPT first
            bufsize = max(512, (query[end + 3] << 8) | query[end + 4])
            do = bool(query[end + 7] & 0x80)
    except (IndexError, FormErr):
        pass
    rcode, flags, rsize = "-", "-", 0
    if response is not None and len(response) >= 4:
        code = response[3] & 0xF
        rcode = RCODE_NAMES.get(code, f"RCODE{code}")
        bits = (response[2] << 8) | response[3]
        flags = ",".join(n for n, b in _FLAGS if bits & b) or "-"
        rsize = len(response)
    return {"client": host, "port": port, "id": int.from_bytes(query[:2], "big") if len(query) >= 2 else 0,
            "qtype": qtype, "qclass": qclass, "qname": name, "proto": proto, "size": len(query), "do": do,
            "bufsize": bufsize, "rcode": rcode, "rflags": flags, "rsize": rsize,
            "duration": elapsed_ns / 1e9}


def log_query(query: bytes, response: bytes | None, proto: str, peer: Any, elapsed_ns: int) -> None:
    """Log one query and its response (`response` None: none sent)."""
    f = fields(query, response, proto, peer, elapsed_ns)
    host = f"[{f['client']}]" if ":" in f["client"] else f["client"]
    dur = f"{f['duration']:.9f}".rstrip("0").rstrip(".") + "s"
    log.info('%s:%d - %d "%s %s %s %s %d %s %d" %s %s %d %s', host, f["port"], f["id"], f["qtype"],
             f["qclass"], f["qname"], proto, f["size"], "true" if f["do"] else "false", f["bufsize"],
             f["rcode"], f["rflags"], f["rsize"], dur, extra=f)
