"""Start-up of `mcsdns serve --kubeconfig` and of CoreDNS (multicluster plugin) against the
same real kube-apiserver, at 10k services / 40k endpoints.

The data is bench/startup.py's (8,000 ClusterSetIP + 2,000 headless ServiceImports, 4,000
EndpointSlices of 10 endpoints), loaded once; then each server starts `--runs` times,
alternately, pinned alone to CPU 0 (`taskset`) with the API server, etcd and this driver
on CPU 1; each checkout's modules are byte-compiled first, as installing the wheel does.
For each start: seconds from spawn to /ready and to the first correct answer for the last
headless service (every endpoint present; the same test for both), RSS once ready, the
server's own CPU seconds until ready (robust to a busy machine), and the CPU seconds the
kube-apiserver process spent from spawn to ready (from /proc/<pid>/stat), reported apart.
The ratio to CoreDNS is given of the medians and, steadier on a shared machine, as the median
of each pair of starts made one after the other. The driver polls every 5 ms with little CPU
(bench/startup.py: `ask`, `http_status`): it shares CPU 1 with the API server.
"up" is the later of /ready and the first correct answer: CoreDNS's `ready` plugin answers
200 before the multicluster plugin has synced (it reports no readiness), so for CoreDNS
that is the first correct answer.

Peers come from the environment or flags, never from the project: MCSDNS_REALK8S (the
realk8s.sh that runs a real control plane; a cluster is brought up for the run and
purged after) or --kubeconfig + --apiserver-pid (an API server already running), and
MCSDNS_COREDNS (a coredns binary with the multicluster plugin, or its .xz).

    MCSDNS_REALK8S=.../realk8s.sh MCSDNS_COREDNS=.../coredns.xz python bench/startup_real.py --runs 3
    python bench/startup_real.py --kubeconfig K --apiserver-pid P --coredns C --repo /tmp/base
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.ports import free_port  # noqa: E402
from support.realk8s import crd_folder, run_up  # noqa: E402

from bench.startup import NS, load, memory_kib, wait_up  # noqa: E402
from mcsdns.kube.apiclient.client import Client  # noqa: E402
from mcsdns.kube.apiclient.errors import Conflict, NotFound  # noqa: E402

CLUSTER = "startup-bench"
PATHS = {"ServiceImport": f"/apis/multicluster.x-k8s.io/v1beta1/namespaces/{NS}/serviceimports",
         "EndpointSlice": f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"}


Command = Callable[[int, int], tuple[list[str], dict[str, str]]]  # (port, health) -> argv, environment


class Collect:
    """Collects what `startup.load` puts."""

    def __init__(self) -> None:
        self.objs: list[dict[str, Any]] = []

    def put(self, obj: dict[str, Any]) -> None:
        self.objs.append(obj)


def populate(kubeconfig: Path, services: int, headless: int) -> tuple[str, set[str]]:
    """The objects, created unless the last of them is there already."""
    c = Collect()
    last: tuple[str, set[str]] = load(c, services, headless, 2, 10)
    client = Client.load(str(kubeconfig), None, pool=16, timeout=(5.0, 60.0))
    try:
        client.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": NS}})
    except Conflict:
        pass
    tail = c.objs[-1]
    try:
        client.get(f"{PATHS[tail['kind']]}/{tail['metadata']['name']}")
        print(f"{len(c.objs)} objects already loaded")
        return last
    except NotFound:
        pass
    t0 = time.monotonic()

    def create(obj: dict[str, Any]) -> None:
        try:
            client.request("POST", PATHS[obj["kind"]], obj)
        except Conflict:
            pass

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(create, c.objs))
    print(f"loaded {len(c.objs)} objects in {time.monotonic() - t0:.0f} s")
    client.close()
    return last


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(cmd: list[str], env: dict[str, str], port: int, health: int, last: tuple[str, set[str]],
        api_pid: int, log: Path) -> dict[str, float]:
    """One start: seconds to the first correct answer and to /ready, the server's own CPU
    seconds until then, RSS, API server CPU."""
    import socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(0.2)
    cpu0 = cpu_s(api_pid)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    try:
        first, ready = wait_up(proc, t0, sock, last, health, log)
        api, own = cpu_s(api_pid) - cpu0, cpu_s(proc.pid)
        time.sleep(1.0)
        rss, _ = memory_kib(proc.pid)
        return {"up": max(ready, first), "ready": ready, "first": first, "cpu": own,
                "rss_mib": rss / 1024, "api_cpu": api, "load": os.getloadavg()[0]}
    finally:
        proc.terminate()
        proc.wait(30)
        sock.close()


def installed_site(python: Path, tmp: Path) -> Path | None:
    """A site directory like `python`'s site-packages less its editable installs (their
    .pth imports a path finder at every start, ~13 ms of CPU a wheel-installed server does
    not spend); None when it has none."""
    out = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    sp = Path(out)
    if not any(sp.glob("__editable__*.pth")):
        return None
    site = tmp / f"site-{abs(hash(str(python)))}"
    if not site.exists():
        site.mkdir()
        for entry in sp.iterdir():
            if not entry.name.startswith("__editable__"):
                (site / entry.name).symlink_to(entry)
    return site


def mcsdns(repo: Path, kubeconfig: Path, tmp: Path) -> Command:
    """A start of `repo`'s mcsdns, as installed. Its modules are byte-compiled first, as
    `pip install` leaves them in the image: without, every start compiles them again (~0.2 s
    of CPU when PYTHONDONTWRITEBYTECODE is set, as in the image and on some machines). It
    runs with the checkout's own .venv when it has one (its own dependencies), else this
    Python; without the venv's editable installs (`installed_site`)."""
    python = repo / ".venv" / "bin" / "python"  # the checkout's own dependencies, when it has them
    python = python if python.exists() else Path(sys.executable)
    subprocess.run([str(python), "-m", "compileall", "-q", str(repo / "mcsdns")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    site = installed_site(python, tmp)
    # -S, then the site directory added as site.main() adds site-packages (its .pth files run)
    start = ["-m", "mcsdns"] if site is None else [
        "-S", "-c", f"import runpy, site; site.addsitedir({str(site)!r}); "
        "runpy.run_module('mcsdns', run_name='__main__', alter_sys=True)"]

    def cmd(port: int, health: int) -> tuple[list[str], dict[str, str]]:
        return (["taskset", "-c", "0", str(python), *start, "serve", "--kubeconfig",
                 str(kubeconfig), "--listen", f"127.0.0.1:{port}", "--health", f"127.0.0.1:{health}"],
                dict(os.environ, PYTHONPATH=str(repo), PYTHONSAFEPATH="1"))  # not the mcsdns of the cwd
    return cmd


def coredns(binary: Path, kubeconfig: Path, tmp: Path) -> Command:
    def cmd(port: int, health: int) -> tuple[list[str], dict[str, str]]:
        corefile = tmp / "Corefile"
        corefile.write_text(f"clusterset.local:{port} {{\n  bind 127.0.0.1\n"
                            f"  multicluster clusterset.local {{\n    kubeconfig {kubeconfig}\n  }}\n"
                            f"  ready 127.0.0.1:{health}\n}}\n")
        return ["taskset", "-c", "0", str(binary), "-conf", str(corefile)], dict(os.environ, GOMAXPROCS="1")
    return cmd


def coredns_binary(given: str, tmp: Path) -> Path:
    if given.endswith(".xz"):
        out = tmp / "coredns"
        with out.open("wb") as f:
            subprocess.run(["xz", "-dc", given], stdout=f, check=True)
        out.chmod(0o755)
        return out
    return Path(given)


def up(realk8s: str, home: Path) -> tuple[Path, int]:
    """A control plane of realk8s.sh with the project's CRDs: (kubeconfig, API server pid)."""
    env = dict(os.environ, REALK8S_HOME=str(home), REALK8S_CRDS=str(crd_folder(home)))
    kubeconfig = run_up(realk8s, CLUSTER, env)
    return kubeconfig, int((home / CLUSTER / "apiserver.pid").read_text())


def report(name: str, runs: list[dict[str, float]]) -> dict[str, float]:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    each = ", ".join(f"{r['up']:.2f}" for r in runs)
    print(f"{name}: up {med['up']:.2f} s (runs {each}), /ready {med['ready']:.2f} s, "
          f"first correct answer {med['first']:.2f} s, own CPU {med['cpu']:.2f} s, "
          f"RSS {med['rss_mib']:.0f} MiB, "
          f"API server CPU {med['api_cpu']:.2f} s, load average {med['load']:.1f}", flush=True)
    return med


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--headless", type=int, default=2_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--repo", type=Path, action="append", default=[],
                   help="an mcsdns checkout to start (repeatable; default this one)")
    p.add_argument("--kubeconfig", type=Path, help="a running real API server (with --apiserver-pid)")
    p.add_argument("--apiserver-pid", type=int)
    p.add_argument("--coredns", default=os.environ.get("MCSDNS_COREDNS", ""))
    p.add_argument("--no-coredns", action="store_true", help="start mcsdns only")
    a = p.parse_args()
    realk8s = os.environ.get("MCSDNS_REALK8S", "")
    if not (a.kubeconfig and a.apiserver_pid) and not realk8s:
        print("needs a real API server: set MCSDNS_REALK8S to realk8s.sh, or give --kubeconfig and "
              "--apiserver-pid", file=sys.stderr)
        return 2
    if not a.no_coredns and not a.coredns:
        print("needs CoreDNS with the multicluster plugin: set MCSDNS_COREDNS (binary or .xz) or "
              "--coredns, or pass --no-coredns", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="mcsdns-startup-real-"))
    home = tmp / "realk8s"
    try:
        kubeconfig, api_pid = (a.kubeconfig, a.apiserver_pid) if a.kubeconfig else up(realk8s, home)
        for pid in (api_pid, *_etcd(kubeconfig)):
            subprocess.run(["taskset", "-a", "-p", "-c", "1", str(pid)], capture_output=True, check=False)
        os.sched_setaffinity(0, {1})
        last = populate(kubeconfig, a.services, a.headless)
        servers = {f"mcsdns {r}": mcsdns(r.resolve(), kubeconfig, tmp) for r in a.repo or [REPO]}
        if not a.no_coredns:
            servers["CoreDNS"] = coredns(coredns_binary(a.coredns, tmp), kubeconfig, tmp)
        print(f"{a.services} ServiceImports ({a.headless} headless), {2 * a.headless} EndpointSlices, "
              f"{20 * a.headless} endpoints; {a.runs} starts each, alternating")
        runs: dict[str, list[dict[str, float]]] = {n: [] for n in servers}
        for i in range(a.runs):
            for name, make in servers.items():
                port, health = free_port(), free_port()
                cmd, env = make(port, health)
                runs[name].append(one(cmd, env, port, health, last, api_pid, tmp / f"{i}.log"))
        meds = {n: report(n, r) for n, r in runs.items()}
        if "CoreDNS" in meds:
            core = runs["CoreDNS"]
            for n, m in meds.items():
                if n != "CoreDNS":  # and per pair of starts made one after the other (the same load)
                    pairs = [r["up"] / c["up"] for r, c in zip(runs[n], core, strict=True)]
                    print(f"{n} / CoreDNS: up {m['up'] / meds['CoreDNS']['up']:.2f}x (pairs: median "
                          f"{statistics.median(pairs):.2f}x, {' '.join(f'{x:.2f}' for x in pairs)}), "
                          f"own CPU {m['cpu'] / meds['CoreDNS']['cpu']:.2f}x")
    finally:
        if not a.kubeconfig and realk8s:
            env = dict(os.environ, REALK8S_HOME=str(home))
            subprocess.run([realk8s, "down", "--purge", CLUSTER], env=env, capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _etcd(kubeconfig: Path) -> list[int]:
    """etcd's pid, recorded beside the kubeconfig by realk8s.sh (none when not there)."""
    try:
        return [int((kubeconfig.parent / "etcd.pid").read_text())]
    except (OSError, ValueError):
        return []


if __name__ == "__main__":
    sys.exit(main())
