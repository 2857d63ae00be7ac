"""The 12-octet message header: flag bits, and the one builder of response headers.

A response copies the query's opcode, RD and CD (RFC 1035 4.1.1, RFC 6840 5.9) and
sets QR, AA where we are the authority, TC when truncated, and the rcode's low bits.
"""

from __future__ import annotations

import struct

QR = 0x8000
AA = 0x0400
TC = 0x0200
RD = 0x0100
CD = 0x0010
OPCODE = 0x7800
ECHOED = OPCODE | RD | CD  # what a response copies from its query
_HEADER = struct.Struct("!2sHHHHH")
_COUNTS = struct.Struct("!HHHH")
SIZE = 12


def opcode(flags: int) -> int:
    """The opcode field of a header's flags."""
    return (flags & OPCODE) >> 11


def response_flags(query_flags: int, rcode: int, aa: bool = False, tc: bool = False) -> int:
    """The flags of our response to a query with `query_flags`."""
    return (QR | (query_flags & ECHOED) | (AA if aa else 0) | (TC if tc else 0)) | (rcode & 0xF)


def pack(qid: bytes, flags: int, qd: int = 0, an: int = 0, ns: int = 0, ar: int = 0) -> bytes:
    """A header: ID (2 octets as received), flags, and the four counts."""
    return _HEADER.pack(qid, flags, qd, an, ns, ar)


def pack_after_id(flags: int, qd: int, an: int, ns: int, ar: int) -> bytes:
    """A header without its ID: what a pre-rendered answer keeps (the ID is the query's)."""
    return flags.to_bytes(2, "big") + _COUNTS.pack(qd, an, ns, ar)


def flags_of(msg: bytes) -> int:
    """The flags of a message of at least 4 octets."""
    return (msg[2] << 8) | msg[3]


def error_response(query: bytes, rcode: int) -> bytes:
    """Header-only response (no question) for a message we could not parse."""
    return pack(query[:2], response_flags(flags_of(query), rcode))


def with_additional(msg: bytes, n: int = 1) -> bytes:
    """msg's header with ARCOUNT raised by `n` (records about to be appended)."""
    ar = struct.unpack_from("!H", msg, 10)[0] + n
    return msg[:10] + struct.pack("!H", ar) + msg[12:]
