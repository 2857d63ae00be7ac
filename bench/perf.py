"""Shared benchmark plumbing: free ports, starting servers, running and parsing dnsperf."""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.ports import free_port  # noqa: E402  (re-exported for the bench scripts)

__all__ = ["free_port"]
SERVER_CPU = "0"  # the server under test runs here ...
CLIENT_CPU = "1"  # ... and dnsperf here


def pinned(cpus: str, cmd: list[str]) -> list[str]:
    """`cmd` under `taskset -c cpus` when taskset exists and the CPUs do."""
    if shutil.which("taskset") and max(int(c) for c in re.split("[,-]", cpus)) < (os.cpu_count() or 1):
        return ["taskset", "-c", cpus, *cmd]
    return cmd


def dns_ready(port: int, timeout: float = 0.5) -> bool:
    """True once something answers a UDP query for the zone apex SOA on 127.0.0.1:port."""
    q = b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x0aclusterset\x05local\x00\x00\x06\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(q, ("127.0.0.1", port))
            return s.recv(4096)[:2] == b"\x12\x34"
        except OSError:
            return False


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


class Proc:
    """A server process started in its own process group; stopped with `stop()`."""

    def __init__(self, name: str, cmd: list[str], log: Path, port: int,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.cmd, self.log, self.port = name, cmd, log, port
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            self.p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                      env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
                                      start_new_session=True)
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.p.pid

    def wait_dns(self, timeout: float = 60.0) -> float:
        """Seconds from start until the server answers DNS."""
        deadline = self.started + timeout
        while not dns_ready(self.port, 0.2):
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.p.returncode}:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not answering after {timeout}s")
            time.sleep(0.05)
        return time.monotonic() - self.started

    def wait_ready(self, health: int, timeout: float, poll: float = 0.05) -> None:
        """Wait until the server's /ready (on port `health`) answers 200, at most `timeout` s
        from start."""
        while http_status(health, "/ready") != 200:
            if self.p.poll() is not None or time.monotonic() - self.started > timeout:
                raise RuntimeError(f"{self.name} not ready:\n{self.log.read_text()[-3000:]}")
            time.sleep(poll)

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def status_kib(pid: int, field: str) -> int:
    """A size in KiB from /proc/PID/status (VmRSS, VmHWM...; 0 if unknown)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (0 if unknown)."""
    return status_kib(pid, "VmRSS")


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process (all its threads) and its descendants."""
    total = 0
    for p in _descendants(pid):
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds spent in user+nice+system on all CPUs since boot (irq/softirq excluded)."""
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(f[1]) + int(f[2]) + int(f[3])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """CPU seconds of this process' waited-for children (dnsperf runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_quiet(limit: float, threshold: float = 0.25) -> float:
    """Wait up to `limit` s until other processes use < threshold of one CPU over 1 s;
    returns the last measured load (CPUs busy)."""
    deadline = time.monotonic() + limit
    while True:
        b0, t0 = machine_busy(), time.monotonic()
        time.sleep(1)
        load = (machine_busy() - b0) / (time.monotonic() - t0)
        if load < threshold or time.monotonic() > deadline:
            return load


@dataclass
class PerfResult:
    """One dnsperf run."""

    sent: int = 0
    completed: int = 0
    lost: int = 0
    qps: float = 0.0
    avg_ms: float = 0.0
    rcodes: dict[str, int] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    rate: int | None = None  # -Q, when limited
    server_cpu: float = 0.0  # CPUs the server used during the run (1.0 = one core busy)
    server_cpu_s: float = 0.0  # the server's CPU seconds during the run
    other_cpu: float = 0.0  # CPUs used by other processes on the machine meanwhile

    @property
    def qps_per_core(self) -> float:
        """Queries answered per server CPU-second: the server's capacity if it had a whole core."""
        return self.completed / self.server_cpu_s if self.server_cpu_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(asdict(self), qps_per_core=self.qps_per_core)


_NUM = r"([0-9.]+)"


