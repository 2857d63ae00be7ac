"""A real control plane whose port a client socket took in the meantime is started again
(tests/support/realk8s.py `run_up`), so a collision of ports fails no test run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.realk8s import TRIES, run_up

SCRIPT = """#!/bin/sh
n=$(cat "{count}" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "{count}"
if [ "$n" -le {fails} ]; then
  echo 'listen tcp 127.0.0.1:44688: bind: {error}' >&2
  echo 'realk8s: error: kube-apiserver exited' >&2; exit 1
fi
echo "{home}/$2/kubeconfig"
"""


def fake(tmp_path: Path, fails: int, error: str = "address already in use") -> tuple[str, Path]:
    count = tmp_path / "count"
    sh = tmp_path / "realk8s.sh"
    sh.write_text(SCRIPT.format(count=count, fails=fails, error=error, home=tmp_path))
    sh.chmod(0o755)
    return str(sh), count


def test_a_start_whose_port_was_taken_runs_again(tmp_path: Path) -> None:
    sh, count = fake(tmp_path, fails=2)
    assert run_up(sh, "a", {}) == tmp_path / "a" / "kubeconfig"
    assert count.read_text().strip() == "3"


def test_other_failures_are_not_run_again(tmp_path: Path) -> None:
    sh, count = fake(tmp_path, fails=1, error="permission denied")
    with pytest.raises(RuntimeError, match="permission denied"):
        run_up(sh, "a", {})
    assert count.read_text().strip() == "1"


def test_a_port_taken_every_time_fails_after_the_last_try(tmp_path: Path) -> None:
    sh, count = fake(tmp_path, fails=TRIES)
    with pytest.raises(RuntimeError, match="address already in use"):
        run_up(sh, "a", {})
    assert count.read_text().strip() == str(TRIES)
