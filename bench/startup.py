"""Start-up of `mcsdns serve --kubeconfig` at scale: time to the first correct answer and
to /ready, RSS once ready, API requests, for `--workers` N.

The test API server (tests/fakeapi/) runs in this process on CPU 1 and holds, by default,
8,000 ClusterSetIP and 2,000 headless ServiceImports with 4,000 EndpointSlices of 10
endpoints each (40,000 endpoints), the data of issue 22's measurements. mcsdns runs on
CPU 0 (`taskset`). For each run: seconds from spawn to the first correct answer for the
last headless service (every endpoint present), and to /ready; RSS and PSS of every mcsdns process
once ready; list/watch requests; and the seconds the API server spent answering
(`serving`: Python encoding JSON, which a real kube-apiserver does in a fraction), so
that start-up can be read without it.

    python bench/startup.py --runs 3
    python bench/startup.py --runs 3 --repo /tmp/base   # a worktree of an older commit
    python bench/startup.py --services 1000 --headless 100 --runs 3 --workers 1,2,4
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import dns.message
import dns.rcode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeapi import KubeAPI  # noqa: E402
from support.ports import free_port  # noqa: E402

MCS = "multicluster.x-k8s.io/v1beta1"
NS = "bench"


def ip(i: int) -> str:
    return f"10.{100 + i // 65536 % 100}.{i // 256 % 256}.{i % 256}"


class Putter(Protocol):
    """Where `load` puts each object (the test API server, or a real one's loader)."""

    def put(self, obj: dict[str, Any]) -> Any: ...


def load(api: Putter, services: int, headless: int, slices_per: int, per_slice: int) -> tuple[str, set[str]]:
    """The objects; returns the last headless service's name and its addresses."""
    port = [{"name": "http", "protocol": "TCP", "port": 80}]
    for i in range(services - headless):
        api.put({"apiVersion": MCS, "kind": "ServiceImport", "metadata": {"name": f"s{i}", "namespace": NS},
                 "spec": {"type": "ClusterSetIP", "ips": [ip(i)], "ports": port}})
    n = 0
    last: tuple[str, set[str]] = ("", set())
    for h in range(headless):
        name = f"h{h}"
        api.put({"apiVersion": MCS, "kind": "ServiceImport", "metadata": {"name": name, "namespace": NS},
                 "spec": {"type": "Headless", "ports": port}})
        addrs: set[str] = set()
        for s in range(slices_per):
            eps = []
            for _ in range(per_slice):
                a = ip(200_000 + n)
                n += 1
                addrs.add(a)
                eps.append({"addresses": [a], "hostname": f"p{n}", "conditions": {"ready": True}})
            api.put({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": f"{name}-{s}", "namespace": NS, "labels": {
                         "multicluster.kubernetes.io/service-name": name,
                         "multicluster.kubernetes.io/source-cluster": f"cluster-{s % 3}"}},
                     "addressType": "IPv4", "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
                     "endpoints": eps})
        last = (name, addrs)
    return last


_QUERIES: dict[str, dns.message.Message] = {}  # by name, made once (the driver shares CPU 1)


def ask(sock: socket.socket, name: str) -> tuple[int, set[str]] | None:
    """(rcode, addresses) of an A query for service `name`; an answer without records is
    not decoded (its header says enough), so polling costs the driver little CPU."""
    q = _QUERIES.get(name)
    if q is None:
        q = _QUERIES[name] = dns.message.make_query(f"{name}.{NS}.svc.clusterset.local.", "A")
        q.use_edns(0, payload=65000)
    wire = q.to_wire()
    try:
        sock.send(wire)
        while True:
            data = sock.recv(65535)
            if data[:2] != wire[:2]:
                continue
            if len(data) < 12 or data[6:8] == b"\0\0":  # no answer records: the rcode alone
                return (data[3] & 0xF if len(data) >= 4 else dns.rcode.FORMERR), set()
            r = dns.message.from_wire(data)
            return r.rcode(), {str(rd) for rr in r.answer for rd in rr}
    except (OSError, dns.exception.DNSException):
        return None


