"""Zone transfer at scale: AXFR of 10,000 services / 100,000 endpoints (by default).

Prints the zone size, how long a full AXFR takes (client: a plain socket
reader that only splits messages and counts records), the server's RSS
before the transfer and its peak RSS during it (VmHWM, reset just before),
the server's RSS while answering several AXFRs at once, an IXFR after one
changed service, and optionally how long knotd takes to transfer the zone
as a real secondary and then to follow one change (NOTIFY + IXFR).

    python bench/xfr.py
    python bench/xfr.py --knotd --headless 1.0   # every endpoint in a headless service
    python bench/xfr.py --services 2000 --endpoints 20000
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.knot_conf import secondary_conf  # noqa: E402

from bench.gen_clusterset import generate, write_list  # noqa: E402
from bench.perf import Proc, free_port, python, rss_kib, status_kib  # noqa: E402

ZONE_WIRE = b"\x0aclusterset\x05local\x00"


def vm_hwm_kib(pid: int) -> int:
    return status_kib(pid, "VmHWM")


def reset_hwm(pid: int) -> bool:
    """Reset the peak RSS counter of a process (Linux: clear_refs 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def soa_serial(port: int) -> int:
    q = struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0) + ZONE_WIRE + b"\x00\x06\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        s.sendto(q, ("127.0.0.1", port))
        data = s.recv(4096)
    return int(struct.unpack_from("!I", data, len(data) - 20)[0])


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed mid-transfer")
        buf += chunk
    return bytes(buf)


def transfer(port: int, qtype: int = 252, serial: int | None = None) -> tuple[float, int, int, int]:
    """One AXFR (or IXFR from `serial`): (seconds, messages, records, octets)."""
    ns = 0 if serial is None else 1
    q = struct.pack("!HHHHHH", 99, 0, 1, 0, ns, 0) + ZONE_WIRE + struct.pack("!HH", qtype, 1)
    if serial is not None:
        rd = b"\x00\x00" + struct.pack("!IIIII", serial, 0, 0, 0, 0)
        q += b"\xc0\x0c" + struct.pack("!HHIH", 6, 1, 0, len(rd)) + rd
    t0 = time.perf_counter()
    msgs = records = octets = 0
    soas: list[tuple[int, int]] = []  # (record index, serial) of every SOA
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(struct.pack("!H", len(q)) + q)
        while True:
            n = struct.unpack("!H", _read(s, 2))[0]
            m = _read(s, n)
            msgs += 1
            octets += n + 2
            if m[3] & 0xF:
                raise RuntimeError(f"rcode {m[3] & 0xF}")
            an = struct.unpack_from("!H", m, 6)[0]
            i = 12
            if struct.unpack_from("!H", m, 4)[0]:
                while m[i]:
                    i += m[i] + 1
                i += 5
            last_soa = False
            for _ in range(an):
                while m[i] and m[i] < 0xC0:
                    i += m[i] + 1
                i += 2 if m[i] >= 0xC0 else 1
                rtype, _c, _t, rdlen = struct.unpack_from("!HHIH", m, i)
                i += 10 + rdlen
                last_soa = rtype == 6
                if last_soa:
                    soas.append((records, struct.unpack_from("!I", m, i - 20)[0]))
                records += 1
            newest = soas[0][1]
            final = [k for k, sr in soas if sr == newest]
            if qtype == 252 and len(soas) >= 2:
                break
            if qtype == 251 and last_soa and soas[-1][1] == newest and (
                    records == 1 or (len(final) == 2 and soas[1][0] != 1) or len(final) >= 3):
                break
    return time.perf_counter() - t0, msgs, records, octets


def knot_serial(port: int) -> int | None:
    try:
        return soa_serial(port)
    except OSError:
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=Path("/tmp/mcsdns-scale"))
    p.add_argument("--services", type=int, default=10000)
    p.add_argument("--endpoints", type=int, default=100000)
    p.add_argument("--clusters", type=int, default=5)
    p.add_argument("--headless", type=float, default=0.2,
                   help="fraction of headless services (default 0.2; 1.0: every endpoint has records)")
    p.add_argument("--parallel", type=int, default=3, help="concurrent AXFRs for the RSS check")
    p.add_argument("--knotd", action="store_true", help="also time knotd as a secondary")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def start_mcsdns(a: argparse.Namespace, port: int, knot_port: int) -> Proc:
    """mcsdns serving the generated manifests, transfers allowed (NOTIFY to knotd with --knotd),
    once ready and settled."""
    health = free_port()
    cmd = [python(), "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{port}", "--health",
           f"127.0.0.1:{health}", "--manifests", str(a.data / "manifests"), "--log-level", "WARNING",
           "--allow-transfer", "127.0.0.1"]
    if a.knotd:
        cmd += ["--notify", f"127.0.0.1:{knot_port}"]
    proc = Proc("mcsdns", cmd, a.data / "logs" / "mcsdns-xfr.log", port)
    try:
        proc.wait_ready(health, 300)
    except BaseException:
        proc.stop()
        raise
    time.sleep(1.0)
    return proc


