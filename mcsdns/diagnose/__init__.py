"""`mcsdns diagnose`: read-only checks of one cluster or a whole clusterset, from the API's
objects to the DNS answers.

collect (reads each cluster's objects) → checks (pure functions: Results) → probe (DNS
answers compared with the objects) → report (text or JSON). May import mcsdns.kube,
mcsdns.data.objects and the controller's pure rules (names, labels, slice classification);
nothing here writes to a cluster.
"""
