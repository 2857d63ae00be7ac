"""What the zone transfer tests share: the TSIG keys, AXFR and SOA helpers over real sockets,
(the `mdir` fixture is
tests/nameserver/conftest.py's)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import dns.tsigkeyring
import dns.xfr
import dns.zone

from support.helpers import REPO, Server

ZONE = "clusterset.local."
SECRET = base64.b64encode(b"mcsdns-test-transfer-key-0123456").decode()
KEY = f"xfr-key:hmac-sha256:{SECRET}"
KEYRING = dns.tsigkeyring.from_text({"xfr-key.": ("hmac-sha256", SECRET)})
BADRING = dns.tsigkeyring.from_text({"xfr-key.": ("hmac-sha256", base64.b64encode(b"x" * 32).decode())})
OTHERRING = dns.tsigkeyring.from_text({"other.": ("hmac-sha256", SECRET)})


def records_text(mdir: Path) -> set[tuple[str, str, str]]:
    """(name, type, rdata) of `mcsdns records` for a manifest directory, SOA excluded."""
    out = subprocess.run([sys.executable, "-m", "mcsdns", "records", "--manifests", str(mdir)],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    z = dns.zone.from_text(out, origin=ZONE, relativize=False, check_origin=False)
    return {(n.to_text(), dns.rdatatype.to_text(rds.rdtype), rd.to_text())
            for n, rds in z.iterate_rdatasets() for rd in rds if rds.rdtype != dns.rdatatype.SOA}


def axfr(srv: Server, **kw: object) -> list[dns.message.Message]:
    return list(dns.query.xfr("127.0.0.1", ZONE, port=srv.port, timeout=5, lifetime=20,
                              relativize=False, **kw))  # type: ignore[arg-type]


def flatten(msgs: list[dns.message.Message]) -> list[tuple[str, str, str]]:
    return [(rrs.name.to_text(), dns.rdatatype.to_text(rrs.rdtype), rd.to_text())
            for m in msgs for rrs in m.answer for rd in rrs]


def soa_serial(srv: Server) -> int:
    r = srv.query(ZONE, "SOA")
    return int(r.answer[0][0].serial)


def one_query(srv: Server, q: dns.message.Message, tcp: bool = True) -> dns.message.Message:
    """Send q, return the first response without TSIG validation (raw parse)."""
    data = srv.exchange(q.to_wire(), tcp)
    r = dns.message.from_wire(data, keyring=False, ignore_trailing=False, one_rr_per_rrset=True)
    return r
