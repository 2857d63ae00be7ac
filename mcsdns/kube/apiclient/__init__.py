"""A Kubernetes API client of our own, with nothing of Multi-Cluster Services in it: where and
how to reach a server (`kubeconfig`, `credentials`, `proxy`, `transport`), the client and its
one error taxonomy (`client`, `errors`), how long a credential lasts (`expiry`), what a
kubeconfig read as data may carry (`memberfile`), the one key type (`keys`), and list+watch
(`reflector`, the streaming `listdecode`, the packed informer `cache`, the `informers` of one
server).

Why our own: no Python library has informers; lightkube cannot run v1 exec plugins; the
official `kubernetes` package costs about +150 ms of CPU and +23 MiB at every start and
30 packages in the image. Imports nothing of mcsdns but `ops` (and `kube.names` for the
versions `Client.preferred` prefers)."""
