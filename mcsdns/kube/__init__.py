"""The one Kubernetes watch layer shared by `mcsdns serve` (sources/kube.py) and `mcsdns controller`."""
