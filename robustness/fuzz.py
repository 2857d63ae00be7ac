#!/usr/bin/env python3
"""Fuzz the query path with hostile messages; print counts, crashes and timings.

In process: every message goes through Handler.respond over "UDP" and "TCP";
a response must keep the query ID, have QR=1 and fit the UDP limit. Over a
socket (--socket): messages go to a real `mcsdns serve`, which must still
answer a known query correctly afterwards.

    python robustness/fuzz.py -n 100000 --socket 20000 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from mcsdns.publish.pipeline import Pipeline  # noqa: E402
from mcsdns.sources.files import FileSource  # noqa: E402
from robustness.packets import hostile  # noqa: E402

EXAMPLE = REPO / "examples" / "clusterset"


def check(msg: bytes, out: bytes | None, tcp: bool) -> str | None:
    """A problem with the response, or None."""
    if out is None:
        return None
    if len(out) < 12:
        return "short response"
    if out[:2] != msg[:2]:
        return "ID not echoed"
    if not out[2] & 0x80:
        return "QR not set"
    if not tcp and len(out) > 1232:
        return f"UDP response of {len(out)} octets"
    if out[3] & 0x80:
        return "RA set"
    return None


async def in_process(n: int, seed: int) -> dict[str, float]:
    app = Pipeline()
    await FileSource(app.store, str(EXAMPLE)).poll(asyncio.get_running_loop())
    rng = random.Random(seed)
    respond = app.handler.respond
    crashes, problems, answered, dropped, worst, worst_cpu = 0, 0, 0, 0, 0.0, 0.0
    for i in range(n):
        msg = hostile(rng)
        for tcp in (False, True):
            t, c = time.perf_counter(), time.thread_time()
            try:
                out = respond(msg, tcp)
            except Exception as e:  # a crash is a finding
                crashes += 1
                print(f"CRASH on {msg.hex()}: {e!r}", file=sys.stderr)
                continue
            worst = max(worst, time.perf_counter() - t)
            worst_cpu = max(worst_cpu, time.thread_time() - c)
            p = check(msg, out, tcp)
            if p:
                problems += 1
                print(f"PROBLEM {p} on {msg.hex()}", file=sys.stderr)
            if out is None:
                dropped += 1
            else:
                answered += 1
        if i and i % 50000 == 0:
            print(f"  {i} messages...", file=sys.stderr)
    return {"messages": n, "responses": answered, "dropped": dropped, "crashes": crashes,
            "problems": problems, "worst_ms": worst * 1000, "worst_cpu_ms": worst_cpu * 1000}


def over_socket(n: int, seed: int) -> dict[str, float]:
    from support.helpers import run_server

    rng = random.Random(seed + 1)
    with tempfile.TemporaryDirectory() as tmp, run_server(["--manifests", str(EXAMPLE)], Path(tmp)) as srv:
        before = srv.query("web.shop.svc.clusterset.local.", "A").to_text().splitlines()[1:]
        t0 = time.monotonic()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(n):
                s.sendto(hostile(rng), srv.addr)
                if i % 200 == 0:
                    time.sleep(0.002)  # stay under the socket buffer
        tcp_msgs = 0
        for _ in range(50):
            with socket.create_connection(srv.addr, timeout=1) as c:
                msg = hostile(rng)
                c.sendall(len(msg).to_bytes(2, "big") + msg)
                tcp_msgs += 1
        elapsed = time.monotonic() - t0
        after = srv.query("web.shop.svc.clusterset.local.", "A").to_text().splitlines()[1:]
        alive = srv.proc.poll() is None
        errors = srv.logs().count("Traceback")
    return {"udp_messages": n, "tcp_messages": tcp_msgs, "seconds": elapsed,
            "server_alive": float(alive), "same_answer_after": float(before == after),
            "tracebacks_in_log": errors}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=100_000, help="in-process messages")
    ap.add_argument("--socket", type=int, default=0, help="messages sent to a live server")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    r = asyncio.run(in_process(args.n, args.seed))
    print("in-process: " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in r.items()))
    ok = r["crashes"] == 0 and r["problems"] == 0
    if args.socket:
        s = over_socket(args.socket, args.seed)
        print("socket: " + ", ".join(f"{k}={v:.3g}" for k, v in s.items()))
        ok = ok and bool(s["server_alive"]) and bool(s["same_answer_after"]) and not s["tracebacks_in_log"]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
