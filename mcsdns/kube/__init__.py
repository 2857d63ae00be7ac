"""Kubernetes, once for `mcsdns serve` (sources/kube.py), `mcsdns controller` and
`mcsdns diagnose`: client configuration (`config`), group and label names (`names`),
the one key type (`keys`), API errors (`errors`), the list+watch reflector (`reflector`),
the packed informer cache on it (`cache`) and the RBAC each binary needs
(`permissions`). Imports nothing else of mcsdns."""
