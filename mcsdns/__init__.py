"""mcsdns: authoritative DNS for the Kubernetes Multi-Cluster Services zone clusterset.local."""

__version__ = "0.1.0"
