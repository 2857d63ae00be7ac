#!/usr/bin/env python3
"""Coverage-guided fuzzing (atheris, libFuzzer) of the packet path.

Each input is one DNS message, handled the same way by two handlers of the
example data (with a TSIG key):
- C path: sent three times over an AF_UNIX datagram socketpair (as is, again:
  a cache hit if it was cached, and with another ID) and answered by
  `_batchio.serve` with the first handler's UDP cache, as BatchedUDP does;
- Python path: the same three through the second handler's respond(data, False);
- TCP: respond(data, True) on both.
A crash, a response that robustness.fuzz.check rejects, or C and Python answers
that differ is a finding: atheris stops and writes the input (crash-*).

Coverage: the Python code of mcsdns is instrumented; `_batchio` is not (gcc
has no libFuzzer coverage), but under scripts/sanitize it is built with
ASan/UBSan, which abort on any memory error in it. The TSIG clock is frozen
at FUZZ_TIME so that signed answers of the two paths compare equal and the
signed seeds stay in their time window.

    python robustness/fuzz_atheris.py -max_total_time=60 NEW_DIR robustness/corpus/packets
    python robustness/fuzz_atheris.py --write-corpus robustness/corpus/packets
"""

from __future__ import annotations

import base64
import random
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

FUZZ_TIME = 1_700_000_000  # the TSIG clock while fuzzing, and the seeds' time signed
KEY = "fuzz-key:hmac-sha256:" + base64.b64encode(b"fuzz" * 8).decode()
CORPUS = REPO / "robustness" / "corpus" / "packets"


EXTENSIONS = ("mcsdns.nameserver._cannedtype", "mcsdns.transport._batchio")  # the query path's C


def extension_report() -> str:
    """Where each C extension was loaded from and whether it was built with ASan and UBSan,
    a line each, and whether the ASan runtime is loaded (ImportError if one is not built)."""
    import importlib

    loaded = "libasan" in Path("/proc/self/maps").read_text()
    lines = []
    for name in EXTENSIONS:
        so = Path(importlib.import_module(name).__file__ or "")
        image = so.read_bytes()
        asan, ubsan = b"__asan_report_" in image, b"__ubsan_handle_" in image
        lines.append(f"{name}: {so} (built with ASan: {'yes' if asan else 'no'}, UBSan: "
                     f"{'yes' if ubsan else 'no'}; ASan runtime loaded: {'yes' if loaded else 'no'})")
    return "\n".join(lines)


WEB, DB = "web.shop.svc.clusterset.local.", "db.shop.svc.clusterset.local."


def _make(qname: str, rdtype: str, edns: int | bool = False, **kw: Any) -> Any:
    """A query with ID 0x1234 (a dns.message.Message)."""
    import dns.message

    m = dns.message.make_query(qname, rdtype, use_edns=edns, **kw)
    m.id = 0x1234
    return m


def _query_seeds() -> dict[str, bytes]:
    """Queries of each type, with and without EDNS, and odd EDNS."""
    from robustness.packets import odd_edns

    seeds: dict[str, bytes] = {}
    srv = "_http._tcp.web.shop.svc.clusterset.local."
    for label, qname, rdtype in [("a-web", WEB, "A"), ("aaaa-web", WEB, "AAAA"), ("a-headless", DB, "A"),
                                 ("srv", srv, "SRV"), ("soa-apex", "clusterset.local.", "SOA"),
                                 ("ns-apex", "clusterset.local.", "NS"), ("any-web", WEB, "ANY"),
                                 ("txt-web", WEB, "TXT"), ("ptr", "1.0.42.10.in-addr.arpa.", "PTR"),
                                 ("a-nxdomain", "nope.shop.svc.clusterset.local.", "A"),
                                 ("a-outside", "example.com.", "A"), ("a-root", ".", "A"),
                                 ("a-pod", "db-0.cluster-a.db.shop.svc.clusterset.local.", "A")]:
        seeds[f"query-{label}"] = _make(qname, rdtype).to_wire()
        seeds[f"edns-{label}"] = _make(qname, rdtype, 0, want_dnssec=True, payload=1232).to_wire()
    seeds["edns-big-size"] = _make(DB, "A", 0, payload=65535).to_wire()
    seeds["edns-version1"] = _make(WEB, "A", 1).to_wire()
    q = _make(WEB, "A", False).to_wire()
    for i in range(4):  # EDNS options of several kinds, and two OPT records
        opts = odd_edns(seq(i))
        seeds[f"edns-odd-{i}"] = q[:10] + b"\x00\x01" + q[12:] + opts
    seeds["edns-two-opts"] = q[:10] + b"\x00\x02" + q[12:] + odd_edns(seq(0)) + odd_edns(seq(1))
    return seeds


