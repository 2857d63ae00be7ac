"""`mcsdns records` prints what `mcsdns serve` answers; logs can be JSON."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dns.message
import dns.query
import pytest
from support.helpers import EXAMPLE, REPO, run_server

sys.path.insert(0, str(REPO / "conformance"))
import speclib  # noqa: E402


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


def _wire(srv_port: int, q: dns.message.Message, tcp: bool) -> dns.message.Message:
    """One exchange; the response parsed with one RR per RRset, so duplicates stay visible."""
    if tcp:
        with socket.create_connection(("127.0.0.1", srv_port), timeout=2) as s:
            w = q.to_wire()
            s.sendall(struct.pack("!H", len(w)) + w)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
                chunk = s.recv(65535)
                assert chunk
                buf += chunk
            return dns.message.from_wire(buf[2:], one_rr_per_rrset=True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(q.to_wire(), ("127.0.0.1", srv_port))
        return dns.message.from_wire(s.recv(65535), one_rr_per_rrset=True)


@pytest.mark.parametrize("fixtures", ["rrset-dedup", "example"])
def test_no_rrset_holds_a_record_twice(fixtures: str, tmp_path: Path) -> None:
    """RFC 2181 5: neither `mcsdns records` nor any answer (every name, A/AAAA/SRV, UDP and TCP,
    Answer and Additional) repeats a record, whatever duplicates the objects carry."""
    mdir = EXAMPLE
    if fixtures != "example":
        mdir = tmp_path / "m"
        mdir.mkdir()
        spec = next(s for s in speclib.load_all() if s.stem == fixtures)
        (mdir / "fixtures.yaml").write_text(spec.fixtures_yaml())
    lines = [ln for ln in records("--manifests", str(mdir)).splitlines() if not ln.startswith("$")]
    assert lines and [ln for ln, n in Counter(lines).items() if n > 1] == []
    rrsets = Counter(tuple(ln.split("\t")[::3]) for ln in lines)  # (name, type): records
    if fixtures != "example":
        assert rrsets[("dns.shop.svc.clusterset.local.", "SRV")] == 2  # 42 and 53, once each
        assert rrsets[("peers.shop.svc.clusterset.local.", "SRV")] == 5
        assert rrsets[("peers.shop.svc.clusterset.local.", "A")] == 4
    with run_server(["--manifests", str(mdir)], tmp_path) as srv:
        for (name, rtype), n in rrsets.items():
            for tcp in (False, True):
                q = dns.message.make_query(name, rtype, use_edns=0, payload=1232)
                r = _wire(srv.port, q, tcp)
                if r.flags & dns.flags.TC:
                    continue  # over TCP below
                assert len(r.answer) == n, (name, rtype, tcp)
                for section in (r.answer, r.authority, r.additional):
                    texts = [rr.to_text() for rr in section]
                    assert len(texts) == len(set(texts)), (name, rtype, tcp, texts)


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


def test_serve_and_records_leave_the_controller_and_diagnose_unloaded() -> None:
    """Their sub-parsers are built from flags alone: `serve` does not pay for loading them."""
    code = ("import sys; from mcsdns import cli; a = cli.build_parser().parse_args(['serve']); "
            "cli.config_from(a); import mcsdns.roles.single, mcsdns.roles.supervisor; "
            "print(sorted({m.split('.')[0 if m[0] == 'p' else 1] for m in sys.modules "
            "if m.startswith(('mcsdns.controller', 'mcsdns.diagnose', 'prometheus_client'))}))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=REPO, timeout=60).stdout
    assert out.strip() == "[]"  # nor prometheus_client (/metrics loads it at the first scrape)
