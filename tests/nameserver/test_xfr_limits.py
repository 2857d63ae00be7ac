"""Zone transfers under load and abuse: one serial across workers, a snapshot per transfer,
a stalled reader dropped, mutated transfers, the cap on concurrent ones."""

from __future__ import annotations

import json
import socket
import struct
import time
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
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import Server, clusterset_ip, copy_example, run_server, wait_for
from support.xfr import (
    KEY,
    KEYRING,
    ZONE,
    axfr,
    flatten,
    one_query,
    soa_serial,
)


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    return copy_example(tmp_path / "manifests")


def test_workers_answer_one_serial_for_the_same_content(mdir: Path, tmp_path: Path) -> None:
    with run_server(["--manifests", str(mdir), "--workers", "2", "--allow-transfer", "127.0.0.1"],
                    tmp_path, timeout=30) as srv:

        def serials() -> set[int]:
            return {soa_serial(srv) for _ in range(40)}  # new source port each: both workers

        assert wait_for(lambda: len(serials()) == 1)
        (s0,) = serials()
        for i in range(3):
            (mdir / "live.yaml").write_text(clusterset_ip("api", f"10.77.0.{i + 1}"))
            time.sleep(0.1)
        assert wait_for(lambda: (lambda s: len(s) == 1 and s != {s0})(serials()))
        (s1,) = serials()
        assert s1 > s0
        msgs = axfr(srv)
        assert int(flatten(msgs)[0][2].split()[2]) == s1


def _soas(m: bytes) -> list[int]:
    """Serials of the SOA records in the Answer section of one transfer message."""
    i = 12
    if struct.unpack_from("!H", m, 4)[0]:
        while m[i]:
            i += m[i] + 1
        i += 5
    out = []
    for _ in range(struct.unpack_from("!H", m, 6)[0]):
        while m[i] and m[i] < 0xC0:
            i += m[i] + 1
        i += 2 if m[i] >= 0xC0 else 1
        rtype, _c, _t, rdlen = struct.unpack_from("!HHIH", m, i)
        i += 10 + rdlen
        if rtype == 6:
            out.append(struct.unpack_from("!I", m, i - 20)[0])
    return out


def _raw_transfer(sock: socket.socket, head: bytes = b"") -> list[bytes]:
    """The messages of one transfer, until its closing SOA or EOF."""
    out: list[bytes] = []
    soas = 0
    buf = head
    while soas < 2:
        while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
            n = struct.unpack("!H", buf[:2])[0]
            m, buf = buf[2:2 + n], buf[2 + n:]
            out.append(m)
            soas += len(_soas(m))
        if soas >= 2:
            break
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    return out


def _serials(msgs: list[bytes]) -> list[int]:
    return _soas(msgs[0])[:1] + _soas(msgs[-1])[-1:]


def _count(msgs: list[bytes]) -> int:
    return sum(struct.unpack_from("!H", m, 6)[0] for m in msgs)


def _snapshot_during_change(srv: Server, mdir: Path, k: int) -> bool:
    """AXFR by a slow reader while a service is added: True if it got the zone as it was
    when it started; False if the server dropped the reader (the change took longer to
    apply than the idle timeout on a loaded machine: the caller retries)."""
    q = dns.message.make_query(ZONE, "AXFR").to_wire()
    with socket.create_connection(srv.addr, timeout=10) as s:
        s.sendall(struct.pack("!H", len(q)) + q)
        msgs = _raw_transfer(s)
    s0 = soa_serial(srv)
    assert _serials(msgs) == [s0, s0] and sum(len(m) + 2 for m in msgs) > 4_000_000
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(srv.addr)
            s.settimeout(10)
            s.sendall(struct.pack("!H", len(q)) + q)
            head = s.recv(2048)
            (mdir / f"new{k}.yaml").write_text(clusterset_ip(f"new{k}", f"10.77.1.{k + 1}"))
            assert wait_for(lambda: soa_serial(srv) != s0)
            assert srv.query(f"new{k}.live.svc.clusterset.local.").answer
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            during = _raw_transfer(s, head)
    except ConnectionError:
        return False
    if len(during) < len(msgs):
        return False
    assert _serials(during) == [s0, s0] and _count(during) == _count(msgs)
    assert not any(f"new{k}".encode() in m for m in during)
    return True


def _headless_list(name: str, n: int, addrs: int = 1) -> dict[str, object]:
    """A `kind: List` of a headless ServiceImport and its slice with n ready endpoints of
    `addrs` addresses each."""
    return {"kind": "List", "items": [
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
         "metadata": {"name": name, "namespace": "big"},
         "spec": {"type": "Headless", "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{name}-a", "namespace": "big", "labels": {
             "multicluster.kubernetes.io/service-name": name,
             "multicluster.kubernetes.io/source-cluster": "cluster-a"}},
         "addressType": "IPv4", "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
         "endpoints": [{"addresses": [f"10.{9 + j}.{i // 250}.{i % 250 + 1}" for j in range(addrs)],
                        "hostname": f"pod-{i}"} for i in range(n)]}]}


