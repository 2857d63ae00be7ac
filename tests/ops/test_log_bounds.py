"""Logs cannot be flooded or forged from outside: refused transfers and refused signed
queries are rate-limited per source with a "N more suppressed" summary; a value from an
object is escaped and cut (a newline cannot start a line, a huge name is not logged
whole); a slice with thousands of bad endpoints is one line per apply."""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import time
from pathlib import Path
from unittest import mock

import dns.message
import dns.rcode
import dns.tsigkeyring
import pytest
from support.helpers import EXAMPLE, Server, copy_example, run_server, stop_process, wait_for

ZONE = "clusterset.local."
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                       r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] [\w.]+: ")
SUPPRESSED = re.compile(r"(\d+) more suppressed in the last (\d+) s")
BURST = 5  # lines per source per window (mcsdns.ops.logs.Throttle's default)


def stopped_logs(srv: Server) -> str:
    """The server's whole log, after it stopped (what rate limits held back is summarised
    at exit)."""
    stop_process(srv.proc)
    return srv.logs()


def accounted(logs: str, what: str, line: str) -> tuple[int, int]:
    """(lines logged matching `line`, lines reported as suppressed) for the throttle `what`."""
    logged = sum(1 for ln in logs.splitlines() if line in ln)
    held = sum(int(m.group(1)) for ln in logs.splitlines() if what in ln and (m := SUPPRESSED.search(ln)))
    return logged, held


def test_20000_refused_transfers_on_one_connection_log_a_handful(tmp_path: Path) -> None:
    """Pipelined AXFRs from outside --allow-transfer: every one REFUSED, logged a few times
    and summarised (on main: 20,000 lines)."""
    n = 20_000
    wire = dns.message.make_query(ZONE, "AXFR").to_wire()
    framed = len(wire).to_bytes(2, "big") + wire
    with run_server(["--manifests", str(EXAMPLE), "--allow-transfer", "127.0.0.2/32"], tmp_path) as srv:
        t0 = time.monotonic()
        with socket.create_connection(srv.addr, timeout=30) as s:
            sender = threading.Thread(target=lambda: s.sendall(framed * n))
            sender.start()
            f = s.makefile("rb")
            rcodes = []
            for _ in range(n):
                size = int.from_bytes(f.read(2), "big")
                rcodes.append(dns.message.from_wire(f.read(size)).rcode())
            sender.join()
        elapsed = time.monotonic() - t0
        assert rcodes == [dns.rcode.REFUSED] * n
        logs = stopped_logs(srv)
    logged, held = accounted(logs, "refused transfers", "transfer AXFR from ('127.0.0.1'")
    windows = 1 + int(elapsed // 60)  # the limit is per minute: a slow run may span more
    print(f"\n{n} refused AXFRs in {elapsed:.1f} s: {logged} lines logged, {held} suppressed")
    assert logged + held == n, logs[-2000:]
    assert logged <= BURST * windows
    assert "refused transfers: rate limit reached" in logs
    assert len(logs.splitlines()) < 40


def test_badtime_is_logged_rate_limited(tmp_path: Path) -> None:
    """A signed query or AXFR outside the time window (a clock off by two hours): NOTAUTH
    BADTIME as before, and now a warning naming the key and the skew, a few per source."""
    secret = base64.b64encode(b"mcsdns-log-bounds-key-0123456789").decode()
    ring = dns.tsigkeyring.from_text({"xfr-key.": ("hmac-sha256", secret)})

    def late(rdtype: str) -> bytes:
        q = dns.message.make_query(ZONE, rdtype)
        q.use_tsig(ring, keyname="xfr-key.")
        with mock.patch("time.time", return_value=time.time() - 7200):
            return q.to_wire()

    with run_server(["--manifests", str(EXAMPLE), "--allow-transfer", "127.0.0.0/8",
                     "--tsig-key", f"xfr-key:hmac-sha256:{secret}"], tmp_path) as srv:
        for tcp, rdtype in [(False, "SOA")] * 30 + [(True, "AXFR")] * 30:
            r = dns.message.from_wire(srv.exchange(late(rdtype), tcp), keyring=False)
            assert (r.rcode(), r.tsig_error) == (dns.rcode.NOTAUTH, dns.rcode.BADTIME)
        logs = stopped_logs(srv)
    queries = [ln for ln in logs.splitlines() if "signed query refused: TSIG BADTIME (key xfr-key.)" in ln]
    xfrs = [ln for ln in logs.splitlines() if "refused: TSIG BADTIME (key xfr-key.)" in ln
            and "transfer AXFR" in ln]
    assert queries and xfrs, logs
    assert re.search(r"signed -720\d s from our clock, fudge 300 s", queries[0]), queries[0]
    assert len(queries) <= BURST and len(xfrs) <= BURST
    assert accounted(logs, "refused signed queries", "signed query refused")[1] == 30 - len(queries)


def manifest_dir(tmp: Path) -> Path:
    """The example, plus objects whose names try to forge a line or flood the log."""
    m = copy_example(tmp / "m")
    forged = "x\n2026-01-01T00:00:00.000Z [ERROR] mcsdns.forged: pwned"
    objs = [
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
         "metadata": {"name": forged, "namespace": "evil"}, "spec": {"type": "ClusterSetIP"}},
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
         "metadata": {"name": "n" * 200_000, "namespace": "evil\u2028x"}, "spec": {"type": "ClusterSetIP"}},
    ]
    (m / "forge.json").write_text(json.dumps({"kind": "List", "items": objs}))
    return m


