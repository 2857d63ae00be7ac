"""Member onboarding: `mcsdns join` and `mcsdns leave`.

`layout` names what join creates (namespace, ServiceAccount, ClusterRole from
mcsdns.kube.permissions, binding, the members Secret) and the label that records the
member on each; `record` reads that label back (a cluster is joined under one name);
`objects` applies them idempotently; `contents` finds what else a namespace holds;
`kubeconfig` reads the admin kubeconfig's cluster and writes the member's (inline data
only); `join` and `leave` are the two commands' work. May import mcsdns.kube, mcsdns.ops
and the controller's ownership labels (mcsdns.controller.exports); imported by cli_join
(when join or leave runs) and by diagnose (the names in `layout`).
"""
