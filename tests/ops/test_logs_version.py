"""Operator-facing output: RFC 3339 log timestamps, JSON event fields, CoreDNS-style query
lines, errors printed once, --version, process_* metrics and the TCP request histogram."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import pytest
from fakeapi import KubeAPI
from support.controller_env import Kube, run_controller
from support.helpers import EXAMPLE, REPO, Server, run_server, wait_for
from support.kube_objects import example_objects

from mcsdns import __version__

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TEXT_LINE = re.compile(r"^(\S+) \[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] [\w.]+: ")
# CoreDNS log plugin: {remote}:{port} - {>id} "{type} {class} {name} {proto} {size} {>do} {>bufsize}"
#                     {rcode} {>rflags} {rsize} {duration}
QUERY_LINE = re.compile(r'\[INFO\] mcsdns\.query: (\S+):(\d+) - (\d+) "(\S+) (\S+) (\S+) (udp|tcp) (\d+) '
                        r'(true|false) (\d+)" (\S+) (\S+) (\d+) (\d+(?:\.\d+)?)s$')
NAME = "web.shop.svc.clusterset.local."


def mcsdns(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=30, env=env)


def json_lines(srv: Server) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in srv.logs().splitlines() if ln.startswith("{")]


def test_text_timestamps_are_rfc3339_utc_milliseconds(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        assert wait_for(lambda: "serial" in srv.logs())
        lines = srv.logs().splitlines()
    assert len(lines) >= 3
    for ln in lines:
        m = TEXT_LINE.match(ln)
        assert m and TIME.match(m.group(1)), ln


def test_json_lines_have_rfc3339_time_and_event_fields(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE), "--log-format", "json"], tmp_path) as srv:
        assert wait_for(lambda: any(r.get("event") == "serial" for r in json_lines(srv)))
        recs = json_lines(srv)
        served = srv.query("clusterset.local.", "SOA").answer[0][0].serial
    assert all(TIME.match(r["time"]) for r in recs), recs
    now = time.time()
    for r in recs:
        t = time.mktime(time.strptime(r["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert abs(t - now) < 60  # UTC, not local time
    listen = next(r for r in recs if r.get("event") == "listening")
    assert (listen["address"], listen["port"], listen["zone"]) == ("127.0.0.1", srv.port, "clusterset.local")
    http = next(r for r in recs if r.get("event") == "listening_http")
    assert http["port"] == srv.http_port
    serial = next(r for r in recs if r.get("event") == "serial")
    assert serial["serial"] == served


def test_json_sync_event_has_counts(tmp_path: Path) -> None:
    with KubeAPI() as api:
        objs = example_objects()
        for o in objs:
            api.put(o)
        kc = api.write_kubeconfig(tmp_path / "kubeconfig")
        with run_server(["--kubeconfig", str(kc), "--log-format", "json"], tmp_path) as srv:
            assert wait_for(lambda: any(r.get("event") == "synced" for r in json_lines(srv)))
            recs = json_lines(srv)
    synced = next(r for r in recs if r.get("event") == "synced")
    assert synced["service_imports"] == sum(o["kind"] == "ServiceImport" for o in objs)
    assert synced["endpoint_slices"] == sum(o["kind"] == "EndpointSlice" for o in objs)
    assert any(r.get("event") == "source_connected" and r["api"] for r in recs)


def _udp(srv: Server, q: dns.message.Message) -> tuple[int, bytes]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(2)
        s.sendto(q.to_wire(), srv.addr)
        return s.getsockname()[1], s.recv(65535)


def _tcp(srv: Server, q: dns.message.Message) -> tuple[int, bytes]:
    with socket.create_connection(srv.addr, timeout=2) as s:
        w = q.to_wire()
        s.sendall(len(w).to_bytes(2, "big") + w)
        f = s.makefile("rb")
        return s.getsockname()[1], f.read(int.from_bytes(f.read(2), "big"))


def query_lines(srv: Server) -> list[re.Match[str]]:
    return [m for ln in srv.logs().splitlines() if (m := QUERY_LINE.search(ln))]


@pytest.mark.parametrize("batchio", ["1", "0"])
def test_query_log_lines_in_coredns_style(tmp_path: Path, batchio: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCSDNS_BATCHIO", batchio)
    q1 = dns.message.make_query(NAME, "A", use_edns=0, payload=1232, want_dnssec=True)
    q2 = dns.message.make_query("nope.shop.svc.clusterset.local.", "AAAA")
    q3 = dns.message.make_query(NAME, "SRV", use_edns=0, payload=4096)
    with run_server(["--manifests", str(EXAMPLE), "--log-queries"], tmp_path) as srv:
        sent = [("udp", q1, *_udp(srv, q1)), ("tcp", q2, *_tcp(srv, q2)), ("tcp", q3, *_tcp(srv, q3)),
                ("udp", q1, *_udp(srv, q1))]  # the second time from the response cache
        assert wait_for(lambda: len(query_lines(srv)) == 4)
        lines = query_lines(srv)
    want = [
        ("A", "true", "1232", "NOERROR"),
        ("AAAA", "false", "512", "NXDOMAIN"),
        ("SRV", "false", "4096", "NOERROR"),
        ("A", "true", "1232", "NOERROR"),
    ]
    for m, (proto, q, port, resp), (qtype, do, bufsize, rcode) in zip(lines, sent, want, strict=True):
        (client, cport, qid, typ, cls, name, p, size, dobit, bsize, rc, flags, rsize, dur) = m.groups()
        assert (client, int(cport), int(qid)) == ("127.0.0.1", port, q.id)
        assert (typ, cls, name, p, int(size)) == (qtype, "IN", q.question[0].name.to_text(), proto,
                                                  len(q.to_wire()))
        assert (dobit, bsize, rc, int(rsize)) == (do, bufsize, rcode, len(resp))
        r = dns.message.from_wire(resp)
        assert flags.split(",") == [f.lower() for f in ("QR", "AA", "TC", "RD", "RA", "AD", "CD")
                                    if r.flags & dns.flags.Flag[f]]
        assert 0 < float(dur) < 1


def test_query_log_json_fields(tmp_path: Path) -> None:
    q = dns.message.make_query(NAME, "A")
    with run_server(["--manifests", str(EXAMPLE), "--log-queries", "--log-format", "json"], tmp_path) as srv:
        port, resp = _udp(srv, q)
        assert wait_for(lambda: any(r["logger"] == "mcsdns.query" for r in json_lines(srv)))
        rec = next(r for r in json_lines(srv) if r["logger"] == "mcsdns.query")
    assert {k: rec[k] for k in ("client", "port", "id", "qtype", "qclass", "qname", "proto", "size", "do",
                                "bufsize", "rcode", "rflags", "rsize")} == {
        "client": "127.0.0.1", "port": port, "id": q.id, "qtype": "A", "qclass": "IN", "qname": NAME,
        "proto": "udp", "size": len(q.to_wire()), "do": False, "bufsize": 512, "rcode": "NOERROR",
        "rflags": "qr,aa,rd", "rsize": len(resp)}
    assert isinstance(rec["duration"], float) and rec["duration"] > 0
    print(f"\nquery duration logged: {rec['duration']:.6f} s")


@pytest.mark.parametrize("command", ["serve", "records"])
def test_bad_kubeconfig_error_printed_once(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [\n")
    args = ["--listen", "127.0.0.1:0"] if command == "serve" else []
    for kc in (bad, tmp_path / "missing"):
        r = mcsdns(command, *args, "--kubeconfig", str(kc))
        assert r.returncode == 2
        out = r.stdout + r.stderr
        assert "Traceback" not in out
        assert len([ln for ln in out.splitlines() if str(kc) in ln]) == 1, out


def test_bad_kubeconfig_with_workers_stops_instead_of_restarting(tmp_path: Path) -> None:
    kc = tmp_path / "missing"
    r = mcsdns("serve", "--listen", "127.0.0.1:0", "--workers", "2", "--kubeconfig", str(kc))
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "restarting" not in out
    assert len([ln for ln in out.splitlines() if str(kc) in ln]) == 1, out


@pytest.mark.parametrize("args", [[], ["serve"], ["records"], ["controller"]])
def test_version(args: list[str]) -> None:
    r = mcsdns(*args, "--version", env={k: v for k, v in os.environ.items() if k != "MCSDNS_BATCHIO"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in (f"mcsdns {__version__} (UDP: recvmmsg/sendmmsg extension)",
                                f"mcsdns {__version__} (UDP: plain; extension not built)")
    off = mcsdns(*args, "--version", env=dict(os.environ, MCSDNS_BATCHIO="0"))
    assert off.returncode == 0
    assert off.stdout.strip() == f"mcsdns {__version__} (UDP: plain; extension disabled by MCSDNS_BATCHIO=0)"


def samples(text: str) -> dict[str, float]:
    return {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1])
            for ln in text.splitlines() if ln and not ln.startswith("#")}


def check_process_metrics(m: dict[str, float], started: float) -> None:
    assert m["process_resident_memory_bytes"] > 10 << 20
    assert m["process_virtual_memory_bytes"] >= m["process_resident_memory_bytes"]
    assert m["process_open_fds"] > 3
    assert m["process_max_fds"] >= m["process_open_fds"]
    assert 0 < m["process_cpu_seconds_total"] < 120
    assert started - 2 <= m["process_start_time_seconds"] <= time.time()
    assert m[f'mcsdns_build_info{{version="{__version__}"}}'] == 1


def test_process_metrics_on_serve(tmp_path: Path) -> None:
    started = time.time()
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        m = samples(srv.http("/metrics")[1])
        check_process_metrics(m, started)
        assert abs(m["process_start_time_seconds"] - proc_start(srv.proc.pid)) < 0.05


def proc_start(pid: int) -> float:
    """Start time of process `pid` (Unix time), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    ticks = int(stat[stat.rfind(b")") + 2:].split()[19])
    btime = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines()
                 if ln.startswith("btime "))
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def proc_rss(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_process_metrics_summed_across_workers(tmp_path: Path) -> None:
    started = time.time()
    with run_server(["--manifests", str(EXAMPLE), "--workers", "2"], tmp_path) as srv:
        pids = [srv.proc.pid, *(int(p) for p in re.findall(r"worker \d started \(pid (\d+)\)", srv.logs()))]
        assert len(pids) == 3
        time.sleep(0.5)  # a fresh snapshot from each worker
        m = samples(srv.http("/metrics")[1])
        check_process_metrics(m, started)
        rss = sum(proc_rss(p) for p in pids)
        fds = sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids)
        supervisor_start = proc_start(pids[0])
    assert 0.8 * rss < m["process_resident_memory_bytes"] < 1.2 * rss  # the sum, not one process's
    assert abs(m["process_open_fds"] - fds) <= 6
    assert abs(m["process_start_time_seconds"] - supervisor_start) < 0.05  # the supervisor's