def _tsig_seeds() -> dict[str, bytes]:
    """Signed queries and AXFRs (the key, a wrong secret, an unknown key), signed at FUZZ_TIME."""
    import dns.tsigkeyring

    name, alg, secret = KEY.split(":")
    ring = dns.tsigkeyring.from_text({name + ".": (alg, secret)})
    wrong = dns.tsigkeyring.from_text({name + ".": (alg, base64.b64encode(b"x" * 32).decode())})
    seeds: dict[str, bytes] = {}
    real_time = time.time
    time.time = lambda: float(FUZZ_TIME)  # dnspython signs at the time it renders
    try:
        for label, keyring in (("good", ring), ("wrong-secret", wrong)):
            m = _make(WEB, "A")
            m.use_tsig(keyring, keyname=name + ".")
            seeds[f"tsig-{label}"] = m.to_wire()
            m = _make("clusterset.local.", "AXFR")
            m.use_tsig(keyring, keyname=name + ".")
            seeds[f"tsig-axfr-{label}"] = m.to_wire()
        m = _make(WEB, "A")
        m.use_tsig(dns.tsigkeyring.from_text({"other.": (alg, secret)}), keyname="other.")
        seeds["tsig-unknown-key"] = m.to_wire()
    finally:
        time.time = real_time
    return seeds


def _transfer_seeds() -> dict[str, bytes]:
    import dns.message
    import dns.rdatatype
    import dns.rrset

    ixfr = dns.message.make_query("clusterset.local.", dns.rdatatype.IXFR)
    ixfr.id = 0x1234
    ixfr.authority.append(dns.rrset.from_text("clusterset.local.", 0, "IN", "SOA",
                                              ". . 1 3600 600 86400 5"))
    return {"axfr": _make("clusterset.local.", "AXFR").to_wire(), "ixfr": ixfr.to_wire()}


def _odd_seeds() -> dict[str, bytes]:
    """Other opcodes, malformed messages and another class."""
    from robustness.packets import query, wire_name

    q = _make(WEB, "A", False).to_wire()
    seeds: dict[str, bytes] = {}
    for opcode in (1, 2, 4, 5, 15):  # IQUERY, STATUS, NOTIFY, UPDATE, unassigned
        seeds[f"opcode-{opcode}"] = q[:2] + bytes((q[2] | opcode << 3,)) + q[3:]
    seeds["bad-empty"] = b""
    seeds["bad-header-only"] = q[:12]
    seeds["bad-truncated-question"] = q[:-3]
    seeds["bad-compression-loop"] = q[:12] + b"\xc0\x0c" + struct.pack("!HH", 1, 1)
    seeds["bad-forward-pointer"] = q[:12] + b"\x03abc\xc0\x20" + struct.pack("!HH", 1, 1) + bytes(20)
    seeds["bad-label-64"] = q[:12] + b"\x40" + b"a" * 64 + b"\x00" + struct.pack("!HH", 1, 1)
    seeds["bad-name-over-255"] = q[:12] + (b"\x3f" + b"a" * 63) * 5 + b"\x00" + struct.pack("!HH", 1, 1)
    seeds["bad-qdcount-2"] = q[:4] + b"\x00\x02" + q[6:]
    seeds["bad-qr-set"] = q[:2] + bytes((q[2] | 0x80,)) + q[3:]
    seeds["bad-trailing"] = q + b"\x00\x01\x02"
    seeds["bad-zero-in-label"] = q[:12] + b"\x05ab\x00cd" + wire_name("clusterset.local.") + q[-4:]
    seeds["class-chaos"] = query(seq(3), WEB, edns=False)[:-2] + b"\x00\x03"
    return seeds


