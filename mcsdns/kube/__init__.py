"""Kubernetes, once for `mcsdns serve` (sources/kube.py), `mcsdns controller` and
`mcsdns diagnose`: the generic API client and list+watch (`apiclient`, a subpackage with
nothing of Multi-Cluster Services in it), and here what is ours: the resources and their
paths (`resources`), group and label names and what a valid cluster ID is (`names`), reading
a cluster's ID (`clusterid`), the clusters named on the command line and their clients
(`config`) and the RBAC each binary needs (`permissions`). Imports nothing of mcsdns but `ops`."""