def test_controller_process_metrics_and_json_logs(tmp_path: Path) -> None:
    with KubeAPI() as api:
        kc = api.write_kubeconfig(tmp_path / "a.kubeconfig", "a")
        Kube(kc).cluster_id("east")
        started = time.time()
        with run_controller(["--cluster", f"a={kc}", "--log-format", "json"], tmp_path) as ctl:
            assert wait_for(ctl.ready)
            m = ctl.metrics()
            recs = [json.loads(ln) for ln in ctl.logs().splitlines() if ln.startswith("{")]
    check_process_metrics(m, started)
    assert sum(k.startswith("mcsdns_build_info") for k in m) == 1
    assert recs and all(TIME.match(r["time"]) for r in recs)
    member = next(r for r in recs if r.get("event") == "member")
    assert (member["cluster"], member["cluster_id"], member["kubeconfig"]) == ("a", "east", str(kc))
    synced = next(r for r in recs if r.get("event") == "synced")
    assert synced["reconciles"] == sum(synced["results"].values())


def test_tcp_requests_are_timed(tmp_path: Path) -> None:
    count = 'mcsdns_dns_request_duration_seconds_count{proto="tcp"}'
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        before = srv.metric(count)
        for _ in range(5):
            srv.query(NAME, tcp=True)
        with socket.create_connection(srv.addr, timeout=2) as s:  # 3 pipelined on one connection
            w = dns.message.make_query(NAME, "A").to_wire()
            s.sendall((len(w).to_bytes(2, "big") + w) * 3)
            f = s.makefile("rb")
            for _ in range(3):
                f.read(int.from_bytes(f.read(2), "big"))
        assert wait_for(lambda: srv.metric(count) == before + 8)
        text = srv.http("/metrics")[1]
    m = samples(text)
    assert m['mcsdns_dns_request_duration_seconds_bucket{le="+Inf",proto="tcp"}'] == before + 8
    assert 0 < m['mcsdns_dns_request_duration_seconds_sum{proto="tcp"}'] < 8
    assert 'mcsdns_dns_request_duration_seconds_bucket{le="0.00025",proto="tcp"}' in m