def write_corpus(out: Path) -> int:
    """The seed inputs: queries of each type, EDNS, TSIG, transfers, other opcodes, malformed."""
    seeds = {**_query_seeds(), **_tsig_seeds(), **_transfer_seeds(), **_odd_seeds()}
    out.mkdir(parents=True, exist_ok=True)
    for label, data in seeds.items():
        (out / label).write_bytes(data)
    return len(seeds)


class _Seq:
    """A stand-in for random.Random that picks the i-th choice: seeds that do not change."""

    def __init__(self, i: int) -> None:
        self.i = i

    def choice(self, seq: list[Any]) -> Any:
        return seq[self.i % len(seq)]

    def randrange(self, n: int) -> int:
        return self.i % n

    def randbytes(self, n: int) -> bytes:
        return bytes(range(self.i, self.i + n))


def seq(i: int) -> random.Random:
    """A _Seq where the packet builders take a random.Random (they use only its methods)."""
    return cast(random.Random, _Seq(i))


def main() -> int:
    if sys.argv[1:2] == ["--write-corpus"]:
        print(f"{write_corpus(Path(sys.argv[2]) if len(sys.argv) > 2 else CORPUS)} seeds written")
        return 0
    import atheris

    with atheris.instrument_imports(include=["mcsdns"]):
        import mcsdns.serveconfig  # noqa: F401  (every module of the packet path, instrumented)
        from mcsdns.ops import tsigkeys
        from mcsdns.transport import _batchio
    from support.helpers import drain, example_handlers

    from robustness.fuzz import check

    print(extension_report(), flush=True)
    time.time = lambda: float(FUZZ_TIME)  # see the module docstring
    key = tsigkeys.parse_key(KEY)
    hc, hp = example_handlers()
    for h in (hc, hp):
        h.tsig_keys[key.name] = key
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.setblocking(False)
    client.setblocking(False)
    table, serial, fd = hc.cache.tables[False], hc.cache.serial, server.fileno()

    def reraise(data: bytes, exc: BaseException) -> None:
        raise exc

    def one_input(data: bytes) -> None:
        msgs = [data, data, bytes((data[0] ^ 0x5A,)) + data[1:] if data else data]
        for m in msgs:
            client.send(m)
        n, _, unsent = _batchio.serve(fd, hc.respond, reraise, table, serial)
        if n != len(msgs) or unsent:
            raise AssertionError(f"serve() read {n} of {len(msgs)}, unsent {unsent!r}")
        got_c = drain(client)
        outs_p = [hp.respond(m, False) for m in msgs]
        if got_c != [out for out in outs_p if out is not None]:
            raise AssertionError(f"C path {[o.hex() for o in got_c]} != Python path {outs_p!r}")
        for m, out in zip(msgs, outs_p, strict=True):  # the same as got_c: checks both paths
            problem = check(m, out, False)
            if problem:
                raise AssertionError(f"UDP: {problem}")
        tc, tp = hc.respond(data, True), hp.respond(data, True)
        if tc != tp:
            raise AssertionError("TCP answers of the two handlers differ")
        problem = check(data, tc, True)
        if problem:
            raise AssertionError(f"TCP: {problem}")

    atheris.Setup(sys.argv, one_input, internal_libfuzzer=True)  # the preloaded one (see scripts/sanitize)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
