"""Answering: the `handler` (one query in, its answer out, TSIG checked) over the `cache` of
responses laid out by `response` (the C extension `transport._batchio` replays them for
UDP), zone transfers (`xfr`), NOTIFY to the secondaries (`notify`), and what an internal error
answers (`panics`) and how a refused TSIG request is logged (`tsiglog`). Answers come from the
`zone.Zone` the publishing side keeps; no socket is opened here.

May import mcsdns.dns, mcsdns.zone and mcsdns.ops, never mcsdns.transport; imported by
mcsdns.publish, mcsdns.transport, the roles and the CLIs. `_cannedtype` (C) is the type of
a kept response, whose fields `transport._batchio` reads to answer cache hits in C."""

CACHE_BYTES = 32 << 20  # default response cache budget, both transports together (here: the CLI reads it)
