"""Zone transfers over TCP: AXFR (RFC 5936) and IXFR (RFC 1995), with an ACL and TSIG.

`Transfers.stream(msg, peer)` is the TCP listener's hook: None for anything
that is not an AXFR/IXFR query (the handler answers it), else an iterator of
response messages, produced lazily as the connection drains so that a large
zone is never one buffer. The zone is snapshotted (a list of its nodes, not
their bytes) when the transfer starts, so a change during a transfer does not
tear it. A client must be inside an `--allow-transfer` network and, when a
key is configured, sign with one; otherwise REFUSED, or NOTAUTH with the TSIG
error for a bad signature.
"""

from __future__ import annotations

import ipaddress
import logging
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from . import tsig
from .journal import Delta, Record, Versions
from .ops.stats import Put, define
from .wire import (
    AXFR,
    CLASS_IN,
    FORMERR,
    IXFR,
    NOTAUTH,
    REFUSED,
    SERVFAIL,
    SOA,
    Drop,
    FormErr,
    Query,
    decode_name,
    error_response,
    parse_query,
)
from .zone import Zone

log = logging.getLogger("mcsdns.xfr")

MESSAGE_SIZE = 16_000  # octets of records per transfer message (before TSIG)
MAX_ACTIVE = 10  # transfers sent at once; more are REFUSED (as BIND's transfers-out)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
TRANSFERS = define("mcsdns_zone_transfers_total", "counter",
                   "AXFR/IXFR requests over TCP by type and outcome (axfr, ixfr: what was sent; "
                   "refused, notauth, servfail, formerr).", ("type", "outcome"))
OUTCOMES = ("axfr", "ixfr", "refused", "notauth", "servfail", "formerr")


class MessageWriter:
    """Packs records into transfer messages of about MESSAGE_SIZE octets, owner names
    compressed against earlier names in the same message."""

    def __init__(self, qid: bytes, flags: bytes, question: bytes, limit: int = MESSAGE_SIZE) -> None:
        self.qid, self.flags, self.question = qid, flags, question
        self.limit = limit
        self._new(question)

    def _new(self, question: bytes) -> None:
        self.buf = bytearray(question)
        self.qd = 1 if question else 0
        self.count = 0
        self.names: dict[bytes, int] = {}
        if question:
            self._remember(question[:-4], 12)
        self.last: bytes | None = None
        self.last_ptr = b""

    def _remember(self, name: bytes, off: int, end: int | None = None) -> None:
        """Note where each suffix of `name` starting before `end` is written."""
        i = 0
        while name[i] and (end is None or i < end) and off + i < 0x3FFF:
            self.names[name[i:]] = off + i
            i += name[i] + 1

    def _owner(self, name: bytes) -> bytes:
        if name == self.last:
            return self.last_ptr
        off = 12 + len(self.buf)
        i = 0
        ptr = None
        while name[i]:
            ptr = self.names.get(name[i:])
            if ptr is not None:
                break
            i += name[i] + 1
        self._remember(name, off, i)
        out = name if ptr is None else name[:i] + struct.pack("!H", 0xC000 | ptr)
        self.last = name
        self.last_ptr = struct.pack("!H", 0xC000 | off) if off < 0x3FFF else out
        return out

    def add(self, owner: bytes, rtype: int, ttl: int, rdata: bytes) -> bytes | None:
        """Add one IN record; returns a finished message when this one did not fit."""
        done = None
        if self.count and len(self.buf) + len(owner) + 10 + len(rdata) > self.limit:
            done = self.finish()
            self._new(b"")
        self.buf += self._owner(owner)
        self.buf += struct.pack("!HHIH", rtype, CLASS_IN, ttl, len(rdata))
        self.buf += rdata
        self.count += 1
        return done

    def finish(self) -> bytes:
        """The current message (header included)."""
        return self.qid + self.flags + struct.pack("!HHHH", self.qd, self.count, 0, 0) + bytes(self.buf)


