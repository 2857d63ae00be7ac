#!/usr/bin/env python3
"""Hostile query streams against a live server, with figures: RSS growth and
/metrics series added.

    python robustness/memory_abuse.py --count 3000

Streams (each of `--count` distinct queries, answered one by one):
- big: a valid question with one EDNS option of 60,000 random octets (UDP, and
  TCP with a tenth of the count);
- names: 255-octet random names under the zone (NXDOMAIN, normal size);
- case: random 0x20 case of a served name (the same answer, distinct bytes);
- qtypes: random query types (each a potential metric label value).
The server's RSS is read from /proc after each stream; the figures are the
growth over the server's RSS once warmed up.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers import EXAMPLE, Server, run_server  # noqa: E402

ZONE = b"\x0aclusterset\x05local\x00"
SERVED = b"\x03web\x04shop\x03svc" + ZONE
OPT_HEAD = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00"  # root, OPT, 1232, no ext-rcode/version/flags


def query(qid: int, qname: bytes, qtype: int = 1, option: bytes | None = None) -> bytes:
    """A query for qname/qtype, with an OPT record carrying `option` (code 65001) if given."""
    ar = 1 if option is not None else 0
    msg = struct.pack("!HHHHHH", qid, 0, 1, 0, 0, ar) + qname + struct.pack("!HH", qtype, 1)
    if option is not None:
        opt = struct.pack("!HH", 65001, len(option)) + option
        msg += OPT_HEAD + struct.pack("!H", len(opt)) + opt
    return msg


def random_name(rng: random.Random) -> bytes:
    """A 255-octet wire name under the zone, random labels."""
    out = b""
    room = 255 - len(ZONE)
    while room > 1:
        n = min(63, room - 1)
        label = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))
        out += bytes((n,)) + label
        room -= n + 1
    return out + ZONE


def random_case(rng: random.Random, name: bytes) -> bytes:
    return bytes(c ^ 0x20 if 97 <= c <= 122 and rng.random() < 0.5 else c for c in name)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def metric_lines(srv: Server) -> int:
    _, text = srv.http("/metrics")
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def send_udp(srv: Server, msgs: Iterator[bytes]) -> int:
    """Send each query and wait for its answer; the number answered."""
    answered = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        s.settimeout(1.0)
        for m in msgs:
            s.sendto(m, srv.addr)
            try:
                s.recv(65535)
                answered += 1
            except TimeoutError:
                pass
    return answered


def send_tcp(srv: Server, msgs: Iterator[bytes]) -> int:
    answered = 0
    with socket.create_connection(srv.addr, timeout=2) as s:
        f = s.makefile("rb")
        for m in msgs:
            s.sendall(struct.pack("!H", len(m)) + m)
            head = f.read(2)
            if len(head) < 2:
                break
            f.read(struct.unpack("!H", head)[0])
            answered += 1
    return answered


def run(args: argparse.Namespace, extra: list[str]) -> dict[str, tuple[int, int, int]]:
    """stream -> (answered, RSS growth KiB, metric lines added), each from the warm baseline."""
    rng = random.Random(args.seed)
    n = args.count
    streams: dict[str, Callable[[Server], int]] = {
        "big": lambda srv: send_udp(srv, (query(i & 0xFFFF, SERVED, 1, rng.randbytes(60_000))
                                          for i in range(n))),
        "big-tcp": lambda srv: send_tcp(srv, (query(i & 0xFFFF, SERVED, 1, rng.randbytes(60_000))
                                              for i in range(n // 10))),
        "names": lambda srv: send_udp(srv, (query(i & 0xFFFF, random_name(rng)) for i in range(n))),
        "case": lambda srv: send_udp(srv, (query(i & 0xFFFF, random_case(rng, SERVED)) for i in range(n))),
        "qtypes": lambda srv: send_udp(srv, (query(i & 0xFFFF, SERVED, rng.randrange(256, 65280))
                                             for i in range(n))),
    }
    out: dict[str, tuple[int, int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, run_server(
            ["--manifests", str(EXAMPLE), *extra], Path(tmp)) as srv:
        pid = srv.proc.pid
        send_udp(srv, (query(i, SERVED, t) for i in range(200) for t in (1, 28, 33)))  # warm up
        base_rss, base_lines = rss_kib(pid), metric_lines(srv)
        for name in args.streams.split(","):
            answered = streams[name](srv)
            out[name] = (answered, rss_kib(pid) - base_rss, metric_lines(srv) - base_lines)
            print(f"{name:8} answered {answered:6}  RSS +{out[name][1] / 1024:7.1f} MiB  "
                  f"metric lines +{out[name][2]}", flush=True)
        if srv.proc.poll() is not None:
            print("server died", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=3000, help="queries per stream")
    ap.add_argument("--streams", default="big,big-tcp,names,case,qtypes")
    ap.add_argument("--seed", type=int, default=1)
    args, extra = ap.parse_known_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run(args, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
