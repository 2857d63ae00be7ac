"""Serving: the socket-free zone `pipeline` (store → records via `builder` → the one
owner of the zone version, `publisher` → the `cache` of responses, laid out by
`response` → `handler`), the `listeners` (UDP and TCP: `udp`, `tcp`, and the C extension
`_batchio` for batched UDP), zone transfers (`xfr`), NOTIFY (`notify`) and the
--state-dir writer (`statekeeper`). This file: socket helpers for the listeners.

May import mcsdns.dns, mcsdns.zone, mcsdns.data, mcsdns.sources (sync status) and
mcsdns.ops; imported only by the roles and the CLIs."""
