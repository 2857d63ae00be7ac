"""Kubernetes, once for `mcsdns serve` (sources/kube.py), `mcsdns controller` and
`mcsdns diagnose`: client configuration (`config`), the one client (`client`) and its one
error taxonomy (`errors`), the resources and their paths (`resources`), group and label
names and what a valid cluster ID is (`names`), reading a cluster's ID (`clusterid`), the
one key type (`keys`), the list+watch reflector (`reflector`), the packed informer cache on
it (`cache`), the informer set of one server (`informers`), the RBAC each binary needs
(`permissions`) and how long a credential lasts (`expiry`). Imports nothing of mcsdns but `ops`."""
