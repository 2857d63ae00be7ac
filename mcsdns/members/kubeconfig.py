"""The member kubeconfig `mcsdns join` hands to the controller: the admin kubeconfig's
cluster (server, CA inlined, TLS server name), the joined ServiceAccount's token, one
context named for the member."""

from __future__ import annotations

import base64
from typing import Any

import yaml

from ..kube.kubeconfig import Server

Obj = dict[str, Any]


def admin_cluster(s: Server) -> Obj:
    """The kubeconfig cluster entry of `s` (the admin kubeconfig's, as loaded for its
    client), its CA inlined."""
    out: Obj = {"server": s.url}
    if s.ca:
        out["certificate-authority-data"] = base64.b64encode(s.ca.encode()).decode()
    if s.tls_server_name:
        out["tls-server-name"] = s.tls_server_name
    if s.insecure:
        out["insecure-skip-tls-verify"] = True
    if s.proxy_url:
        out["proxy-url"] = s.proxy_url
    return out


def member_kubeconfig(member: str, cluster: Obj, user: str, token: str) -> Obj:
    """A kubeconfig of one context, `member`, authenticating with `token`."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": member,
            "clusters": [{"name": member, "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": member, "context": {"cluster": member, "user": user}}]}


def dump(cfg: Obj) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)
