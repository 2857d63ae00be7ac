"""`mcsdns records` prints what `mcsdns serve` answers; logs can be JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import EXAMPLE, REPO, run_server


def records(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "mcsdns", "records", *args], check=True,
                          capture_output=True, text=True, cwd=REPO, timeout=60).stdout


def test_records_match_served_answers(tmp_path: Path) -> None:
    text = records("--manifests", str(EXAMPLE))
    rrsets: dict[tuple[str, str], set[str]] = {}
    for line in text.splitlines():
        if line.startswith("$"):
            continue
        name, ttl, cls, rtype, rdata = line.split("\t")
        assert cls == "IN" and ttl == "5"
        rrsets.setdefault((name, rtype), set()).add(rdata)
    assert ("web.shop.svc.clusterset.local.", "A") in rrsets
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        for (name, rtype), want in rrsets.items():
            r = srv.query(name, rtype, tcp=True)
            got = {rd.to_text() for rr in r.answer for rd in rr}
            if rtype == "SOA":
                continue  # serial is the start time of each process
            assert got == want, (name, rtype)


def test_records_rejects_a_bad_cluster_id() -> None:
    p = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--manifests", str(EXAMPLE),
                        "--cluster-id", "Bad_ID"], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "cluster-id" in p.stderr


def test_json_logs(tmp_path: Path) -> None:
    mdir = tmp_path / "m"
    mdir.mkdir()
    (mdir / "bad.yaml").write_text("kind: ServiceImport\nmetadata: {name: x, namespace: y}\nspec: {}\n")
    with run_server(["--manifests", str(mdir), "--log-format", "json"], tmp_path) as srv:
        lines = [json.loads(line) for line in srv.logs().splitlines() if line.startswith("{")]
    assert any(rec["level"] == "WARNING" and "y/x" in rec["msg"] for rec in lines)
    assert all({"time", "level", "logger", "msg"} <= rec.keys() for rec in lines)