def http_status(port: int, path: str) -> int | None:
    """The status of GET `path` on 127.0.0.1:`port` (None: no answer): one raw request, a
    quarter of urllib's CPU, on the CPU the API server shares with the driver."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
            head = s.recv(64)
    except OSError:
        return None
    parts = head.split(b" ", 2)
    return int(parts[1]) if head.startswith(b"HTTP/") and len(parts) > 1 and parts[1].isdigit() else None


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process and its children (KiB). RSS counts the pages forked workers
    share with the supervisor once per process; PSS divides them among the sharers."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    rss = pss = 0
    for p in [pid, *(int(x) for x in out.split())]:
        for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1])
            elif line.startswith("Pss:"):
                pss += int(line.split()[1])
    return rss, pss


def wait_up(proc: subprocess.Popen[bytes], t0: float, sock: socket.socket, last: tuple[str, Any],
            health: int, log: Path) -> tuple[float, float]:
    """Seconds from `t0` to the first correct answer for `last` (name, expected answer) and
    to /ready on port `health`; the log's tail is raised if the server exits or takes 300 s."""
    first = ready = None
    while first is None or ready is None:
        if proc.poll() is not None or time.monotonic() - t0 > 300:
            raise RuntimeError(log.read_text()[-3000:])
        if first is None:
            got = ask(sock, last[0])
            if got is not None and got[0] == dns.rcode.NOERROR and got[1] == last[1]:
                first = time.monotonic() - t0
        if ready is None and http_status(health, "/ready") == 200:
            ready = time.monotonic() - t0
        time.sleep(0.005)
    return first, ready


def one(api: KubeAPI, kubeconfig: Path, last: tuple[str, set[str]], workers: int,
        tmp: Path, repo: Path = REPO) -> dict[str, Any]:
    port, health = free_port(), free_port()
    api.requests.clear()
    api.serving = 0.0
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "mcsdns", "serve", "--kubeconfig", str(kubeconfig),
           "--listen", f"127.0.0.1:{port}", "--health", f"127.0.0.1:{health}", "--workers", str(workers)]
    log = open(tmp / f"mcsdns-{workers}.log", "wb")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(0.2)
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(repo))
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=repo, env=env)
    try:
        first, ready = wait_up(proc, t0, sock, last, health, tmp / f"mcsdns-{workers}.log")
        time.sleep(1.0)
        rss, pss = memory_kib(proc.pid)
        lists = sum(1 for m, u in api.requests if m == "GET" and "watch=" not in u and "/apis/" in u
                    and u.split("?")[0].rsplit("/", 1)[-1] in ("serviceimports", "endpointslices"))
        watches = sum(1 for m, u in api.requests if "watch=true" in u)
        return {"first": first, "ready": ready, "rss_mib": rss / 1024, "pss_mib": pss / 1024,
                "lists": lists, "watches": watches, "api_s": api.serving, "requests": len(api.requests)}
    finally:
        proc.terminate()
        proc.wait(30)
        sock.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", type=int, default=10_000, help="ServiceImports (default 10000)")
    p.add_argument("--headless", type=int, default=2_000, help="of which headless (default 2000)")
    p.add_argument("--slices", type=int, default=2, help="EndpointSlices per headless service (default 2)")
    p.add_argument("--endpoints", type=int, default=10, help="endpoints per slice (default 10)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workers", default="1", help="comma list of --workers values (default 1)")
    p.add_argument("--repo", type=Path, default=REPO,
                   help="the mcsdns checkout to start (default this one; e.g. a worktree of an older commit)")
    a = p.parse_args()
    os.sched_setaffinity(0, {1})  # the API server (and this driver) off mcsdns's CPU
    api = KubeAPI(bookmark_interval=60.0)
    last = load(api, a.services, a.headless, a.slices, a.endpoints)
    api.start()
    tmp = Path(tempfile.mkdtemp(prefix="mcsdns-startup-"))
    kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
    eps = a.headless * a.slices * a.endpoints
    print(f"{a.services} ServiceImports ({a.headless} headless), {a.headless * a.slices} EndpointSlices, "
          f"{eps} endpoints")
    try:
        for w in (int(x) for x in a.workers.split(",")):
            runs = [one(api, kubeconfig, last, w, tmp, a.repo.resolve()) for _ in range(a.runs)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            firsts = ", ".join(f"{r['first']:.2f}" for r in runs)
            print(f"--workers {w}: first correct answer {med['first']:.2f} s (runs "
                  f"{firsts}), /ready {med['ready']:.2f} s, "
                  f"RSS {med['rss_mib']:.0f} MiB (PSS {med['pss_mib']:.0f} MiB), "
                  f"{med['lists']:.0f} LISTs + {med['watches']:.0f} watches "
                  f"of MCS/slices, {med['requests']:.0f} requests, API server busy {med['api_s']:.2f} s",
                  flush=True)
    finally:
        api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
