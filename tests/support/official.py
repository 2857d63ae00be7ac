"""The official `kubernetes` Python client, as another program (a controller, an operator)
would use it against the test API server: writes made outside mcsdns."""

from __future__ import annotations

from kubernetes import client, config


def official_client(kubeconfig: str) -> client.ApiClient:
    """An ApiClient configured by the official loader from `kubeconfig`."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    return client.ApiClient(cfg)
