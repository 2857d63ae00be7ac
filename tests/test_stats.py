"""The metrics layering: `mcsdns.ops.stats` is the bottom layer, the exporter reads only it."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(module: str) -> set[str]:
    code = (f"import sys; import {module}; "
            "print(' '.join(m for m in sys.modules if m == 'mcsdns' or m.startswith('mcsdns.')))")
    return set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True).stdout.split())


def test_stats_imports_nothing_of_mcsdns() -> None:
    assert _loaded_after("mcsdns.ops.stats") == {"mcsdns", "mcsdns.ops", "mcsdns.ops.stats"}


def test_exporter_does_not_import_the_app() -> None:
    assert _loaded_after("mcsdns.ops.metrics") == {"mcsdns", "mcsdns.ops", "mcsdns.ops.stats",
                                                   "mcsdns.ops.metrics"}
