"""Apply cost of one large object: CPU, worst answering stall, RSS growth (issue 27).

For each kind and size, a fresh `python -m mcsdns serve --manifests DIR` holding one
small service (`web`) is started; a client asks `web` A every 2 ms over UDP; then one
large object is written into DIR (JSON or YAML, renamed into place) and the client
waits until the large service answers. Printed per run:

- cpu_s: the server's CPU seconds from the write until the large service answered
  (reading the file, parsing, building the records, publishing);
- stall_ms: the longest time between two answers to `web` while that happened, and
  idle_ms the same over one second before the write (the machine's own noise);
- rss_mib: the server's RSS growth once the large service answers.

Kinds: `endpoints` (a headless service, one slice of N endpoints without hostnames),
`shared` (N endpoints, two per hostname), `ports` (a ClusterSetIP ServiceImport with N
named ports), `services` (N ClusterSetIP ServiceImports of one port, in one file: a
batch of many small objects).

    python bench/apply_cost.py [--sizes 2000,8000,32000,100000] [--kinds endpoints,shared,ports]
        [--update]     # then each again with one item more (a change of a large object)
        [--format yaml]  # manifests written as YAML (default JSON)
        [--root DIR]   # the mcsdns checkout to run (default: this one)
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import yaml

from mcsdns.data.endpoints import system_hostname

ZONE = "clusterset.local"
KINDS = ("endpoints", "shared", "ports", "services")
PAGE = os.sysconf("SC_PAGE_SIZE")
FILE_OBJECTS = 20_000  # objects per manifest file


def _si(name: str, headless: bool, ports: list[dict[str, Any]], ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": "bench"},
            "spec": {"type": "Headless" if headless else "ClusterSetIP", "ips": ips, "ports": ports}}


def _ip(i: int) -> str:
    return f"10.{64 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"


def objects(kind: str, n: int) -> tuple[list[dict[str, Any]], str, str, int]:
    """The large service's objects, a name of it and the type to ask, and how many
    records that name must answer with once it is applied."""
    if kind == "services":
        http = [{"name": "http", "protocol": "TCP", "port": 80}]
        return ([_si(f"s{i}", False, http, [_ip(i)]) for i in range(n)], f"s{n - 1}.bench.svc.{ZONE}", "A", 1)
    if kind == "ports":
        ports = [{"name": f"p{i}", "protocol": "TCP", "port": 1 + i % 65535} for i in range(n)]
        return [_si("big", False, ports, ["10.1.0.1"])], f"_p{n - 1}._tcp.big.bench.svc.{ZONE}", "SRV", 1
    eps = []
    for i in range(n):
        ep: dict[str, Any] = {"addresses": [_ip(i)], "conditions": {"ready": True}}
        if kind == "shared":
            ep["hostname"] = f"h{i // 2}"
        eps.append(ep)
    sl = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
          "metadata": {"name": "big-c1", "namespace": "bench", "labels": {
              "multicluster.kubernetes.io/service-name": "big",
              "multicluster.kubernetes.io/source-cluster": "c1"}},
          "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "endpoints": eps}
    port = [{"name": "http", "protocol": "TCP", "port": 80}]
    if kind == "shared":
        host, want = f"h{(n - 1) // 2}", 2 - n % 2  # the last host has one endpoint when n is odd
    else:
        host, want = system_hostname(ipaddress.ip_address(_ip(n - 1)).packed), 1
    return [_si("big", True, port, []), sl], f"{host}.c1.big.bench.svc.{ZONE}", "A", want


def write_json(path: Path, objs: list[dict[str, Any]]) -> None:
    """Write `objs` as one `kind: List` JSON manifest, renamed into place."""
    tmp = path.with_name("." + path.name)
    tmp.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    tmp.rename(path)


def answers(addr: tuple[str, int], name: str, rtype: str, timeout: float = 1.0) -> int:
    """Records in the answer to `name` (over TCP, for any size), or -1 on no answer."""
    import dns.query
    try:
        r = dns.query.tcp(dns.message.make_query(name, rtype), addr[0], port=addr[1], timeout=timeout)
    except (OSError, dns.exception.DNSException):
        return -1
    if r.rcode() != dns.rcode.NOERROR:
        return -1
    return sum(len(rrset) for rrset in r.answer)


class Gaps:
    """Asks `name` A every `interval` s over UDP from a thread; the longest time between
    two answers since `reset` (`worst`), and the most CPU one of `pids` spent between two
    answers (`worst_cpu`: a stall the server caused, where `worst` also holds the time the
    machine did not run it)."""

    def __init__(self, addr: tuple[str, int], name: str, interval: float = 0.002,
                 pids: tuple[int, ...] = ()) -> None:
        self.addr, self.interval, self.worst, self.answered = addr, interval, 0.0, 0
        self.pids, self.worst_cpu = pids, 0.0
        self.query = dns.message.make_query(name, "A").to_wire()
        self._stop = threading.Event()
        self._last = time.monotonic()
        self._cpu = self._cpus()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpus(self) -> list[float]:
        return [_proc_cpu(p) for p in self.pids]

    def reset(self) -> None:
        self.worst, self.worst_cpu, self._last, self._cpu = 0.0, 0.0, time.monotonic(), self._cpus()

    def _run(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.5)
            while not self._stop.is_set():
                s.sendto(self.query, self.addr)
                try:
                    while s.recv(4096)[:2] != self.query[:2]:
                        pass
                except TimeoutError:
                    continue
                now, cpu = time.monotonic(), self._cpus()
                self.worst = max(self.worst, now - self._last)
                spent = (c - c0 for c, c0 in zip(cpu, self._cpu, strict=True))
                self.worst_cpu = max([self.worst_cpu, *spent])
                self._last, self._cpu = now, cpu
                self.answered += 1
                time.sleep(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.worst


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(root: Path, d: Path) -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    """A server on a free port answering `web` (another port if the one chosen was taken)."""
    for _ in range(3):
        port = _free_port()
        env = dict(os.environ, PYTHONPATH=str(root))
        proc = subprocess.Popen([sys.executable, "-m", "mcsdns", "serve", "--manifests", str(d),
                                 "--listen", f"127.0.0.1:{port}", "--lameduck=0"], cwd=root, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        addr = ("127.0.0.1", port)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if answers(addr, f"web.bench.svc.{ZONE}", "A") == 1:
                return proc, addr
            time.sleep(0.05)
        proc.terminate()
        proc.wait()
    raise RuntimeError("the server did not start")


def write_yaml(path: Path, objs: list[dict[str, Any]]) -> None:
    """Write `objs` as a multi-document YAML manifest, renamed into place."""
    tmp = path.with_name("." + path.name)
    tmp.write_text(yaml.safe_dump_all(objs))
    tmp.rename(path)


def _files(tmp: Path, kind: str, n: int, fmt: str) -> tuple[list[Path], str, str, int]:
    """The large objects written in `tmp` as `fmt` (json, yaml), in files of at most
    FILE_OBJECTS objects (--max-manifest-bytes is 16 MiB); the name to ask, its type and
    record count."""
    objs, name, rtype, want = objects(kind, n)
    out = []
    for i in range(0, len(objs), FILE_OBJECTS):
        out.append(Path(tmp, f"big-{i}.{fmt}"))
        (write_yaml if fmt == "yaml" else write_json)(out[-1], objs[i:i + FILE_OBJECTS])
    return out, name, rtype, want


def _measure(proc: subprocess.Popen[bytes], addr: tuple[str, int], d: Path, kind: str, n: int,
             limit: float, fmt: str) -> dict[str, Any]:
    """Write the large objects into `d` (renamed into place) and measure until answered."""
    with tempfile.TemporaryDirectory(prefix="apply-cost-") as tmp:
        bigs, name, rtype, want = _files(Path(tmp), kind, n, fmt)
        gaps = Gaps(addr, f"web.bench.svc.{ZONE}")
        time.sleep(1.0)
        idle = gaps.worst
        rss0, cpu0 = _proc_rss(proc.pid), _proc_cpu(proc.pid)
        gaps.reset()
        for big in bigs:
            big.rename(d / big.name)
        start = time.monotonic()
        done = False
        # a batch of services is applied in no given order: wait for 20 spread over it
        step = max(1, n // 20)
        names = [f"s{i}.bench.svc.{ZONE}" for i in range(0, n, step)] if kind == "services" else []
        while time.monotonic() - start < limit:
            if answers(addr, name, rtype, timeout=2.0) == want:
                names = [x for x in names if answers(addr, x, "A") != 1]
                if not names:
                    done = True
                    break
            time.sleep(0.02)
        cpu = _proc_cpu(proc.pid) - cpu0
        wall = time.monotonic() - start
        stall = gaps.stop()
        rss = _proc_rss(proc.pid) - rss0
    return {"kind": kind, "n": n, "done": done, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "stall_ms": round(stall * 1000), "idle_ms": round(idle * 1000), "rss_mib": round(rss, 1)}


def run_one(root: Path, kind: str, n: int, limit: float = 120.0,
            update: bool = False, fmt: str = "json") -> list[dict[str, Any]]:
    """One fresh server, N large objects applied (`update`: then again, one item more);
    the figures of the module docstring for each."""
    with tempfile.TemporaryDirectory(prefix="apply-cost-") as tmp:
        d = Path(tmp, "manifests")
        d.mkdir()
        write_json(d / "web.json", [_si("web", False, [], ["10.0.0.1"])])
        proc, addr = _start(root, d)
        try:
            out = [_measure(proc, addr, d, kind, n, limit, fmt)]
            if update and out[0]["done"]:
                out.append(_measure(proc, addr, d, kind, n + 1, limit, fmt))
        finally:
            proc.terminate()
            proc.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2000,8000,32000,100000")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds to wait for one apply")
    ap.add_argument("--update", action="store_true", help="then apply them again with one item more")
    ap.add_argument("--format", choices=("json", "yaml"), default="json", help="of the manifests written")
    args = ap.parse_args()
    print(f"{'kind':10} {'n':>7} {'cpu_s':>7} {'wall_s':>7} {'stall_ms':>9} {'idle_ms':>8} {'rss_mib':>8}")
    for kind in args.kinds.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            runs = run_one(args.root, kind, n, args.limit, args.update, args.format)
            for r, what in zip(runs, ("", " (update)"), strict=False):
                flag = "" if r["done"] else f"  (not applied within {args.limit:g} s)"
                print(f"{kind:10} {r['n']:>7} {r['cpu_s']:>7} {r['wall_s']:>7} {r['stall_ms']:>9} "
                      f"{r['idle_ms']:>8} {r['rss_mib']:>8}{what}{flag}", flush=True)


if __name__ == "__main__":
    main()
