"""Publishing: the socket-free zone `pipeline` (store → records via `builder` → the one owner
of the zone version, `publisher` → the nameserver's response cache) and the --state-dir writer
(`statekeeper`). What the nameserver answers from is what is published here.

May import mcsdns.nameserver, mcsdns.zone, mcsdns.data, mcsdns.sources (sync status) and
mcsdns.ops; imported only by the roles and the CLIs."""
