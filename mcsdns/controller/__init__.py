"""The companion sync controller (`mcsdns controller`), KEP-1645 ServiceExport → ServiceImport.

members (`clusters`) → informer caches (`informers`) → work queue (`queue`) → one
reconcile per service (`reconcile`), which builds each kind's desired state
(`imports`, `derived`, `slices`, `status`), compares it (`views`) and writes through one
write and error policy (`writes`); leader election (`lease`), ClusterSetIPs (`ipam`).
May import mcsdns.kube, mcsdns.data, mcsdns.ops, mcsdns.cli_controller (its flags and
the ClusterSetIP mode names) and (its CLI, for the version line) mcsdns.server.udp;
nothing imports it but the CLIs (when `mcsdns controller` runs) and diagnose."""
