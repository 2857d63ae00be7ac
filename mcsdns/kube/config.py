"""Clusters named on the command line (`--cluster NAME=KUBECONFIG[@CONTEXT]`,
`--kubeconfig`, `--context`) or by a member file, and their clients, with one form of error
for every command."""

from __future__ import annotations

from ..ops.errors import ConfigError
from .apiclient.client import TIMEOUT, Client
from .apiclient.kubeconfig import KubeconfigError, load
from .apiclient.transport import Timeout, Transport


def connect(kubeconfig: str | None, context: str | None, *, member: str = "", origin: str = "",
            in_cluster: bool = False, pool: int | None = None, timeout: Timeout = TIMEOUT,
            data_only: bool = False, allow_exec: bool = False) -> Client:
    """A client of `kubeconfig.load(kubeconfig, context, in_cluster, data_only=...,
    allow_exec=...)` (no request is made); a kubeconfig that does not load is one ConfigError
    line, the same in every command: "<the flag that named it>: cannot load kubeconfig: <file,
    context, reason>" (`origin`: that flag, when it is not --cluster/--kubeconfig/--context),
    caused by the KubeconfigError."""
    try:
        cfg = load(kubeconfig, context, in_cluster, data_only=data_only, allow_exec=allow_exec)
        return Client(Transport(cfg, pool or 10), member, timeout)
    except KubeconfigError as e:
        at = f"@{context}" if context else ""
        flag = origin or (f"--cluster {member}={kubeconfig}{at}" if member
                          else f"--context {context}" if context and (e.context or not kubeconfig)
                          else f"--kubeconfig {kubeconfig}" if kubeconfig else "")
        raise ConfigError(f"{flag + ': ' if flag else ''}cannot load kubeconfig: {e}") from e


def parse_cluster(spec: str) -> tuple[str, str, str | None]:
    """`--cluster NAME=KUBECONFIG[@CONTEXT]` -> (name, kubeconfig, context or None)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ConfigError(f"--cluster {spec}: expected NAME=KUBECONFIG[@CONTEXT]")
    path, _, ctx = rest.partition("@")
    return name, path, ctx or None
