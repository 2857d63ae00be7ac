"""DNS transport: the `listeners` (UDP and TCP: `udp`, `tcp` with its connection table
`tcpconns`, and the C extension `_batchio` for batched UDP and cache hits), and the socket
helpers they share (`sockets`). They carry queries to `nameserver.handler.Handler` and its
answers back; nothing here builds an answer.

May import mcsdns.nameserver, mcsdns.dns and mcsdns.ops; imported only by the roles and the
CLIs."""