def test_transfer_is_a_snapshot_and_a_stalled_reader_is_dropped(mdir: Path, tmp_path: Path) -> None:
    for k in range(4):  # 40,000 endpoints of 12 addresses: a transfer of 9 MB, more than socket buffers hold
        (mdir / f"big{k}.json").write_text(json.dumps(_headless_list(f"h{k}", 10000, 12)))
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1",
                     "--tcp-idle-timeout", "1"], tmp_path, timeout=60) as srv:
        # the zone changes while a slow client is in the middle of a transfer
        assert any(_snapshot_during_change(srv, mdir, k) for k in range(3))
        # a client that stops reading: the server stops producing, then drops it when idle
        q = dns.message.make_query(ZONE, "AXFR").to_wire()
        with socket.create_connection(srv.addr, timeout=10) as s:
            s.sendall(struct.pack("!H", len(q)) + q)
            full = sum(len(m) + 2 for m in _raw_transfer(s))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(srv.addr)
            s.sendall(struct.pack("!H", len(q)) + q)
            time.sleep(3)
            assert srv.query("web.shop.svc.clusterset.local.").answer  # others still answered
            s.settimeout(10)
            try:
                got = sum(len(m) + 2 for m in _raw_transfer(s))
            except ConnectionError:
                got = 0
        assert got < full / 2, (got, full)
        assert srv.metric("mcsdns_tcp_connections_timed_out_total") >= 1


def _templates() -> list[bytes]:
    out = []
    for rdtype in ("AXFR", "IXFR", "SOA", "A"):
        for signed in (False, True):
            q = dns.message.make_query(ZONE, rdtype, use_edns=0 if rdtype == "A" else False)
            if rdtype == "IXFR":
                q.authority.append(dns.rrset.from_text(
                    ZONE, 0, "IN", "SOA", f"ns.dns.{ZONE} hostmaster.{ZONE} 5 7200 1800 86400 5"))
            if signed:
                q.use_tsig(KEYRING, keyname="xfr-key.")
            out.append(q.to_wire())
    return out


TEMPLATES = _templates()


@settings(max_examples=1500, deadline=None)
@given(st.integers(0, len(TEMPLATES) - 1), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)),
                                                    max_size=4),
       st.integers(0, 400), st.binary(max_size=30))
def test_mutated_transfer_and_tsig_queries_never_raise(i: int, flips: list[tuple[int, int]], cut: int,
                                                       junk: bytes) -> None:
    """In-process: hostile AXFR/IXFR/TSIG shapes get responses or nothing, never an exception."""
    zone, handler, transfers = _XFR_STACK
    msg = bytearray(TEMPLATES[i])
    for pos, val in flips:
        if pos < len(msg):
            msg[pos] = val
    for m in (bytes(msg[:cut]), bytes(msg) + junk, bytes(msg)):
        stream = transfers.stream(m, ("127.0.0.1", 5353))
        if stream is not None:
            for out in stream:
                assert len(out) >= 12 and out[:2] == m[:2]
        else:
            out2 = handler.respond(m, True)
            assert out2 is None or len(out2) >= 12


def _xfr_stack() -> tuple[object, object, object]:
    from mcsdns.nameserver.cache import ResponseCache
    from mcsdns.nameserver.handler import Handler
    from mcsdns.nameserver.xfr import Transfers
    from mcsdns.ops.tsigkeys import parse_key
    from mcsdns.publish.publisher import ZonePublisher
    from mcsdns.zone.journal import Versions
    from mcsdns.zone.serial import SerialClock
    from mcsdns.zone.zone import Zone

    zone = Zone()
    versions = Versions(zone, SerialClock(None))
    cache = ResponseCache(zone)
    ZonePublisher(zone, versions, cache).load()
    key = parse_key(KEY)
    handler = Handler(cache)
    handler.tsig_keys[key.name] = key
    return zone, handler, Transfers(zone, versions, ["127.0.0.0/8"], [key])


_XFR_STACK: tuple = _xfr_stack()  # type: ignore[type-arg]


def test_concurrent_transfers_are_capped(mdir: Path, tmp_path: Path) -> None:
    """Ten stalled readers hold ten transfers; the eleventh is REFUSED, and once they
    are gone a transfer is served again (as BIND's transfers-out)."""
    from mcsdns.nameserver.xfr import MAX_ACTIVE

    for k in range(4):  # 9 MB: more than the socket buffers of a stalled reader hold
        (mdir / f"big{k}.json").write_text(json.dumps(_headless_list(f"h{k}", 10000, 12)))
    with run_server(["--manifests", str(mdir), "--allow-transfer", "127.0.0.1",
                     "--tcp-idle-timeout", "30"], tmp_path, timeout=60) as srv:
        q = dns.message.make_query(ZONE, "AXFR").to_wire()
        held = []
        for _ in range(MAX_ACTIVE):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(srv.addr)
            s.sendall(struct.pack("!H", len(q)) + q)
            held.append(s)
        assert wait_for(lambda: srv.metric_sum("mcsdns_zone_transfers_total", 'outcome="axfr"') >= MAX_ACTIVE)
        refused = one_query(srv, dns.message.make_query(ZONE, "AXFR"))
        assert refused.rcode() == dns.rcode.REFUSED
        for s in held:
            s.close()
        first = dns.message.make_query(ZONE, "AXFR")  # its first message: the whole zone takes long to parse
        assert wait_for(lambda: (r := one_query(srv, first)).rcode() == dns.rcode.NOERROR
                        and r.answer[0].rdtype == dns.rdatatype.SOA)
