"""`mcsdns diagnose`: read-only checks of one cluster or a whole clusterset, from the API's
objects to the DNS answers.

collect (reads each cluster's objects) → checks (pure functions: Results; `liveness`: is a
controller running, `dnsconfig`: would CoreDNS and NodeLocal DNSCache send pods' queries
for the zone to mcsdns (`corefile` reads a Corefile as CoreDNS does, `dnsroute` follows a
query through it, `dnstarget` says where a forward leads); `serverargs`: serve's flags;
`credential`: does each kubeconfig's credential near its expiry) →
probe (DNS answers compared with the objects) → report (text or JSON). A refused read
is one FAIL; the checks that need what it would have read are skipped. May import
mcsdns.kube, mcsdns.data.objects and the controller's pure rules (names, labels, slice
classification, Lease names) and the names `mcsdns join` gives (mcsdns.members.layout);
nothing here writes to a cluster.
"""
