"""The metrics layering: `mcsdns.ops.stats` is the bottom layer, the exporter reads only it;
and the response counters count each response once, whatever the cache does."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dns.rcode
from support.helpers import EXAMPLE, run_server

from mcsdns.dns.types import qtype_label

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from robustness.memory_abuse import send_window  # noqa: E402


def _loaded_after(module: str) -> set[str]:
    code = (f"import sys; import {module}; "
            "print(' '.join(m for m in sys.modules if m == 'mcsdns' or m.startswith('mcsdns.')))")
    return set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True).stdout.split())


def test_stats_imports_nothing_of_mcsdns() -> None:
    assert _loaded_after("mcsdns.ops.stats") == {"mcsdns", "mcsdns.ops", "mcsdns.ops.stats"}


def test_exporter_does_not_import_the_app() -> None:
    assert _loaded_after("mcsdns.ops.metrics") == {"mcsdns", "mcsdns.ops", "mcsdns.ops.stats",
                                                   "mcsdns.ops.metrics"}


SUFFIXES = (b"\x04shop\x03svc\x0aclusterset\x05local\x00",  # in the zone, not served: NXDOMAIN
            b"\x07example\x03org\x00")  # outside it: REFUSED


def _name(length: int, suffix: bytes) -> bytes:
    """A wire name of `length` octets ending in `suffix`."""
    room, out = length - len(suffix), b""
    while room:
        n = min(63, room - 1) if room - 1 != 64 else 62
        out += bytes((n,)) + b"a" * n
        room -= n + 1
    return out + suffix


def _query(qid: int, qname: bytes, qtype: int, edns: bool) -> bytes:
    head = struct.pack("!HHHHHH", qid, 0, 1, 0, 0, 1 if edns else 0)
    opt = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"  # root, OPT, 1232, no flags or options
    return head + qname + struct.pack("!HH", qtype, 1) + (opt if edns else b"")


def _responses(text: str) -> tuple[Counter[tuple[str, str]], float, float]:
    """UDP responses by (type, rcode) labels, and the size histogram's count and sum, from /metrics."""
    by_label: Counter[tuple[str, str]] = Counter()
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("mcsdns_dns_responses_total{") and 'proto="udp"' in line:
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
            n = int(float(line.rsplit(" ", 1)[1]))
            by_label[labels["type"].strip('"'), labels["rcode"].strip('"')] += n
        elif line.startswith('mcsdns_dns_response_size_bytes_count{proto="udp"}'):
            count = float(line.rsplit(" ", 1)[1])
        elif line.startswith('mcsdns_dns_response_size_bytes_sum{proto="udp"}'):
            total = float(line.rsplit(" ", 1)[1])
    return by_label, count, total


def test_response_counters_are_exact_across_cache_groups_and_flushes(tmp_path: Path) -> None:
    """Responses of many types, rcodes and sizes (more than MAX_GROUPS combinations, the
    groups the cache counts its entries in), sent again (answered from the cache) and
    then in other letter case until the cache is flushed: /metrics counts each response
    once, under its labels and size."""
    types = [1, 28, 2, 6, 33, 16, 12, 5, 15, 257, 64, 65, 43, 48, 1000]
    qs = [_query(i & 0xFFFF, _name(length, suffix), t, edns)
          for i, (t, length, edns, suffix) in enumerate(
              (t, length, edns, suffix) for t in types for length in range(40, 250)
              for edns in (False, True) for suffix in SUFFIXES)]
    upper = [q[:12] + q[12:].replace(b"a", b"A") for q in qs]
    with run_server(["--manifests", str(EXAMPLE), "--cache-size", "16"], tmp_path) as srv:
        labels0, count0, total0 = _responses(srv.http("/metrics")[1])
        got: list[bytes] = []
        for batch in (qs, qs, upper):
            assert send_window(srv, iter(batch), got=got) == len(batch)
        labels1, count1, total1 = _responses(srv.http("/metrics")[1])
        assert srv.metric("mcsdns_cache_flushes_total ") >= 1
        assert srv.metric("mcsdns_cache_hits_total ") >= len(qs)
    want: Counter[tuple[str, str]] = Counter()
    for r in got:
        qtype = struct.unpack("!H", r[r.index(0, 12) + 1:r.index(0, 12) + 3])[0]
        want[qtype_label(qtype), dns.rcode.to_text(dns.rcode.Rcode(r[3] & 0xF))] += 1
    assert labels1 - labels0 == want
    assert count1 - count0 == len(got)
    assert total1 - total0 == sum(len(r) for r in got)
