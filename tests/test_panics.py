"""An internal error while answering is never silent: the query gets SERVFAIL (its ID,
question and EDNS echoed), `mcsdns_panics_total` counts it, and a flood of them
logs one traceback, not one per query. The fault is a bug planted in a real
`mcsdns serve` process (a sitecustomize that makes rendering raise for one name),
asked over real UDP (batched and plain) and TCP sockets."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import EXAMPLE, run_server  # noqa: E402

CRASH = "crash.shop.svc.clusterset.local"
FAULT = """\
import os, sys
sys.path.insert(0, os.getcwd())  # the checkout the server runs from
from mcsdns.zone import zone

_answer = zone.Zone.answer

def answer(self, qname, tail):
    if qname.startswith(b"\\x05crash"):
        raise RuntimeError("planted bug")
    return _answer(self, qname, tail)

zone.Zone.answer = answer
"""


@pytest.mark.parametrize("batchio", ["1", "0"])
def test_internal_error_answers_servfail_counted_and_logged_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batchio: str) -> None:
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(FAULT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fault"))
    monkeypatch.setenv("MCSDNS_BATCHIO", batchio)
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        q = dns.message.make_query(CRASH, "A", use_edns=0, payload=1232)
        for tcp in (False, True):
            r = srv.query(CRASH, tcp=tcp, edns=0)  # dnspython checks the ID and question
            assert r.rcode() == dns.rcode.SERVFAIL and r.flags & dns.flags.QR, r
            assert r.edns == 0 and r.question == q.question
        n = 200
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            got = 0
            for i in range(n):
                q.id = i
                s.sendto(q.to_wire(), srv.addr)
                r = dns.message.from_wire(s.recv(4096))
                got += r.id == i and r.rcode() == dns.rcode.SERVFAIL
        assert got == n
        ok = srv.query("web.shop.svc.clusterset.local")
        assert ok.rcode() == dns.rcode.NOERROR and ok.answer
        assert srv.metric("mcsdns_panics_total") == n + 2
        logs = srv.logs()
        assert logs.count("RuntimeError: planted bug") == 1, logs  # one traceback for 202 errors
        assert "internal error answering" in logs
