"""Generators of hostile DNS messages for fuzzing the query path.

`hostile(rng)` returns one message built from a valid query by one or more
structured mutations (truncation, counts, label lengths, compression loops
and forward pointers, over-long names, bad OPT records, every opcode and
class) or plain random bytes.
"""

from __future__ import annotations

import random
import struct

NAMES = ["web.shop.svc.clusterset.local.", "db.shop.svc.clusterset.local.",
         "_http._tcp.web.shop.svc.clusterset.local.", "clusterset.local.", "example.com.",
         "db-0.cluster-a.db.shop.svc.clusterset.local.", "nope.svc.clusterset.local.", "."]
TYPES = [1, 2, 6, 12, 16, 28, 33, 41, 251, 252, 255, 65, 0, 65535]


def wire_name(name: str) -> bytes:
    out = b""
    for label in name.strip(".").split("."):
        if label:
            out += bytes((len(label),)) + label.encode()
    return out + b"\x00"


def query(rng: random.Random, name: str | None = None, edns: bool | None = None) -> bytes:
    name = name or rng.choice(NAMES)
    flags = rng.choice([0x0100, 0x0000, 0x0110])
    edns = rng.random() < 0.5 if edns is None else edns
    head = struct.pack("!HHHHHH", rng.randrange(65536), flags, 1, 0, 0, 1 if edns else 0)
    q = wire_name(name) + struct.pack("!HH", rng.choice(TYPES), rng.choice([1, 1, 1, 3, 255, 254]))
    opt = b""
    if edns:
        opt = b"\x00" + struct.pack("!HHIH", 41, rng.choice([512, 1232, 4096, 0, 65535]),
                                    rng.choice([0, 0x8000, 0x00010000]), 0)
    return head + q + opt


def _mutate(rng: random.Random, msg: bytes) -> bytes:  # noqa: C901 - one branch per kind of mutation
    m = bytearray(msg)
    kind = rng.randrange(14)
    if kind == 0 and len(m) > 1:  # truncate anywhere
        return bytes(m[:rng.randrange(len(m))])
    if kind == 1 and len(m) >= 12:  # header counts
        off = rng.choice([4, 6, 8, 10])
        m[off:off + 2] = struct.pack("!H", rng.choice([0, 2, 3, 255, 65535]))
    elif kind == 2 and len(m) > 3:  # opcode / QR / flags
        m[2] = rng.randrange(256)
        m[3] = rng.randrange(256)
    elif kind == 3 and len(m) > 12:  # label length over 63 / random length byte
        m[12] = rng.choice([64, 65, 127, 128, 191, 255, rng.randrange(256)])
    elif kind == 4:  # compression loop pointing at itself in the question
        return bytes(m[:12]) + b"\xc0\x0c" + struct.pack("!HH", 1, 1)
    elif kind == 5:  # forward pointer
        return bytes(m[:12]) + b"\x03abc\xc0\x20" + struct.pack("!HH", 1, 1) + b"\x00" * 20
    elif kind == 6:  # name over 255 octets
        name = (b"\x3f" + b"a" * 63) * 5 + b"\x00"
        return bytes(m[:12]) + name + struct.pack("!HH", 1, 1)
    elif kind == 7:  # bad OPT: wrong owner, bad rdlength, version 1..255, options garbage
        base = query(rng, edns=False)
        base = base[:10] + b"\x00\x01" + base[12:]
        variant = rng.randrange(4)
        if variant == 0:
            return base + b"\x01a\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
        if variant == 1:
            return base + b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 10) + b"\x00\x0a"
        if variant == 2:
            return base + b"\x00" + struct.pack("!HHIH", 41, 1232, rng.randrange(1, 256) << 16, 0)
        return base + b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 4) + b"\x00\x08\x00\x00"
    elif kind == 8:  # two OPTs
        base = query(rng, edns=True)
        return base[:10] + b"\x00\x02" + base[12:] + base[-11:]
    elif kind == 9:  # trailing garbage
        return bytes(m) + rng.randbytes(rng.randrange(1, 40))
    elif kind == 10 and len(m) > 12:  # bit flips
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(m))
            m[i] ^= 1 << rng.randrange(8)
    elif kind == 11:  # zero byte inside a label, upper case, odd bytes
        return bytes(m[:12]) + b"\x05ab\x00cd\x0aclusterset\x05local\x00" + struct.pack("!HH", 1, 1)
    elif kind == 12 and len(m) > 2:  # every opcode
        m[2] = (m[2] & 0x87) | (rng.randrange(16) << 3)
    else:  # random bytes
        return rng.randbytes(rng.randrange(0, 600))
    return bytes(m)


def hostile(rng: random.Random) -> bytes:
    msg = query(rng)
    for _ in range(rng.randrange(1, 4)):
        msg = _mutate(rng, msg)
    return msg


def _opt(size: int, ttl: int = 0, rdata: bytes = b"") -> bytes:
    """An OPT record: root owner, UDP size, extended RCODE/version/flags, options."""
    return b"\x00" + struct.pack("!HHIH", 41, size, ttl, len(rdata)) + rdata


def odd_edns(rng: random.Random) -> bytes:
    """An unusual OPT record: a big or small UDP size, DO, options, version > 0."""
    size = rng.choice([0, 511, 512, 1232, 1233, 4096, 65535])
    ttl = rng.choice([0, 0x8000, 0x00010000, 0x00FF8000, rng.randrange(1 << 32)])
    rdata = rng.choice([b"", b"\x00\x0a\x00\x08" + rng.randbytes(8),  # a client cookie
                        b"\x00\x0c\x00\x10" + bytes(16),  # padding
                        struct.pack("!HH", rng.randrange(65536), 3) + b"abc", b"\x00\x08\x00"])
    return _opt(size, ttl, rdata)


def variant(rng: random.Random, msg: bytes) -> bytes:
    """`msg` (a query with an uncompressed question) changed the way a client might:
    another ID (the same cache key), flags, QTYPE, name case, trailing bytes, EDNS."""
    m = bytearray(msg)
    if len(m) < 17:
        return bytes(m)
    qend = m.find(0, 12) + 5
    kind = rng.randrange(8)
    if kind <= 1 or qend < 17:  # another ID only
        m[0:2] = rng.randbytes(2)
    elif kind == 2:  # RD, CD, AD, or any header flag
        m[2] ^= rng.choice([0x01, 0x80, 0x04, 0x02, rng.randrange(256)])
        m[3] ^= rng.choice([0x10, 0x20, 0x40, 0])
    elif kind == 3:  # another QTYPE
        m[qend - 4:qend - 2] = struct.pack("!H", rng.choice(TYPES))
    elif kind == 4:  # name case
        for i in range(13, qend - 5):
            if rng.random() < 0.5 and 0x61 <= (m[i] | 0x20) <= 0x7A:
                m[i] ^= 0x20
    elif kind == 5:  # trailing bytes
        m += rng.randbytes(rng.randrange(1, 40))
    elif kind == 6:  # one odd OPT instead of what it had
        m = m[:qend] + bytearray(odd_edns(rng))
        m[10:12] = b"\x00\x01"
    else:  # two OPTs
        m = m[:qend] + bytearray(odd_edns(rng) + odd_edns(rng))
        m[10:12] = b"\x00\x02"
    return bytes(m)
