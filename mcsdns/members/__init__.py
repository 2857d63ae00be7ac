"""Member onboarding: `mcsdns join` and `mcsdns leave`, the tools that write what the
controller reads. join gives a member cluster its access and writes its member file (a
kubeconfig, inline data only) to a file or into the members Secret, which the controller
mounts as --members-dir and reads with mcsdns.controller.member (`directory`, `live`);
leave takes both away.

`layout` names what join creates (namespace, ServiceAccount, ClusterRole from
mcsdns.kube.permissions, binding, the members Secret) and the label that records the
member on each; `record` reads that label back (a cluster is joined under one name);
`objects` applies them idempotently; `contents` finds what else a namespace holds;
`kubeconfig` reads the admin kubeconfig's cluster and writes the member's; `secret` puts
and drops the Secret's keys; `join` and `leave` are the two commands' work (`left`: what
leave marks once the member is out). May import mcsdns.kube, mcsdns.ops and the
controller's ownership labels (mcsdns.controller.exports); imported by cli_join (when join
or leave runs) and by diagnose (the names in `layout`).
"""