def one_axfr(proc: Proc, port: int, res: dict[str, object]) -> None:
    """One AXFR: its size and time, and the server's RSS before and at its peak during it."""
    rss0 = rss_kib(proc.pid)
    hwm_ok = reset_hwm(proc.pid)
    secs, msgs, recs, octets = transfer(port)
    peak = vm_hwm_kib(proc.pid)
    print(f"AXFR: {recs:,} records in {msgs:,} messages, {octets / 1e6:.1f} MB, {secs:.2f} s "
          f"({recs / secs:,.0f} records/s)", flush=True)
    print(f"server RSS before {rss0 / 1024:.0f} MiB, peak during the AXFR "
          f"{peak / 1024:.0f} MiB{'' if hwm_ok else ' (VmHWM not reset: peak since start)'}",
          flush=True)
    res.update(axfr_s=secs, messages=msgs, records=recs, octets=octets, rss_before_kib=rss0,
               rss_peak_kib=peak)


def parallel_axfrs(proc: Proc, port: int, parallel: int, res: dict[str, object]) -> None:
    """Several AXFRs at once: memory must not grow with the zone per client."""
    reset_hwm(proc.pid)
    results: list[float] = []
    threads = [threading.Thread(target=lambda: results.append(transfer(port)[0]))
               for _ in range(parallel)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    peak_n = vm_hwm_kib(proc.pid)
    print(f"{parallel} AXFRs at once: {wall:.2f} s wall, server peak RSS {peak_n / 1024:.0f} MiB",
          flush=True)
    res.update(parallel=parallel, parallel_wall_s=wall, parallel_peak_kib=peak_n)


def start_knotd(tmp: Path, port: int, knot_port: int, res: dict[str, object]) -> subprocess.Popen[bytes]:
    """knotd as a secondary of mcsdns, once it serves the zone transferred."""
    (tmp / "knot.conf").write_text(secondary_conf(tmp, knot_port, port))
    with open(tmp / "knot.log", "wb") as out:
        knot = subprocess.Popen(["knotd", "-c", str(tmp / "knot.conf")], stdout=out,
                                stderr=subprocess.STDOUT)
    want = soa_serial(port)
    t0 = time.perf_counter()
    while knot_serial(knot_port) != want:
        if time.perf_counter() - t0 > 300 or knot.poll() is not None:
            raise RuntimeError((tmp / "knot.log").read_text()[-3000:])
        time.sleep(0.05)
    kt = time.perf_counter() - t0
    print(f"knotd: zone transferred and served {kt:.2f} s after knotd started", flush=True)
    res.update(knotd_initial_s=kt)
    return knot


def one_change(a: argparse.Namespace, meta: dict[str, Any], port: int, res: dict[str, object]) -> float:
    """One changed service: the new serial's delay and the IXFR from the previous one;
    returns when the file was written (perf_counter)."""
    before = soa_serial(port)
    churn = a.data / meta["churn"]["file"]
    doc = json.loads(churn.read_text())
    doc["items"][0]["spec"]["ips"] = ["10.95.9.9"]
    t0 = time.perf_counter()
    write_list(churn, doc["items"])
    while soa_serial(port) == before:
        time.sleep(0.002)
    serial_s = time.perf_counter() - t0
    secs, msgs, recs, octets = transfer(port, 251, before)
    print(f"one change: new serial after {serial_s * 1000:.0f} ms; IXFR from the previous serial: "
          f"{recs} records, {octets} octets, {secs * 1000:.1f} ms", flush=True)
    res.update(change_serial_s=serial_s, ixfr_records=recs, ixfr_s=secs)
    return t0


def knot_follows(port: int, knot_port: int, t0: float, res: dict[str, object]) -> None:
    """How long after the file write at `t0` knotd answers with the new serial."""
    want = soa_serial(port)
    while knot_serial(knot_port) != want:
        if time.perf_counter() - t0 > 30:
            raise RuntimeError("knotd did not follow the change")
        time.sleep(0.005)
    follow = time.perf_counter() - t0
    print(f"knotd: change answered by the secondary {follow * 1000:.0f} ms after the file write",
          flush=True)
    res.update(knotd_follow_s=follow)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    meta = generate(a.data, a.services, a.endpoints, a.clusters, a.headless)
    print(f"clusterset: {meta['services']} services ({meta['headless']} headless), "
          f"{meta['endpoints']} endpoints in {meta['clusters']} clusters", flush=True)
    port, knot_port = free_port(), free_port()
    proc = start_mcsdns(a, port, knot_port)
    res: dict[str, object] = {"meta": meta}
    knot: subprocess.Popen[bytes] | None = None
    tmp = Path(tempfile.mkdtemp(prefix="mcsdns-knot-"))
    try:
        one_axfr(proc, port, res)
        parallel_axfrs(proc, port, a.parallel, res)
        if a.knotd and shutil.which("knotd"):
            knot = start_knotd(tmp, port, knot_port, res)
        t0 = one_change(a, meta, port, res)
        if knot is not None:
            knot_follows(port, knot_port, t0, res)
    finally:
        if knot is not None:
            knot.terminate()
            knot.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
        proc.stop()
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
