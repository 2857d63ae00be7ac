"""The member kubeconfig `mcsdns join` hands to the controller: the admin kubeconfig's
cluster (server, CA inlined, TLS server name), the joined ServiceAccount's token, one
context named for the member."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

from ..kube.config import KubeconfigError

Obj = dict[str, Any]
CLUSTER_KEYS = ("server", "certificate-authority-data", "tls-server-name", "insecure-skip-tls-verify",
                "proxy-url")


def _files(kubeconfig: str | None) -> list[Path]:
    if kubeconfig:
        return [Path(kubeconfig)]
    env = os.environ.get("KUBECONFIG", "")
    paths = [Path(p) for p in env.split(os.pathsep) if p] if env else [Path.home() / ".kube" / "config"]
    return [p for p in paths if p.exists()] or paths[:1]


def _load(path: Path) -> Obj:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise KubeconfigError(f"{path}: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (a YAML mapping)")
    return doc


def _named(doc: Obj, section: str, name: str) -> Obj | None:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(section.rstrip("s")) or {}
    return None


def admin_cluster(kubeconfig: str | None, context: str | None) -> Obj:
    """The cluster entry the admin kubeconfig's `context` (default: current) uses, with a
    CA file inlined as certificate-authority-data; the first file defining a name wins,
    as kubectl merges $KUBECONFIG."""
    docs = [(p, _load(p)) for p in _files(kubeconfig)]
    ctx_name = context or next((d.get("current-context") for _, d in docs if d.get("current-context")), None)
    if not ctx_name:
        raise KubeconfigError("no context given and no current-context")
    ctx = next((c for _, d in docs if (c := _named(d, "contexts", ctx_name)) is not None), None)
    if ctx is None:
        raise KubeconfigError(f"context {ctx_name!r} not found")
    want = str(ctx.get("cluster"))
    found = next(((p, c) for p, d in docs if (c := _named(d, "clusters", want)) is not None), None)
    if found is None:
        raise KubeconfigError(f"context {ctx_name!r}: cluster {ctx.get('cluster')!r} not found")
    path, cluster = found
    out = {k: cluster[k] for k in CLUSTER_KEYS if k in cluster}
    ca = cluster.get("certificate-authority")
    if ca and "certificate-authority-data" not in out:
        ca_path = Path(ca) if Path(ca).is_absolute() else path.parent / ca
        try:
            out["certificate-authority-data"] = base64.b64encode(ca_path.read_bytes()).decode()
        except OSError as e:
            raise KubeconfigError(f"{path}: certificate-authority {ca}: {e.strerror}") from None
    return out


def member_kubeconfig(member: str, cluster: Obj, user: str, token: str) -> Obj:
    """A kubeconfig of one context, `member`, authenticating with `token`."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": member,
            "clusters": [{"name": member, "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": member, "context": {"cluster": member, "user": user}}]}


def dump(cfg: Obj) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)
