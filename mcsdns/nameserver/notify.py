"""NOTIFY (RFC 1996): tell secondaries that the zone has a new serial.

`Notifier.update(serial)` records the newest serial; a task sends one NOTIFY
per target for it, at most one round per BATCH seconds (changes arriving
meanwhile are folded into the next round), and retries a target that does
not answer (RETRIES times, the timeout doubling from 1 s). A newer serial
replaces a pending retry. Signed with the TSIG key when one is configured.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import socket
import struct
from collections import Counter

from ..dns import header, tsig
from ..dns.rdata import SOA
from ..dns.types import Opcode, RRClass, RRType
from ..dns.writer import Writer
from ..ops.stats import Put, define
from ..zone.serial import serial_lt

log = logging.getLogger("mcsdns.notify")

BATCH = 0.1
RETRIES = 5
TIMEOUT = 1.0
NOTIFIES = define("mcsdns_notify_total", "counter", "NOTIFY messages by target and outcome "
                  "(sent, answered, error, unanswered).", ("target", "outcome"))
OUTCOMES = ("sent", "answered", "error", "unanswered")


class _Reply(asyncio.DatagramProtocol):
    def __init__(self, qid: bytes) -> None:
        self.qid = qid
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if (len(data) >= 12 and data[:2] == self.qid and data[2] & 0x80
                and header.opcode(header.flags_of(data)) == Opcode.NOTIFY and not self.done.done()):
            self.done.set_result(data[3] & 0xF)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable: retry later
        pass


def _same(reply: _Reply) -> _Reply:
    return reply


def notify_message(origin: bytes, ttl: int, serial: int, qid: int) -> bytes:
    """A NOTIFY for `origin` with its SOA (new serial) in the Answer section."""
    w = Writer(origin, len(origin) + 4)
    w.add(None, RRType.SOA, ttl, SOA.for_zone(origin, ttl, serial).wire())
    body, n = w.take()
    flags = (Opcode.NOTIFY << 11) | header.AA
    return (header.pack(struct.pack("!H", qid), flags, 1, n) + origin
            + struct.pack("!HH", RRType.SOA, RRClass.IN) + body)


class Notifier:
    """Sends NOTIFY for each new serial to the --notify targets, with retries."""

    def __init__(self, origin: bytes, ttl: int, targets: list[tuple[str, int]],
                 key: tsig.Key | None = None) -> None:
        self.origin, self.ttl, self.targets, self.key = origin, ttl, targets, key
        self.wanted: int | None = None
        self.sent_serial: int | None = None
        # (target, outcome); every series from 0, so the first failure is an increase
        self.counts: Counter[tuple[str, str]] = Counter(
            {(f"{h}:{port}", o): 0 for h, port in targets for o in OUTCOMES})
        self._event = asyncio.Event()
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._runner: asyncio.Task[None] | None = None

    def publish(self, put: Put) -> None:
        for (target, outcome), n in list(self.counts.items()):
            put(NOTIFIES, n, target=target, outcome=outcome)

    def update(self, serial: int) -> None:
        """The zone now has `serial`: notify the targets soon."""
        if self.targets and (self.wanted is None or serial_lt(self.wanted, serial)):
            self.wanted = serial
            self._event.set()

    def start(self) -> None:
        if self.targets and self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        for t in [self._runner, *self._tasks.values()]:
            if t is not None:
                t.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last = -BATCH
        while True:
            await self._event.wait()
            await asyncio.sleep(max(0.0, last + BATCH - loop.time()))
            self._event.clear()
            serial = self.wanted
            if serial is None or serial == self.sent_serial:
                continue
            last = loop.time()
            self.sent_serial = serial
            for target in self.targets:
                old = self._tasks.get(target)
                if old is not None:
                    old.cancel()
                self._tasks[target] = loop.create_task(self._send(target, serial))

    async def _send(self, target: tuple[str, int], serial: int) -> None:
        loop = asyncio.get_running_loop()
        name = f"{target[0]}:{target[1]}"
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        timeout = TIMEOUT
        for attempt in range(RETRIES):
            qid = random.randrange(1 << 16)
            msg = notify_message(self.origin, self.ttl, serial, qid)
            if self.key is not None:
                msg, _mac = tsig.sign_request(self.key, msg)
            transport = None
            try:
                reply = _Reply(struct.pack("!H", qid))
                transport, _ = await loop.create_datagram_endpoint(
                    functools.partial(_same, reply), remote_addr=target, family=family)
                transport.sendto(msg)
                self.counts[(name, "sent")] += 1
                rcode = await asyncio.wait_for(reply.done, timeout)
            except (TimeoutError, OSError) as e:
                if attempt + 1 < RETRIES:
                    log.debug("NOTIFY serial %d to %s: %s; retrying", serial, name, e or "no answer")
                timeout *= 2
                continue
            finally:
                if transport is not None:
                    transport.close()
            if rcode:
                self.counts[(name, "error")] += 1
                log.warning("NOTIFY serial %d to %s answered rcode %d", serial, name, rcode,
                            extra={"event": "notify", "serial": serial, "target": name, "result": "error",
                                   "rcode": rcode})
            else:
                self.counts[(name, "answered")] += 1
                log.info("NOTIFY serial %d to %s acknowledged", serial, name,
                         extra={"event": "notify", "serial": serial, "target": name, "result": "answered"})
            return
        self.counts[(name, "unanswered")] += 1
        log.warning("NOTIFY serial %d to %s: no answer after %d tries", serial, name, RETRIES,
                    extra={"event": "notify", "serial": serial, "target": name, "result": "unanswered",
                           "tries": RETRIES})
