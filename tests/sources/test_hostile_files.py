"""Hostile manifest files: each is refused or skipped, logged and counted, the last good
content of the file is kept, and queries are answered at normal latency meanwhile.

Against `mcsdns serve --manifests` over real sockets on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import dns.rcode
import pytest
from support.helpers import Prober, Server, alias_bomb, clusterset_ip, copy_example, run_server, wait_for

Z = "clusterset.local"


def files_errors(srv: Server, error: str) -> float:
    return srv.metric_sum("mcsdns_source_errors_total", 'source="files"', f'error="{error}"')


def addrs(srv: Server, name: str) -> list[str] | str:
    m = srv.query(name)
    if m.rcode() != dns.rcode.NOERROR:
        return dns.rcode.to_text(m.rcode())
    return sorted(str(rd) for rr in m.answer for rd in rr)


def test_yaml_alias_bomb_is_refused_at_normal_latency(tmp_path: Path) -> None:
    mdir = copy_example(tmp_path / "m")
    evil = mdir / "evil.yaml"
    evil.write_text(clusterset_ip("evil", "10.66.0.1"))
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        assert addrs(srv, f"evil.live.svc.{Z}") == ["10.66.0.1"]
        bomb = alias_bomb(7)  # 4.8 million strings once expanded
        assert len(bomb) < 600
        with Prober(srv) as probe:
            time.sleep(0.2)
            evil.write_text(bomb)
            wait_for(lambda: "evil.yaml: skipped manifest file" in srv.logs())
            time.sleep(0.3)
            wait_for(lambda: probe.count > 50)  # a floor of probes, however slow the machine
        assert probe.lost == 0 and probe.count > 50
        print(f"\nslowest query during the load: {probe.worst * 1000:.0f} ms, "
              f"{probe.worst_cpu * 1000:.0f} ms of the server's CPU")
        # CPU, not wall-clock time (a busy machine stretches that): expanding the aliases costs seconds
        assert probe.worst_cpu < 0.1, f"the server spent {probe.worst_cpu * 1000:.0f} ms of CPU on one query"
        assert re.search(r"evil\.yaml: skipped manifest file: YAML aliases expand to over "
                         r"100000 nodes", srv.logs())
        assert files_errors(srv, "file_aliases") == 1
        assert addrs(srv, f"evil.live.svc.{Z}") == ["10.66.0.1"]  # last good content kept
        # small aliases are still fine
        evil.write_text("x: &ips [10.66.0.3]\n" + clusterset_ip("evil", "0").replace(
            'ips: ["0"]', "ips: *ips"))
        assert wait_for(lambda: addrs(srv, f"evil.live.svc.{Z}") == ["10.66.0.3"])


@pytest.mark.parametrize("name", ["deep.yaml", "deep.json"])
def test_deeply_nested_manifest_is_refused(name: str, tmp_path: Path) -> None:
    """30,000 nested sequences: libyaml's composer overflowed the C stack (the server
    died with SIGSEGV); json raised RecursionError out of every poll."""
    mdir = copy_example(tmp_path / "m")
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        n = 30_000
        (mdir / name).write_text(("a: " if name.endswith(".yaml") else "") + "[" * n + "]" * n)
        wait_for(lambda: srv.proc.poll() is not None or files_errors(srv, "file_too_deep") == 1)
        assert srv.proc.poll() is None, f"the server died: exit {srv.proc.returncode}"
        assert files_errors(srv, "file_too_deep") == 1
        assert re.search(rf"{name}: skipped manifest file: (YAML|JSON) nested", srv.logs())
        (mdir / "new.yaml").write_text(clusterset_ip("new", "10.66.0.4"))
        assert wait_for(lambda: addrs(srv, f"new.live.svc.{Z}") == ["10.66.0.4"])
        assert "Traceback" not in srv.logs()


def test_manifest_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    mdir = copy_example(tmp_path / "m")
    big = mdir / "big.yaml"
    big.write_text(clusterset_ip("big", "10.66.0.5"))
    with run_server(["--manifests", str(mdir), "--max-manifest-bytes", "3000"], tmp_path) as srv:
        assert addrs(srv, f"big.live.svc.{Z}") == ["10.66.0.5"]
        assert addrs(srv, f"web.shop.svc.{Z}") != "NXDOMAIN"  # the example's files are read
        grown = clusterset_ip("big", "10.66.0.6") + "#" * 3000 + "\n"
        big.write_text(grown)
        assert wait_for(lambda: files_errors(srv, "file_too_large") == 1)
        assert f"big.yaml: skipped manifest file: {len(grown)} bytes, over the limit of 3000" \
            in srv.logs()
        assert addrs(srv, f"big.live.svc.{Z}") == ["10.66.0.5"]  # last good content kept
        big.write_text(clusterset_ip("big", "10.66.0.7"))
        assert wait_for(lambda: addrs(srv, f"big.live.svc.{Z}") == ["10.66.0.7"])


def test_fifo_or_device_named_like_a_manifest_is_refused(tmp_path: Path) -> None:
    """A FIFO blocked the reader thread for good (no later change was applied); a
    link to /dev/zero would be read until memory runs out."""
    mdir = copy_example(tmp_path / "m")
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        os.mkfifo(mdir / "pipe.yaml")
        (mdir / "zero.yaml").symlink_to("/dev/zero")
        assert wait_for(lambda: files_errors(srv, "file_not_regular") == 2)
        assert re.search(r"pipe\.yaml: skipped manifest file: not a regular file", srv.logs())
        (mdir / "new.yaml").write_text(clusterset_ip("new", "10.66.0.8"))
        assert wait_for(lambda: addrs(srv, f"new.live.svc.{Z}") == ["10.66.0.8"])


def test_huge_numbers_and_strings_in_objects_are_skipped(tmp_path: Path) -> None:
    """A port of 4,800 digits (YAML hex) made the skip message raise ValueError out of the
    store: the whole change was lost, with a traceback. Values quoted in log lines are
    bounded."""
    mdir = copy_example(tmp_path / "m")
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        docs = [clusterset_ip("good", "10.66.0.9"),
                clusterset_ip("hex", "10.66.0.10").replace("port: 80", "port: 0x" + "f" * 4000),
                clusterset_ip("dec", "10.66.0.11").replace("port: 80", "port: " + "9" * 400),
                clusterset_ip("long", "10.66.0.12").replace("ClusterSetIP", "x" * 100_000)]
        (mdir / "numbers.yaml").write_text("---\n".join(docs))
        assert wait_for(lambda: addrs(srv, f"good.live.svc.{Z}") == ["10.66.0.9"])
        assert wait_for(lambda: srv.metric('mcsdns_skipped_objects_total{kind="ServiceImport"}') == 3)
        for name in ("hex", "dec", "long"):
            assert addrs(srv, f"{name}.live.svc.{Z}") == "NXDOMAIN"
        logs = srv.logs()
        assert "spec.ports: bad port <16000-bit integer>" in logs
        assert "Traceback" not in logs
        assert max(len(line) for line in logs.splitlines()) < 1000
