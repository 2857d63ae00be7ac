"""Malformed input that used to pass silently: an EDNS option whose length runs past the
OPT record is FORMERR (as knotd answers) on both UDP paths and over TCP, and a manifest
with a key given twice is refused whole (logged, counted, last good content kept)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import dns.edns
import dns.message
import dns.rcode
import pytest
from support.helpers import (
    EXAMPLE,
    UDP_PATHS,
    Server,
    clusterset_ip,
    copy_example,
    run_server,
    run_server_on_path,
    wait_for,
)

NAME = "web.shop.svc.clusterset.local."


@pytest.fixture(params=UDP_PATHS)
def srv(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """The server on each UDP path."""
    with run_server_on_path(request.param, ["--manifests", str(EXAMPLE)], tmp_path, monkeypatch) as s:
        yield s


def with_option(data: bytes, declared: int | None = None, rdlength: int | None = None) -> bytes:
    """A dnspython query carrying one 4-octet EDNS option, its option length (and the OPT's
    RDLENGTH) overwritten when given."""
    option = dns.edns.GenericOption(dns.edns.OptionType.make(65001), data)
    q = dns.message.make_query(NAME, "A", use_edns=0, options=[option])
    q.id = 4242
    wire = bytearray(q.to_wire())
    at = len(wire) - len(data) - 4  # the option's code, then its length
    if declared is not None:
        struct.pack_into("!H", wire, at + 2, declared)
    if rdlength is not None:
        struct.pack_into("!H", wire, at - 2, rdlength)
        del wire[at + rdlength:]
    return bytes(wire)


def test_malformed_edns_option_is_formerr(srv: Server) -> None:
    good = with_option(b"abcd")
    bad = [with_option(b"abcd", declared=5),  # runs one octet past the RDATA
           with_option(b"abcd", declared=3),  # leaves an octet no option holds
           with_option(b"abcd", rdlength=2)]  # the option header itself cut
    for tcp in (False, True):
        for _ in range(3):  # never answered from a cache either
            r = dns.message.from_wire(srv.exchange(good, tcp))
            assert r.rcode() == dns.rcode.NOERROR and r.answer
            for wire in bad:
                r = dns.message.from_wire(srv.exchange(wire, tcp))
                assert r.id == 4242 and r.rcode() == dns.rcode.FORMERR and not r.answer, (tcp, wire.hex())


def addresses(srv: Server, name: str) -> list[str]:
    return [r.address for rr in srv.query(f"{name}.live.svc.clusterset.local").answer for r in rr]


def test_duplicate_yaml_key_refuses_the_file(tmp_path: Path) -> None:
    """A key given twice (here spec.ips: which address was meant?) refuses the file: logged,
    counted as error file_duplicate_key, the last good content kept, and a new file with one
    is not served. On main the last value silently won."""
    m = copy_example(tmp_path / "m")
    (m / "live.yaml").write_text(clusterset_ip("dup", "10.77.0.1"))
    with run_server(["--manifests", str(m)], tmp_path) as srv:
        assert addresses(srv, "dup") == ["10.77.0.1"]
        (m / "live.yaml").write_text(clusterset_ip("dup", "10.77.0.1").replace(
            "spec: {type: ClusterSetIP,", "spec: {type: ClusterSetIP, ips: [\"10.77.0.2\"],"))
        (m / "new.json").write_text('{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",'
                                    ' "metadata": {"name": "twice", "namespace": "live", "name": "other"},'
                                    ' "spec": {"type": "ClusterSetIP", "ips": ["10.77.0.3"]}}')
        assert wait_for(lambda: srv.metric_sum("mcsdns_source_errors_total", 'source="files"',
                                               'error="file_duplicate_key"') == 2), srv.logs()
        logs = srv.logs()
        assert "live.yaml: skipped manifest file: duplicate key 'ips' (line 4)" in logs, logs
        assert "new.json: skipped manifest file: duplicate key 'name'" in logs, logs
        assert addresses(srv, "dup") == ["10.77.0.1"]
        for name in ("twice", "other"):
            assert srv.query(f"{name}.live.svc.clusterset.local").rcode() == dns.rcode.NXDOMAIN
