"""Every vector in specs/*.yaml against a real `mcsdns serve`, queried with dnspython over
UDP/TCP on 127.0.0.1. One server per spec file, loaded with only that file's fixtures."""

from __future__ import annotations

import socket
import struct
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from support.helpers import REPO, Server, run_server

sys.path.insert(0, str(REPO / "conformance"))
import speccheck  # noqa: E402
import speclib  # noqa: E402

SPECS = speclib.load_all()
VECTORS = [v for s in SPECS for v in s.vectors]
BY_STEM = {s.stem: s for s in SPECS}
TIMEOUT = 2.0


def build(q: speclib.Query) -> dns.message.Message:
    """The query message a vector describes."""
    if q.header_only:
        m = dns.message.Message()
        m.set_opcode(dns.opcode.from_text(q.opcode))
        return m
    m = dns.message.make_query(q.name, q.type, use_edns=False)
    m.flags = dns.flags.RD if q.rd else 0
    m.set_opcode(dns.opcode.from_text(q.opcode))
    if q.edns is not None:
        m.use_edns(q.edns_version, dns.flags.DO if q.edns_do else 0, q.edns_payload)
    if q.serial is not None:
        m.authority.append(dns.rrset.from_text(m.question[0].name, 0, "IN", "SOA",
                                               f". . {q.serial} 0 0 0 0"))
    return m


def exchange(wire: bytes, port: int, tcp: bool) -> bytes | None:
    """Send one query; the response bytes, or None if none came within TIMEOUT."""
    kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as s:
        s.settimeout(TIMEOUT)
        try:
            if not tcp:
                s.sendto(wire, ("127.0.0.1", port))
                return s.recv(65535)
            s.connect(("127.0.0.1", port))
            s.sendall(struct.pack("!H", len(wire)) + wire)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
                chunk = s.recv(65535)
                if not chunk:
                    return None
                buf += chunk
            return buf[2:2 + struct.unpack("!H", buf[:2])[0]]
        except (TimeoutError, ConnectionError):
            return None


def to_response(m: dns.message.Message) -> speccheck.Response:
    def rrs(section: list[dns.rrset.RRset]) -> list[str]:
        return [f"{r.name.to_text()} {r.ttl} {dns.rdataclass.to_text(r.rdclass)} "
                f"{dns.rdatatype.to_text(r.rdtype)} {rd.to_text()}" for r in section for rd in r]

    opt = None
    if m.edns >= 0:
        opt = {"version": m.edns, "udp": m.payload, "do": bool(m.ednsflags & dns.flags.DO)}
    return speccheck.Response(
        rcode=dns.rcode.to_text(m.rcode()),
        flags=set(dns.flags.to_text(m.flags).lower().split()),
        opt=opt,
        question=m.question[0].name.to_text() if m.question else None,
        answer=rrs(m.answer), authority=rrs(m.authority), additional=rrs(m.additional))


class Servers:
    """One running server at a time, for the spec file the current test needs."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.stem = tmp, ""
        self.server: Server | None = None
        self.stack = ExitStack()

    def get(self, spec: speclib.Spec) -> Server:
        if spec.stem != self.stem or self.server is None:
            self.stack.close()
            self.stack = ExitStack()
            d = self.tmp / spec.stem
            (d / "manifests").mkdir(parents=True)
            (d / "manifests" / "fixtures.yaml").write_text(spec.fixtures_yaml())
            self.server = self.stack.enter_context(
                run_server(["--manifests", str(d / "manifests"), *spec.server_args], d))
            self.stem = spec.stem
        assert self.server is not None
        return self.server


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    s = Servers(tmp_path_factory.mktemp("specs"))
    yield s
    s.stack.close()


def test_spec_files_load_and_cover_every_section() -> None:
    stems = {s.stem for s in SPECS}
    for want in ("2.2-schema-version", "2.3.1-clustersetip-a-aaaa", "2.3.2-clustersetip-srv",
                 "2.3.4-clustersetip-no-cluster-records", "2.4.1-headless-a-aaaa",
                 "2.4.2-headless-srv", "2.4.4-headless-no-cluster-records", "zone-apex",
                 "negative", "protocol"):
        assert want in stems
    assert all(s.vectors and s.fixtures for s in SPECS)
    assert any(s.server_args for s in SPECS)  # the locality policies


@pytest.mark.parametrize("vector", VECTORS, ids=[v.test_id for v in VECTORS])
def test_vector(vector: speclib.Vector, servers: Servers) -> None:
    srv = servers.get(BY_STEM[vector.spec])
    q = build(vector.query)
    raw = exchange(q.to_wire(), srv.port, vector.query.transport == "tcp")
    resp = None
    if raw is not None:
        m = dns.message.from_wire(raw, one_rr_per_rrset=True)  # keep duplicates visible
        assert m.id == q.id, "response ID does not match the query"
        resp = to_response(m)
    problems = speccheck.check(vector, resp)
    assert not problems, "\n".join(problems)
