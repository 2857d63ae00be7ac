"""`import mcsdns` leaves the `kubernetes` package's unused parts unloaded (a shorter
start), yet every part and name of the package is there when asked for."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import mcsdns.kube.client
loaded = sorted(m for m in ("kubernetes.dynamic", "kubernetes.stream", "kubernetes.watch",
                            "kubernetes.leaderelection", "kubernetes.informer") if m in sys.modules)
import kubernetes
from kubernetes import client, config
from kubernetes.watch import Watch
assert client.Configuration and config.load_kube_config and Watch
import importlib.metadata
assert kubernetes.__version__ == importlib.metadata.version("kubernetes"), kubernetes.__version__
assert kubernetes.dynamic.DynamicClient  # a part nobody imported yet, as an attribute
print(",".join(loaded) or "none")
"""


def test_unused_parts_are_not_loaded_but_all_are_there() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


def test_a_package_imported_first_is_left_alone() -> None:
    probe = "import kubernetes, sys; import mcsdns; assert 'kubernetes.dynamic' in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
