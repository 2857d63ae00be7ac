"""The companion sync controller (`mcsdns controller`), KEP-1645 ServiceExport → ServiceImport.

members (`member/`: clients, the --members-dir files, live membership) → informer caches
(`informers`) → a work queue per member (`queue`) → one reconcile per service (`reconcile`:
the exports `merge`d, then each member's sync, an ordered list of kind steps), where each
kind (`kinds/`, one `contract.Contract` each: path, desired object, view, merge, ownership)
is applied by the `engine` (create, update when the view differs, delete; one error policy
by kind and verb); the ClusterSetIP strategy (`clustersetip`: derived Services, which
`kinds.derivedservice` defines, or `ipam`); leader election (`lease`).
May import mcsdns.kube, mcsdns.data, mcsdns.ops, mcsdns.flags (the ClusterSetIP mode
names) and (its CLI, for the version line) mcsdns.transport.udp;
nothing imports it but the CLIs (when `mcsdns controller` runs) and diagnose."""