def parse_dnsperf(text: str) -> PerfResult:
    """Statistics from dnsperf's summary; per-query latencies from `-v` lines if present."""
    r = PerfResult()
    for key, pat in (("sent", r"Queries sent:\s+(\d+)"), ("completed", r"Queries completed:\s+(\d+)"),
                     ("lost", r"Queries lost:\s+(\d+)")):
        m = re.search(pat, text)
        if m:
            setattr(r, key, int(m.group(1)))
    m = re.search(r"Queries per second:\s+" + _NUM, text)
    r.qps = float(m.group(1)) if m else 0.0
    m = re.search(r"Average Latency \(s\):\s+" + _NUM, text)
    r.avg_ms = float(m.group(1)) * 1000 if m else 0.0
    m = re.search(r"Response codes:\s+(.*)", text)
    if m:
        for code, n in re.findall(r"([A-Z]+) (\d+) \(", m.group(1)):
            r.rcodes[code] = int(n)
    lat = sorted(float(x) for x in re.findall(r"^> [A-Z]+ \S+ \S+ ([0-9.]+)$", text, re.M))
    if lat:
        r.p50_ms = lat[len(lat) // 2] * 1000
        r.p99_ms = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    return r


def combine(parts: list[PerfResult], latencies: list[float]) -> PerfResult:
    """One result from several dnsperf processes run at the same time."""
    r = PerfResult()
    for p in parts:
        r.sent += p.sent
        r.completed += p.completed
        r.lost += p.lost
        r.qps += p.qps
        for k, v in p.rcodes.items():
            r.rcodes[k] = r.rcodes.get(k, 0) + v
    r.avg_ms = sum(p.avg_ms * p.completed for p in parts) / r.completed if r.completed else 0.0
    lat = sorted(latencies)
    if lat:
        r.p50_ms = lat[len(lat) // 2] * 1000
        r.p99_ms = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    return r


_LAT = re.compile(r"^> [A-Z]+ \S+ \S+ ([0-9.]+)$", re.M)


def dnsperf(port: int, queries: Path, seconds: float, clients: int = 4, outstanding: int = 200,
            tcp: bool = False, rate: int | None = None, verbose: bool = False,
            out: Path | None = None, server_pid: int | None = None, loaders: int = 1) -> PerfResult:
    """Run `loaders` dnsperf processes at once (pinned to the client CPU) against
    127.0.0.1:port, each with `clients`, `outstanding` and 1/loaders of `rate`,
    and combine their reports."""
    cmd = ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(queries), "-l", str(seconds),
           "-c", str(clients), "-q", str(outstanding), "-t", "2"]
    if tcp:
        cmd += ["-m", "tcp"]
    if rate:
        cmd += ["-Q", str(max(1, rate // loaders))]
    if verbose:
        cmd += ["-v"]
    base = out or Path(f"/tmp/dnsperf-{os.getpid()}.out")
    paths = [base.with_name(f"{base.name}.{i}") for i in range(loaders)]
    s0 = cpu_seconds(server_pid) if server_pid else 0.0
    b0, c0, t0 = machine_busy(), children_cpu(), time.monotonic()
    procs = []
    for path in paths:
        with open(path, "wb") as f:
            procs.append(subprocess.Popen(pinned(CLIENT_CPU, cmd), stdout=f, stderr=subprocess.STDOUT))
    for p in procs:
        try:
            p.wait(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    elapsed = time.monotonic() - t0
    server = (cpu_seconds(server_pid) - s0) if server_pid else 0.0
    client = children_cpu() - c0
    texts = [path.read_text(errors="replace") for path in paths]
    res = combine([parse_dnsperf(t) for t in texts],
                  [float(x) for t in texts for x in _LAT.findall(t)] if verbose else [])
    res.rate = rate
    res.server_cpu, res.server_cpu_s = server / elapsed, server
    res.other_cpu = max(0.0, (machine_busy() - b0 - server - client) / elapsed)
    for path in paths:
        path.unlink()
    return res


def python() -> str:
    return sys.executable
