"""The names the Multi-Cluster Services API gives things: API groups and their versions,
labels, the ClusterProperty that holds the cluster ID. One home for the server, the
controller and `diagnose`; imports nothing."""

from __future__ import annotations

MCS_GROUP = "multicluster.x-k8s.io"  # ServiceExport, ServiceImport
ABOUT_GROUP = "about.k8s.io"  # ClusterProperty
PREFERRED = ("v1beta1", "v1alpha1")  # the versions of both groups we speak, preferred first

SERVICE_NAME_LABEL = "multicluster.kubernetes.io/service-name"  # on imported EndpointSlices
SOURCE_CLUSTER_LABEL = "multicluster.kubernetes.io/source-cluster"
CLUSTER_PROPERTY_ID = ("cluster.clusterset.k8s.io", "id.k8s.io")  # names of the ID property, preferred first
