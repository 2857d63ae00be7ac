"""The Kubernetes client configuration from a kubeconfig, for the server, the controller
and `diagnose` alike."""

from __future__ import annotations

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from ..ops.errors import ConfigError


class KubeconfigError(Exception):
    """The configuration could not be loaded; the message is one line, the loader's reason."""


def client_configuration(kubeconfig: str | None, context: str | None,
                         in_cluster: bool = False) -> client.Configuration:
    """Load `kubeconfig` (None: $KUBECONFIG or ~/.kube/config) with `context` (None: its
    current one). With `in_cluster` and neither given, the pod's service account comes
    first. The client makes no retries of its own: callers decide."""
    cfg = client.Configuration()
    try:
        if in_cluster and not kubeconfig and not context:
            try:
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            except ConfigException:
                config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=cfg)
    except Exception as e:  # the loader raises many kinds (ConfigException, OSError, YAML errors...)
        raise KubeconfigError(" ".join(str(e).split())) from e  # a YAML error spans lines
    cfg.retries = 0
    return cfg


def parse_cluster(spec: str) -> tuple[str, str, str | None]:
    """`--cluster NAME=KUBECONFIG[@CONTEXT]` -> (name, kubeconfig, context or None)."""
    name, sep, rest = spec.partition("=")
    if not sep or not name or not rest:
        raise ConfigError(f"--cluster {spec}: expected NAME=KUBECONFIG[@CONTEXT]")
    path, _, ctx = rest.partition("@")
    return name, path, ctx or None
