"""`mcsdns show`: the clusterset's inventory, read-only. Per service: which members export
it, which import it, its ClusterSetIP(s), its conflicts and its locality state; per member:
whether its API answers, its cluster ID and when its credential expires.

It reads what `mcsdns diagnose` reads, the same way (mcsdns.diagnose: members, collect, and
the checks whose verdicts it shows); `inventory` builds the rows, `render` prints them as a
table or JSON. Nothing here writes to a cluster."""
