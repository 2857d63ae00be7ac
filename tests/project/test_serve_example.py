"""./scripts/serve-example (the README's first command): pip runs on the first start of a fresh
clone and again only when a C extension's source changed; otherwise it serves at once. Needs the
package index for the installs (skips, saying so, without it). The time to the first answer is
printed, not asserted."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from support.helpers import REPO, skip_without_package_index, stop_process, tool
from support.ports import free_port


def start(clone: Path, log: Path) -> tuple[bool, float]:
    """Start serve-example; (whether it ran pip, seconds to the first answer), then stop it."""
    port = free_port()
    env = {**os.environ, "MCSDNS_EXAMPLE_PORTS": f"{port} {free_port()} {free_port()}"}
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen([clone / "scripts/serve-example"], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    try:
        dig = [tool("dig"), "@127.0.0.1", "-p", str(port), "+short", "+norec", "+tries=1", "+time=1",
               "web.shop.svc.clusterset.local", "A"]
        while subprocess.run(dig, capture_output=True, text=True).stdout.strip() != "10.42.0.10":
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
        return "installing" in log.read_text(), time.monotonic() - t0
    finally:
        stop_process(proc)


def test_serve_example_installs_only_when_needed(tmp_path: Path) -> None:
    skip_without_package_index(tmp_path / "probe")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    for f in ("scripts/serve-example", "pyproject.toml", "setup.py"):  # this work tree's, if not committed
        (clone / f).write_bytes((REPO / f).read_bytes())
    runs = []
    for touch in (None, None, "mcsdns/transport/_batchio.c", None):
        if touch:
            (clone / touch).touch()
        runs.append(start(clone, tmp_path / "log"))
        print(f"serve-example{' (after touching ' + touch + ')' if touch else ''}: pip {runs[-1][0]}, "
              f"first answer after {runs[-1][1]:.1f} s")
    assert [ran_pip for ran_pip, _ in runs] == [True, False, True, False]

