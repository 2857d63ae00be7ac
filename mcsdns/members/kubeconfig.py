"""The member kubeconfig `mcsdns join` hands to the controller: the admin kubeconfig's
cluster (server without user info, CA inlined, TLS server name), the joined
ServiceAccount's token, one context named for the member: inline data only."""

from __future__ import annotations

import base64
import ssl
from typing import Any

import yaml

from ..kube.apiclient.kubeconfig import Server
from ..ops.errors import ConfigError

Obj = dict[str, Any]


def read_ca(path: str) -> str:
    """The PEM certificates of --certificate-authority PATH; ConfigError when it holds none."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(1 << 20)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cadata=text)
    except (OSError, UnicodeDecodeError, ssl.SSLError, ValueError) as e:
        raise ConfigError(f"--certificate-authority {path}: not PEM certificates: "
                          f"{getattr(e, 'strerror', None) or e}") from e
    if not ctx.cert_store_stats()["x509"]:
        raise ConfigError(f"--certificate-authority {path}: not PEM certificates: none found")
    return text


def admin_cluster(s: Server, insecure: bool = False, ca: str | None = None) -> Obj:
    """The kubeconfig cluster entry of `s` (the admin kubeconfig's, as loaded for its
    client) for the member: its CA (or `ca`, --certificate-authority) inlined. It skips TLS
    verification only with `insecure` (--insecure-skip-tls-verify); ConfigError for an admin
    kubeconfig that skips it without that flag, or for the flag with a CA."""
    ca = ca or s.ca
    if insecure and ca:
        raise ConfigError("--insecure-skip-tls-verify: the member kubeconfig has a CA to verify the server "
                          "with (kubectl refuses both): drop the flag")
    if s.insecure and not insecure and not ca:
        raise ConfigError("the admin kubeconfig skips TLS verification: give the member's CA with "
                          "--certificate-authority FILE, or --insecure-skip-tls-verify to skip it in the "
                          "member kubeconfig too")
    out: Obj = {"server": s.url}  # never with user info (kube.apiclient.kubeconfig keeps it apart)
    if ca:
        out["certificate-authority-data"] = base64.b64encode(ca.encode()).decode()
    if s.tls_server_name:
        out["tls-server-name"] = s.tls_server_name
    if insecure:
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
