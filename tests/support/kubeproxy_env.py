"""A real kube-proxy in a network namespace of its own, for end-to-end tests of what the
controller writes (tests/controller/test_real_kube_proxy.py).

`MCSDNS_KUBE_PROXY` names the kube-proxy binary (or its .xz); the tests also need root and
iproute2. In namespace NS, `netns_agent.py serve` relays 127.0.0.1:PORT to the API server on
the host's loopback (through a Unix socket, which namespaces do not separate: `UnixRelay` is
the host's half) and answers on every endpoint address with the endpoint's name; kube-proxy
runs there as one Node, and `probe` counts where connections to a ClusterIP land.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.netns_agent import pipe

HERE = Path(__file__).resolve().parent
ENV = "MCSDNS_KUBE_PROXY"
SKIP_REASON = (f"no kube-proxy: set {ENV} to the path of kube-proxy (or kube-proxy.xz), and run as root "
               "with iproute2, to run the kube-proxy end-to-end test")


def binary(home: Path) -> str | None:
    """The kube-proxy to run (unpacked into `home` when it is an .xz), or None."""
    path = os.environ.get(ENV, "")
    if not path or not os.path.exists(path) or os.geteuid() != 0 or shutil.which("ip") is None:
        return None
    if not path.endswith(".xz"):
        return path
    out = home / "kube-proxy"
    if not out.exists():
        out.write_bytes(lzma.decompress(Path(path).read_bytes()))
        out.chmod(0o755)
    return str(out)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@contextmanager
def netns(name: str, addresses: list[str]) -> Iterator[str]:
    """Namespace `name` with `lo` up, `addresses` (/32) on it and the default route through
    it (so a ClusterIP has a route until kube-proxy's DNAT); deleted afterwards."""
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "set", "lo", "up")
        ip("-n", name, "route", "add", "default", "dev", "lo")
        for a in addresses:
            ip("-n", name, "addr", "add", f"{a}/32", "dev", "lo")
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)


class UnixRelay:
    """The host's half of the API relay: Unix socket DIR/PORT -> 127.0.0.1:PORT."""

    def __init__(self, directory: Path, port: int) -> None:
        self.path = str(directory / str(port))
        self.port = port
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(64)
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
                t = socket.create_connection(("127.0.0.1", self.port))
            except OSError:
                return
            threading.Thread(target=pipe, args=(c, t), daemon=True).start()
            threading.Thread(target=pipe, args=(t, c), daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def agent(ns: str, unix_dir: Path, ports: list[int], endpoints: dict[str, str]) -> subprocess.Popen[str]:
    """`netns_agent.py serve` in `ns`, once it says it is ready."""
    eps = ",".join(f"{a}={n}" for a, n in endpoints.items())
    p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(HERE / "netns_agent.py"), "serve",
                          str(unix_dir), ",".join(map(str, ports)), eps], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def rules(ns: str) -> str:
    """The namespace's iptables and nftables rules, for a failure's message."""
    out = [subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          timeout=30).stdout for cmd in (["iptables-save"], ["nft", "list", "ruleset"])]
    return "\n".join(out)


def probe(ns: str, vip: str, port: int, n: int = 30) -> Counter[str]:
    """Where `n` connections to vip:port from inside `ns` land, by endpoint name."""
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, str(HERE / "netns_agent.py"), "probe",
                          vip, str(port), str(n)], capture_output=True, text=True, timeout=120, check=True)
    return Counter(json.loads(out.stdout))


def kube_proxy(exe: str, ns: str, kubeconfig: Path, node: str, mode: str,
               log: Path, min_sync: str | None = None) -> subprocess.Popen[bytes]:
    """kube-proxy for Node `node` in `ns` (`mode`: iptables or nftables; `min_sync`: its
    --iptables-min-sync-period, else its default, 1s; v1.36 has no --nftables-min-sync-period)."""
    extra = ["--iptables-min-sync-period", min_sync] if min_sync else []
    with open(log, "wb") as out:
        return subprocess.Popen(["ip", "netns", "exec", ns, exe, "--kubeconfig", str(kubeconfig),
                                 "--hostname-override", node, "--proxy-mode", mode,
                                 "--conntrack-max-per-core", "0", "--v", "2", *extra],
                                stdout=out, stderr=subprocess.STDOUT)
