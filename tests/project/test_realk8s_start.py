"""A real control plane whose start failed for a passing reason (its port taken meanwhile;
its process looked for before it ran) is started again (tests/support/realk8s.py `run_up`),
so neither fails a test run; one that failed for good is stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.realk8s import TRIES, run_up

SCRIPT = """#!/bin/sh
if [ "$1" = down ]; then echo "$2" >> "{downs}"; exit 0; fi
n=$(cat "{count}" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "{count}"
if [ "$n" -le {fails} ]; then
  cat "{error}" >&2; echo 'realk8s: error: kube-apiserver exited' >&2; exit 1
fi
echo "{home}/$2/kubeconfig"
"""
TAKEN = "listen tcp 127.0.0.1:44688: bind: address already in use"
NOT_YET = "tail: cannot open '/tmp/h/a/etcd.log' for reading: No such file or directory"


def fake(tmp_path: Path, fails: int, error: str = TAKEN) -> tuple[str, Path]:
    count, said, sh = tmp_path / "count", tmp_path / "error", tmp_path / "realk8s.sh"
    said.write_text(error + "\n")
    downs = tmp_path / "downs"
    sh.write_text(SCRIPT.format(count=count, fails=fails, error=said, home=tmp_path, downs=downs))
    sh.chmod(0o755)
    return str(sh), count


@pytest.mark.parametrize("error", [TAKEN, NOT_YET])
def test_a_start_that_failed_for_a_passing_reason_runs_again(tmp_path: Path, error: str) -> None:
    sh, count = fake(tmp_path, fails=2, error=error)
    assert run_up(sh, "a", {}) == tmp_path / "a" / "kubeconfig"
    assert count.read_text().strip() == "3" and not (tmp_path / "downs").exists()


def test_other_failures_are_not_run_again(tmp_path: Path) -> None:
    sh, count = fake(tmp_path, fails=1, error="permission denied")
    with pytest.raises(RuntimeError, match="permission denied"):
        run_up(sh, "a", {})
    assert count.read_text().strip() == "1"
    assert (tmp_path / "downs").read_text() == "a\n"  # what it started is stopped


def test_a_port_taken_every_time_fails_after_the_last_try(tmp_path: Path) -> None:
    sh, count = fake(tmp_path, fails=TRIES)
    with pytest.raises(RuntimeError, match="address already in use"):
        run_up(sh, "a", {})
    assert count.read_text().strip() == str(TRIES)
