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

from ..dns import header, tsig
from ..dns.errors import Drop, FormErr
from ..dns.message import Query, header_only, parse_query, question_end
from ..dns.names import decode_name, skip_name
from ..dns.rdata import serial_in_message, with_serial
from ..dns.types import Rcode, RRClass, RRType
from ..dns.writer import Writer
from ..ops.logs import Throttle
from ..ops.stats import Put, define
from ..zone.journal import Delta, Record, Versions
from ..zone.rrsets import rrsets_at
from ..zone.zone import Zone
from . import tsiglog

log = logging.getLogger("mcsdns.xfr")

MESSAGE_SIZE = 16_000  # octets of records per transfer message (before TSIG)
MAX_ACTIVE = 10  # transfers sent at once; more are REFUSED (as BIND's transfers-out)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
TRANSFERS = define("mcsdns_zone_transfers_total", "counter",
                   "AXFR/IXFR requests over TCP by type and outcome (axfr, ixfr: what was sent; "
                   "refused, notauth, servfail, formerr).", ("type", "outcome"))
OUTCOMES = ("axfr", "ixfr", "refused", "notauth", "servfail", "formerr")
_XFR = (RRType.AXFR, RRType.IXFR)


def _messages(q: Query, records: Iterable[Record], ttl: int) -> Iterator[bytes]:
    """The transfer's messages: records of about MESSAGE_SIZE octets each, the first
    with the question."""
    flags = header.response_flags(q.flags, Rcode.NOERROR, aa=True)
    w = Writer(q.qname.lower(), len(q.question))
    question = q.question
    for owner, rtype, rdata in records:
        if w.count and w.size() + len(owner) + 10 + len(rdata) > MESSAGE_SIZE:
            body, n = w.take()
            yield header.pack(q.id, flags, 1 if question else 0, n) + question + body
            question = b""
        w.add(owner, rtype, ttl, rdata)
    body, n = w.take()
    yield header.pack(q.id, flags, 1 if question else 0, n) + question + body


