#!/usr/bin/env python3
"""Hostile query streams against a live server, with figures: RSS growth and
/metrics series added.

    python robustness/memory_abuse.py --count 3000

Streams (each of `--count` distinct queries, answered one by one):
- big: a valid question with one EDNS option of 60,000 random octets (UDP, and
  TCP with a tenth of the count);
- names: 255-octet random names under the zone (NXDOMAIN, normal size);
- case: random 0x20 case of a served name (the same answer, distinct bytes);
- qtypes: random query types (each a potential metric label value);
- alltypes: every query type (0-65535) at each of three names (two served, one
  not), sent with a window of queries outstanding (not one by one; `--count`
  does not apply).
The server's RSS is read from /proc after each stream; the figures are the
growth over the server's RSS once warmed up. After each stream /metrics is
read five times, timed, while another thread asks a served name every 2 ms:
the scrape's time and the slowest DNS answer meanwhile.
"""

from __future__ import annotations

import argparse
import os
import random
import select
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.helpers import EXAMPLE, Server, run_server  # noqa: E402

ZONE = b"\x0aclusterset\x05local\x00"
SERVED = b"\x03web\x04shop\x03svc" + ZONE
THREE_NAMES = (SERVED, b"\x03api\x04shop\x03svc" + ZONE, b"\x04nope\x04shop\x03svc" + ZONE)
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


def send_window(srv: Server, msgs: Iterator[bytes], window: int = 128, got: list[bytes] | None = None) -> int:
    """Send the queries with up to `window` unanswered at a time (those unanswered
    for 0.2 s are given up); the number answered (the answers appended to `got`)."""
    answered = outstanding = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.connect(srv.addr)
        s.setblocking(False)
        more = True
        while more or outstanding:
            while more and outstanding < window:
                m = next(msgs, None)
                if m is None:
                    more = False
                    break
                s.send(m)
                outstanding += 1
            if not select.select([s], [], [], 0.2)[0]:
                outstanding = 0
                continue
            while True:
                try:
                    r = s.recv(65535)
                except BlockingIOError:
                    break
                if got is not None:
                    got.append(r)
                answered += 1
                outstanding = max(0, outstanding - 1)
    return answered


def scrape_cost(srv: Server, scrapes: int = 5) -> tuple[float, float]:
    """The median time of `scrapes` /metrics reads (ms), and the slowest answer (ms) to
    a served name asked every 2 ms meanwhile."""
    stop = threading.Event()
    slowest = [0.0]

    def ask() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(2.0)
            i = 0
            while not stop.is_set():
                i += 1
                t0 = time.monotonic()
                s.sendto(query(i & 0xFFFF, SERVED), srv.addr)
                try:
                    s.recv(65535)
                except TimeoutError:
                    pass
                slowest[0] = max(slowest[0], time.monotonic() - t0)
                time.sleep(0.002)

    times = []
    t = threading.Thread(target=ask)
    t.start()
    try:
        for _ in range(scrapes):
            time.sleep(0.02)
            t0 = time.monotonic()
            srv.http("/metrics")
            times.append(time.monotonic() - t0)
    finally:
        stop.set()
        t.join()
    return statistics.median(times) * 1000, slowest[0] * 1000


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
        "alltypes": lambda srv: send_window(srv, (query(t, name, t) for name in THREE_NAMES
                                                  for t in range(65536))),
    }
    out: dict[str, tuple[int, int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, run_server(
            ["--manifests", str(EXAMPLE), *extra], Path(tmp)) as srv:
        pid = srv.proc.pid
        send_udp(srv, (query(i, SERVED, t) for i in range(200) for t in (1, 28, 33)))  # warm up
        base_rss, base_lines = rss_kib(pid), metric_lines(srv)
        scrape, slowest = scrape_cost(srv)
        print(f"warm     scrape {scrape:6.1f} ms, slowest DNS answer meanwhile {slowest:6.1f} ms", flush=True)
        for name in args.streams.split(","):
            answered = streams[name](srv)
            out[name] = (answered, rss_kib(pid) - base_rss, metric_lines(srv) - base_lines)
            scrape, slowest = scrape_cost(srv)
            print(f"{name:8} answered {answered:6}  RSS +{out[name][1] / 1024:7.1f} MiB  "
                  f"metric lines +{out[name][2]}  scrape {scrape:6.1f} ms, slowest DNS answer meanwhile "
                  f"{slowest:6.1f} ms", flush=True)
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
