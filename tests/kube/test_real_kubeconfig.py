"""Against a real kube-apiserver v1.36: a kubeconfig is read as kubectl reads it. The string
"false" is not a boolean (main read it as true and connected without the CA), insecure with a
CA is refused, and `as` impersonates: Forbidden where `kubectl` (with the same file) is
Forbidden, allowed where it is allowed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.realk8s import RealK8s

from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import Rejected
from mcsdns.kube.resources import NAMESPACES

ROOT = Path(__file__).resolve().parents[2]


def variant(real_k8s: RealK8s, tmp_path: Path, cluster: dict[str, Any] | None = None,
            user: dict[str, Any] | None = None, drop_ca: bool = False) -> Path:
    """The admin kubeconfig with its current context's cluster and user entries changed."""
    cfg = yaml.safe_load(real_k8s.kubeconfig.read_text())
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
    c = next(e["cluster"] for e in cfg["clusters"] if e["name"] == ctx["cluster"])
    u = next(e["user"] for e in cfg["users"] if e["name"] == ctx["user"])
    if c.get("certificate-authority"):  # absolute: the copy is elsewhere
        c["certificate-authority"] = str(real_k8s.kubeconfig.parent / c["certificate-authority"])
    if drop_ca:
        c.pop("certificate-authority", None)
        c.pop("certificate-authority-data", None)
    c.update(cluster or {})
    u.update(user or {})
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def mcsdns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def kubectl(kc: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    exe = shutil.which("kubectl")
    if exe is None:
        return None
    return subprocess.run([exe, "--kubeconfig", str(kc), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("cluster", "drop_ca", "want"), [
    ({"insecure-skip-tls-verify": "false"}, True, "insecure-skip-tls-verify must be true or false"),
    ({"insecure-skip-tls-verify": True}, False, "specifying a root certificates file with the insecure flag"),
], ids=["string-false-without-ca", "insecure-with-ca"])
def test_what_kubectl_refuses_does_not_connect(cluster: dict[str, Any], drop_ca: bool, want: str,
                                               real_k8s: RealK8s, tmp_path: Path) -> None:
    """Main: diagnose connected (the string "false" read as true: no verification at all; the
    CA silently dropped). Now exit 2, one line, as kubectl refuses the file."""
    kc = variant(real_k8s, tmp_path, cluster, drop_ca=drop_ca)
    run = mcsdns("diagnose", "--kubeconfig", str(kc))
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1 and want in err[0], (run.returncode, run.stdout, run.stderr)
    ref = kubectl(kc, "get", "namespaces")
    assert ref is None or ref.returncode != 0


def test_impersonation_is_forbidden_where_kubectl_is_forbidden(real_k8s: RealK8s, tmp_path: Path) -> None:
    """The admin's kubeconfig with `as: nobody-user`: a list is 403 (main listed as admin);
    with `as-groups: [system:masters]` too it is allowed again (the group is sent)."""
    nobody = variant(real_k8s, tmp_path, user={"as": "nobody-user"})
    c = Client.load(str(nobody), None)
    with pytest.raises(Rejected) as e:
        c.get(NAMESPACES.path())
    assert e.value.status == 403
    assert 'User "nobody-user" cannot list' in json.loads(e.value.body or "{}")["message"]
    ref = kubectl(nobody, "get", "namespaces")
    assert ref is None or (ref.returncode != 0 and "Forbidden" in ref.stderr), ref
    masters = variant(real_k8s, tmp_path, user={"as": "nobody-user", "as-groups": ["system:masters"]})
    assert Client.load(str(masters), None).get(NAMESPACES.path())["kind"] == "NamespaceList"
    ref = kubectl(masters, "get", "namespaces")
    assert ref is None or ref.returncode == 0, ref
