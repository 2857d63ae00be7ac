"""A cluster's ID: the value of its about.k8s.io ClusterProperty (KEP-2149), read and
checked (`names.valid_cluster_id`) once for the controller and `diagnose`."""

from __future__ import annotations

from ..ops.errors import ConfigError
from .apiclient.client import Client
from .apiclient.errors import NotFound
from .names import ABOUT_GROUP, CLUSTER_PROPERTY_ID, PREFERRED, valid_cluster_id
from .resources import CLUSTER_PROPERTIES


def find_cluster_id(client: Client, version: str) -> tuple[str, str] | None:
    """(ClusterProperty name, value) of the cluster ID property, read with about.k8s.io
    `version`; None when there is none."""
    for prop in CLUSTER_PROPERTY_ID:
        try:
            obj = client.get(CLUSTER_PROPERTIES.path(name=prop, version=version))
        except NotFound:
            continue
        return prop, str((obj.get("spec") or {}).get("value") or "")
    return None


def read_cluster_id(client: Client, who: str, hint: str) -> str:
    """The valid cluster ID of the cluster `client` reaches; ConfigError starting with `who`
    when there is none (suggesting `hint` as the alternative) or it is not valid."""
    version = client.preferred(ABOUT_GROUP, PREFERRED)
    found = find_cluster_id(client, version) if version is not None else None
    if found is None:
        raise ConfigError(f"{who}: no ClusterProperty {' or '.join(CLUSTER_PROPERTY_ID)}; "
                          f"create one or pass {hint}")
    prop, value = found
    if not valid_cluster_id(value):
        raise ConfigError(f"{who}: ClusterProperty {prop} value {value!r} "
                          "is not a valid cluster ID (a DNS label or two joined by a dot)")
    return value
