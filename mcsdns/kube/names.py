"""The names the Multi-Cluster Services API gives things: API groups and their versions,
labels, the ClusterProperty that holds the cluster ID, and what a valid DNS label and
cluster ID are. One home for the server, the controller and `diagnose`; imports nothing."""

from __future__ import annotations

import re

MCS_GROUP = "multicluster.x-k8s.io"  # ServiceExport, ServiceImport
ABOUT_GROUP = "about.k8s.io"  # ClusterProperty
PREFERRED = ("v1beta1", "v1alpha1")  # the versions of both groups we speak, preferred first

SERVICE_NAME_LABEL = "multicluster.kubernetes.io/service-name"  # on imported EndpointSlices
SOURCE_CLUSTER_LABEL = "multicluster.kubernetes.io/source-cluster"
CLUSTER_PROPERTY_ID = ("cluster.clusterset.k8s.io", "id.k8s.io")  # names of the ID property, preferred first

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?").fullmatch


def is_dns_label(s: str) -> bool:
    """RFC 1123 label: lowercase alphanumerics and '-', 1-63 octets."""
    return _LABEL(s) is not None


def valid_cluster_id(s: str) -> bool:
    """A cluster ID is one DNS label, or two joined by a dot (KEP-2149)."""
    parts = s.split(".")
    return 1 <= len(parts) <= 2 and all(is_dns_label(p) for p in parts)