def bad_hostnames(n: int, note: str) -> str:
    """An EndpointSlice of n endpoints, each with a hostname that is not a DNS label."""
    return json.dumps({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "many-bad", "namespace": "shop", "annotations": {"note": note},
                     "labels": {"multicluster.kubernetes.io/service-name": "web",
                                "multicluster.kubernetes.io/source-cluster": "cluster-z"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [f"10.77.{i // 250}.{i % 250 + 1}"], "hostname": f"Bad_Host_{i}"}
                      for i in range(n)]})


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_object_values_cannot_forge_or_flood_lines(tmp_path: Path, fmt: str) -> None:
    """A name with a newline stays inside its line; a 200,000-character name is cut; 20,000
    bad hostnames in one slice are one line per apply (on main: 20,000 each time)."""
    m = manifest_dir(tmp_path)
    (m / "bad.json").write_text(bad_hostnames(20_000, "v1"))
    skipped = 'mcsdns_skipped_objects_total{kind="EndpointSlice"}'
    with run_server(["--manifests", str(m), "--log-format", fmt], tmp_path) as srv:
        assert srv.query("web.shop.svc.clusterset.local").answer  # the rest is served
        assert wait_for(lambda: srv.metric(skipped) == 20_000)
        for applies, note in enumerate(("v2", "v3"), start=2):
            (m / "bad.json").write_text(bad_hostnames(20_000, note))
            assert wait_for(lambda applies=applies: srv.metric(skipped) == 20_000 * applies)
        logs = stopped_logs(srv)
    lines = logs.splitlines()
    longest = max(len(ln) for ln in lines)
    print(f"\n{fmt}: {len(lines)} lines, longest {longest} characters")
    assert len(lines) < 40 and longest < 2000
    if fmt == "json":
        recs = [json.loads(ln) for ln in lines]  # every line one object
        msgs = [r["msg"] for r in recs]
    else:
        assert all(TEXT_LINE.match(ln) for ln in lines), [ln for ln in lines if not TEXT_LINE.match(ln)]
        msgs = lines
    assert not any("mcsdns.forged" in ln and "\\n" not in ln for ln in msgs)
    assert any("x\\n2026-01-01T00:00:00.000Z [ERROR] mcsdns.forged" in ln for ln in msgs)
    assert any("n" * 64 + "..." in ln for ln in msgs) and not any("n" * 65 in ln for ln in msgs)
    per_apply = [ln for ln in msgs if "shop/many-bad: 20000 parts" in ln]
    assert len(per_apply) == 3, per_apply
    assert "(and 19997 more)" in per_apply[0] and "Bad_Host_0" in per_apply[0]


def test_throttle_is_bounded_whatever_the_sources(caplog: pytest.LogCaptureFixture) -> None:
    """100,000 sources in one window: at most `total` lines, the notice and one summary; the
    per-source table never over `sources`; the next window starts afresh."""
    import logging

    from mcsdns.ops.logs import Throttle

    now = [0.0]
    log = logging.getLogger("mcsdns.test")
    t = Throttle(log, "test lines", burst=2, total=10, window=60, sources=100, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, "mcsdns.test"):
        for i in range(100_000):
            t.log(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", logging.INFO, "line from %d", i)
            t.log("10.0.0.0", logging.INFO, "line from the first")
        assert len(t._lines) <= 100
        now[0] = 61.0
        assert t.log("10.9.9.9", logging.INFO, "after the window")
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 10 + 1 + 1 + 1, msgs[-3:]  # lines, notice, summary, the next window's
    assert sum(m.startswith("test lines: rate limit reached") for m in msgs[:-2]) == 1
    # 10.0.0.0 (i = 0) logged twice, then held back
    assert msgs[-2] == "test lines: 199990 more suppressed in the last 60 s; most from 10.0.0.0: 99999"
    assert msgs[-1] == "after the window"


def test_query_log_escapes_a_name_from_the_network(tmp_path: Path) -> None:
    """--log-queries: a label holding a newline and a fake line stays one escaped line."""
    import dns.name

    label = b"x\n2026-01-01T00:00:00.000Z [ERROR] mcsdns.forged: pwned"
    q = dns.message.make_query(dns.name.Name([label, b"clusterset", b"local", b""]), "A")
    with run_server(["--manifests", str(EXAMPLE), "--log-queries"], tmp_path) as srv:
        assert dns.message.from_wire(srv.exchange(q.to_wire(), False)).rcode() == dns.rcode.NXDOMAIN
        assert wait_for(lambda: "mcsdns.forged" in srv.logs())
        lines = stopped_logs(srv).splitlines()
    assert all(TEXT_LINE.match(ln) for ln in lines), [ln for ln in lines if not TEXT_LINE.match(ln)]
    assert any('"A IN x\\n2026-01-01T00:00:00.000Z [ERROR] mcsdns.forged: pwned.clusterset.local.' in ln
               for ln in lines)
