"""mcsdns: authoritative DNS for the Kubernetes Multi-Cluster Services zone clusterset.local."""

__version__ = "0.1.0"

from .kube import lazy as _lazy  # noqa: E402 - before anything imports `kubernetes`

_lazy.install()