def _client_serial(q: Query, msg: bytes) -> int | None:
    """The SOA serial in an IXFR query's Authority section, if there is one."""
    an, ns = struct.unpack_from("!HH", msg, 6)
    if an or ns != 1:
        return None
    try:
        i = skip_name(msg, q.end_of_question)
        rtype, _cls, _ttl, rdlen = struct.unpack_from("!HHIH", msg, i)
        if rtype != RRType.SOA:
            return None
        return serial_in_message(msg[:i + 10 + rdlen], i + 10)
    except (FormErr, struct.error):
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
        self._refusals = Throttle(log, "refused transfers")  # per client address

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
        k = ("AXFR" if qtype == RRType.AXFR else "IXFR", outcome)
        self.counts[k] = self.counts.get(k, 0) + 1

    def _refused(self, q: Query, peer: Any, why: str, level: int = logging.INFO) -> None:
        """Log a transfer not made, at most a few lines a minute per client address."""
        qt = "AXFR" if q.qtype == RRType.AXFR else "IXFR"
        self._refusals.log(str(peer[0] if isinstance(peer, tuple) else peer), level,
                           "transfer %s from %s refused: %s", qt, peer, why,
                           extra={"event": "transfer_refused", "qtype": qt, "peer": str(peer), "reason": why})

    def stream(self, msg: bytes, peer: Any) -> Iterator[bytes] | None:
        """Responses to a TCP AXFR/IXFR query; None when `msg` is no such query."""
        end = question_end(msg)  # confirmed by parse_query
        if end < 17 or len(msg) < end or msg[2] & 0xF8 or msg[end - 4] or msg[end - 3] not in _XFR:
            return None
        try:
            q = parse_query(msg)
        except (Drop, FormErr):
            return None  # the handler drops or answers FORMERR
        return self._respond(msg, q, peer)

    def _respond(self, msg: bytes, q: Query, peer: Any) -> Iterator[bytes]:
        """The messages answering a transfer query: refused (TSIG, ACL, zone, state,
        load), FORMERR for an IXFR without the client's SOA, else the transfer, signed
        when the query was."""
        signer: tsig.Signer | None = None
        allowed = self.allowed(peer)
        if q.tsig >= 0:
            v = tsig.verify(self.keys, msg, q)
            if v.rr is not None and v.error:  # every failure, BADKEY included; the line states the ACL check
                acl = "" if allowed else "; not in --allow-transfer"
                self._refused(q, peer, tsiglog.failure(v.rr, v.error) + acl, logging.WARNING)
                self._count(q.qtype, "notauth")
            if v.signer is None:
                yield v.refusal
                return
            signer = v.signer
        rcode, why = self._denial(q, allowed, signer is not None)
        if rcode:
            self._refused(q, peer, why)
            self._count(q.qtype, "refused" if rcode == Rcode.REFUSED else "servfail")
            out = header_only(q, rcode)
            yield signer.sign(out) if signer else out
            return
        deltas: list[Delta] | None = None
        if q.qtype == RRType.IXFR:
            client = _client_serial(q, msg)
            if client is None:
                self._count(q.qtype, "formerr")
                out = header_only(q, Rcode.FORMERR)
                yield signer.sign(out) if signer else out
                return
            deltas = self.versions.deltas_since(client)
        kind = "AXFR" if deltas is None else "IXFR"
        what = kind if q.qtype == RRType.AXFR else f"IXFR ({kind})"
        log.info("%s of %s serial %d to %s", what, decode_name(self.zone.origin), self.zone.serial, peer,
                 extra={"event": "transfer", "qtype": "AXFR" if q.qtype == RRType.AXFR else "IXFR",
                        "kind": kind,
                        "zone": decode_name(self.zone.origin), "serial": self.zone.serial,
                        "peer": str(peer)})
        self._count(q.qtype, "axfr" if deltas is None else "ixfr")
        records = self._axfr() if deltas is None else self._ixfr(deltas)
        self.active += 1  # until this generator ends or is dropped with its connection
        try:
            for out in _messages(q, records, self.zone.ttl):
                yield signer.sign(out) if signer else out
        finally:
            self.active -= 1

    def _denial(self, q: Query, allowed: bool, signed: bool) -> tuple[int, str]:
        """(rcode, why) for a transfer not made now, else (0, "")."""
        if not allowed:
            return Rcode.REFUSED, "not in --allow-transfer"
        if self.keys and not signed:
            return Rcode.REFUSED, "not signed with the transfer key"
        if q.qname.lower() != self.zone.origin or q.qclass != RRClass.IN:
            return Rcode.REFUSED, "not our zone"
        if not self.versions.established:
            return Rcode.SERVFAIL, "zone not synced yet"
        if self.active >= MAX_ACTIVE:
            return Rcode.REFUSED, f"{MAX_ACTIVE} transfers already in progress"
        return 0, ""

    def _axfr(self) -> Iterator[Record]:
        """SOA, every record of the zone (as of now), SOA."""
        zone = self.zone
        zone.complete()  # the records no query asked for yet, if the background pass has not built them
        soa = (zone.origin, RRType.SOA, zone.soa.rdata)
        nodes = list(zone.names.items())  # snapshot: RRsets are replaced, never changed
        yield soa
        for name, node in nodes:
            for rtype, rrset in rrsets_at(node).items():
                if rtype == RRType.SOA:
                    continue
                for rd in rrset.records():
                    yield name, rtype, rd
        yield soa

    def _ixfr(self, deltas: list[Delta]) -> Iterator[Record]:
        """RFC 1995 4: new SOA, then per version old SOA, removed, new SOA, added; new SOA.
        An up-to-date client gets the current SOA alone."""
        zone = self.zone
        cur = (zone.origin, RRType.SOA, zone.soa.rdata)
        yield cur
        if not deltas:
            return
        for d in deltas:
            yield zone.origin, RRType.SOA, with_serial(zone.soa.rdata, d.old)
            yield from d.removed
            yield zone.origin, RRType.SOA, with_serial(zone.soa.rdata, d.new)
            yield from d.added
        yield cur
