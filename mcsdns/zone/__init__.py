"""The zone: one service's records (`records`, ordered by `locality`), the served
names with their pre-rendered answers (`zone`), the content digest, serial and IXFR
journal (`journal`, `serial`), and the master-file printer (`zonefile`).

May import mcsdns.dns, mcsdns.data and mcsdns.ops; imported by server and the
binaries. It calls nothing above it: changes come in through publish.publisher."""
