"""`mcsdns join`/`leave` run as a user runs them (a process), and what join leaves in the
controller's members Secret."""

from __future__ import annotations

import base64
import subprocess
import sys

import yaml

from support.controller_env import Cluster
from support.helpers import REPO

NS = "mcsdns-system"


def mcsdns(*args: str) -> tuple[int, str, str]:
    out = subprocess.run([sys.executable, "-m", "mcsdns", *args], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    return out.returncode, out.stdout, out.stderr


def join(member: Cluster, ctl: Cluster, name: str, *extra: str) -> str:
    rc, _, err = mcsdns("join", name, "--kubeconfig", str(member.kubeconfig),
                        "--controller-kubeconfig", str(ctl.kubeconfig), *extra)
    assert rc == 0, err
    return err


def secret_key(ctl: Cluster, name: str) -> dict[str, object] | None:
    s = ctl.api.get("Secret", NS, "mcsdns-members")
    data = (s or {}).get("data") or {}
    return yaml.safe_load(base64.b64decode(data[name])) if name in data else None


def mcsdns_proc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
