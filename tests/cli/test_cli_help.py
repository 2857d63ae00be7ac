"""The command line explains itself: every flag of every command has help text, `mcsdns --help`
says what the tool is and lists each command on one line, and the controller's parallelism flag
has its own name, with the old one kept as a deprecated alias that warns once."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeapi import KubeAPI
from support.controller_env import Kube
from support.helpers import REPO

from mcsdns.cli import build_parser

DEPRECATED = "mcsdns: warning: --workers is deprecated: use --concurrent-reconciles"


def mcsdns(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert isinstance(sub.choices, dict)
    return dict(sub.choices)


def command_help() -> dict[str, str]:
    """Each command's one-line help, as given to add_parser(help=...)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help or "" for a in sub._get_subactions()}


def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """Every action of `parser` and of its sub-parsers, with the command it belongs to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, p in action.choices.items():
                yield from walk(p, f"{path} {name}")
        else:
            yield path, action


def test_every_flag_of_every_command_has_help_text() -> None:
    missing = [f"{cmd} {'/'.join(a.option_strings) or a.dest}" for cmd, a in walk(build_parser(), "mcsdns")
               if not a.help or a.help == argparse.SUPPRESS or not a.help.strip()]
    assert not missing, f"no help text: {missing}"
    assert set(commands()) >= {"serve", "records", "controller", "diagnose"}
    assert all(h.strip() for h in command_help().values()), command_help()


def test_the_help_walk_sees_a_flag_without_help() -> None:
    """The walk above reaches the flags of sub-commands (it would find one added without help)."""
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["diagnose"].add_argument("--undocumented")
    assert [a.dest for cmd, a in walk(p, "mcsdns") if not a.help] == ["undocumented"]


def test_main_help_says_what_mcsdns_is_and_lists_each_command_on_one_line() -> None:
    r = mcsdns("--help")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "authoritative DNS server" in out and "Multi-Cluster Services" in out
    assert "clusterset.local" in out and "controller that syncs ServiceExports" in out
    lines = out.splitlines()
    assert lines[0] == "usage: mcsdns [-h] [--version] command ..."
    listed = lines[lines.index("commands:") + 1:]
    for name, text in command_help().items():
        row = next((ln for ln in listed if ln.split()[:1] == [name]), None)
        assert row is not None, f"{name} not listed:\n{out}"
        assert row.split(None, 1)[1] == text and len(row) <= 80, row  # whole, on one line
    assert "--version" in out and "mcsdns COMMAND --help" in out


@pytest.mark.parametrize("command", ["serve", "records", "controller", "diagnose"])
def test_each_command_help_says_what_it_does(command: str) -> None:
    r = mcsdns(command, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: mcsdns {command} ")
    assert f"`mcsdns {command}`:" in r.stdout  # its description


def test_controller_parallelism_has_its_own_name_and_the_old_one_warns_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    ns = build_parser().parse_args(["controller"])
    assert ns.concurrent_reconciles == 16 and capsys.readouterr().err == ""
    ns = build_parser().parse_args(["controller", "--concurrent-reconciles", "5"])
    assert ns.concurrent_reconciles == 5 and capsys.readouterr().err == ""
    ns = build_parser().parse_args(["controller", "--workers", "3", "--workers", "4"])
    err = capsys.readouterr().err.splitlines()
    assert ns.concurrent_reconciles == 4 and len(err) == 1 and err[0].startswith(DEPRECATED), err
    ns = build_parser().parse_args(["controller", "--workers", "3", "--concurrent-reconciles", "7"])
    assert ns.concurrent_reconciles == 7  # the last one given wins, as for any repeated flag
    assert build_parser().parse_args(["serve", "--workers", "2"]).workers == 2  # processes
    assert capsys.readouterr().err.count("deprecated") == 1


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Path]:
    k = KubeAPI()
    k.start()
    kc = k.write_kubeconfig(tmp_path / "a.kubeconfig", "a")
    Kube(kc).cluster_id("east")
    yield kc
    k.stop()


def test_controller_runs_with_the_old_flag_and_says_once_it_is_deprecated(api: Path) -> None:
    r = mcsdns("controller", "--once", "--cluster", f"a={api}", "--workers", "2", "--workers", "3",
               "--log-level", "warning")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("deprecated") == 1 and r.stderr.startswith(DEPRECATED), r.stderr
    r = mcsdns("controller", "--once", "--cluster", f"a={api}", "--concurrent-reconciles", "2",
               "--log-level", "warning")
    assert r.returncode == 0 and "deprecated" not in r.stderr, r.stderr