def _flags(query_flags: int, rcode: int, aa: bool) -> bytes:
    return struct.pack("!H", 0x8000 | (0x0400 if aa else 0) | (query_flags & 0x0110) | rcode)


def _client_serial(data: bytes) -> int | None:
    """The SOA serial in an IXFR query's Authority section, if there is one."""
    try:
        i = 12
        while data[i]:  # question name (uncompressed: the parser checked)
            i += data[i] + 1
        i += 5
        an, ns = struct.unpack_from("!HH", data, 6)
        if an or ns != 1:
            return None
        while data[i] and data[i] < 0xC0:
            i += data[i] + 1
        i += 2 if data[i] >= 0xC0 else 1
        rtype, _cls, _ttl, rdlen = struct.unpack_from("!HHIH", data, i)
        i += 10
        if rtype != SOA:
            return None
        rd = data[i:i + rdlen]
        j = 0
        for _ in range(2):  # MNAME, RNAME (possibly compressed)
            while rd[j] and rd[j] < 0xC0:
                j += rd[j] + 1
            j += 2 if rd[j] >= 0xC0 else 1
        return int(struct.unpack_from("!I", rd, j)[0])
    except (IndexError, struct.error):
        return None


class Transfers:
    """Who may transfer the zone, and the transfer responses."""

    def __init__(self, zone: Zone, versions: Versions, allow: Iterable[str] = (),
                 keys: Iterable[tsig.Key] = ()) -> None:
        self.zone = zone
        self.versions = versions
        self.allow: list[Network] = [ipaddress.ip_network(a, strict=False) for a in allow]
        self.keys = {k.name: k for k in keys}  # with any, transfers must be signed with one
        # (type, outcome) -> transfers; every series from 0, so the first failure is an increase
        self.counts: dict[tuple[str, str], int] = {(k, o): 0 for k in ("AXFR", "IXFR") for o in OUTCOMES}
        self.active = 0  # transfers being sent

    def publish(self, put: Put) -> None:
        for (kind, outcome), n in list(self.counts.items()):
            put(TRANSFERS, n, type=kind, outcome=outcome)

    def allowed(self, peer: Any) -> bool:
        try:
            addr = ipaddress.ip_address(peer[0] if isinstance(peer, tuple) else peer)
        except (ValueError, TypeError, IndexError):
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.allow)

    def _count(self, qtype: int, outcome: str) -> None:
        k = ("AXFR" if qtype == AXFR else "IXFR", outcome)
        self.counts[k] = self.counts.get(k, 0) + 1

    def stream(self, msg: bytes, peer: Any) -> Iterator[bytes] | None:
        """Responses to a TCP AXFR/IXFR query; None when `msg` is no such query."""
        end = msg.find(0, 12) + 5
        if end < 17 or len(msg) < end or msg[2] & 0xF8 or msg[end - 4] or msg[end - 3] not in (AXFR, IXFR):
            return None
        try:
            q = parse_query(msg)
        except (Drop, FormErr):
            return None  # the handler drops or answers FORMERR
        return self._respond(msg, q, peer)

    def _respond(self, msg: bytes, q: Query, peer: Any) -> Iterator[bytes]:  # noqa: C901 - to split with the DNS wire layer
        signer: tsig.Signer | None = None
        if q.tsig >= 0:
            try:
                rr = tsig.parse(msg, q.tsig)
                key, err = tsig.check(self.keys, msg, rr)
            except FormErr:
                yield error_response(msg, FORMERR)
                return
            if key is None or err in (tsig.BADSIG, tsig.BADTRUNC):
                log.warning("transfer from %s: TSIG %s (key %s)", peer, tsig.ERROR_NAMES[err],
                            decode_name(rr.name))
                self._count(q.qtype, "notauth")
                yield tsig.unsigned_error(self._header(q, NOTAUTH), rr, err)
                return
            signer = tsig.Signer(key, rr)
            if err:
                self._count(q.qtype, "notauth")
                yield signer.sign(self._header(q, NOTAUTH), err)
                return
        rcode = 0
        why = ""
        if not self.versions.established:
            self.versions.commit()  # synced since the last tick?
        if not self.allowed(peer):
            rcode, why = REFUSED, "not in --allow-transfer"
        elif self.keys and signer is None:
            rcode, why = REFUSED, "not signed with the transfer key"
        elif q.qname.lower() != self.zone.origin or q.qclass != CLASS_IN:
            rcode, why = REFUSED, "not our zone"
        elif not self.versions.established:
            rcode, why = SERVFAIL, "zone not synced yet"
        elif self.active >= MAX_ACTIVE:
            rcode, why = REFUSED, f"{MAX_ACTIVE} transfers already in progress"
        if rcode:
            qt = "AXFR" if q.qtype == AXFR else "IXFR"
            log.info("transfer %s from %s refused: %s", qt, peer, why,
                     extra={"event": "transfer_refused", "qtype": qt, "peer": str(peer), "reason": why})
            self._count(q.qtype, "refused" if rcode == REFUSED else "servfail")
            out = self._header(q, rcode)
            yield signer.sign(out) if signer else out
            return
        deltas: list[Delta] | None = None
        if q.qtype == IXFR:
            client = _client_serial(msg)
            if client is None:
                self._count(q.qtype, "formerr")
                out = self._header(q, FORMERR)
                yield signer.sign(out) if signer else out
                return
            deltas = self.versions.deltas_since(client)
        kind = "AXFR" if deltas is None else "IXFR"
        what = kind if q.qtype == AXFR else f"IXFR ({kind})"
        log.info("%s of %s serial %d to %s", what, decode_name(self.zone.origin), self.zone.serial, peer,
                 extra={"event": "transfer", "qtype": "AXFR" if q.qtype == AXFR else "IXFR", "kind": kind,
                        "zone": decode_name(self.zone.origin), "serial": self.zone.serial,
                        "peer": str(peer)})
        self._count(q.qtype, "axfr" if deltas is None else "ixfr")
        records = self._axfr() if deltas is None else self._ixfr(deltas)
        w = MessageWriter(q.id, _flags(q.flags, 0, True), q.question)
        self.active += 1  # until this generator ends or is dropped with its connection
        try:
            for owner, rtype, rdata in records:
                done = w.add(owner, rtype, self.zone.ttl, rdata)
                if done is not None:
                    yield signer.sign(done) if signer else done
            last = w.finish()
            yield signer.sign(last) if signer else last
        finally:
            self.active -= 1

    @staticmethod
    def _header(q: Query, rcode: int) -> bytes:
        return q.id + _flags(q.flags, rcode, rcode == 0) + struct.pack("!HHHH", 1, 0, 0, 0) + q.question

    def _axfr(self) -> Iterator[Record]:
        """SOA, every record of the zone (as of now), SOA."""
        zone = self.zone
        soa = (zone.origin, SOA, zone.soa.rdata)
        nodes = list(zone.names.items())  # snapshot: nodes are replaced, never changed
        yield soa
        for name, node in nodes:
            for rtype, rrset in node.rrsets.items():
                if rtype == SOA:
                    continue
                for rd in rrset.rdatas:
                    yield name, rtype, rd
        yield soa

    def _ixfr(self, deltas: list[Delta]) -> Iterator[Record]:
        """RFC 1995 4: new SOA, then per version old SOA, removed, new SOA, added; new SOA.
        An up-to-date client gets the current SOA alone."""
        zone = self.zone
        cur = (zone.origin, SOA, zone.soa.rdata)
        yield cur
        if not deltas:
            return
        for d in deltas:
            yield zone.origin, SOA, self._soa_rdata(d.old)
            yield from d.removed
            yield zone.origin, SOA, self._soa_rdata(d.new)
            yield from d.added
        yield cur

    def _soa_rdata(self, serial: int) -> bytes:
        rd = self.zone.soa.rdata
        return rd[:-20] + struct.pack("!I", serial) + rd[-16:]
