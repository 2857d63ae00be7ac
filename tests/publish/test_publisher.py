"""The one owner of the zone version (publish/publisher.py): a change is published with its
serial in one step, and workers that batched the same changes differently end on one
serial through the shared serial file, without polling."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from mcsdns.dns.names import encode_name
from mcsdns.dns.types import RRType
from mcsdns.nameserver.cache import ResponseCache
from mcsdns.publish.publisher import ZonePublisher
from mcsdns.zone.journal import Versions
from mcsdns.zone.rrsets import Names, RRset
from mcsdns.zone.serial import SerialClock
from mcsdns.zone.zone import Zone


def names(svc: str, addr: int) -> Names:
    a = RRset(RRType.A, (bytes((10, 0, 0, addr)),))
    return {encode_name(f"{svc}.shop.svc.clusterset.local"): {RRType.A: a}}


def apply(p: ZonePublisher, *changes: tuple[str, int]) -> None:
    """What publish.builder does for built services: fold each one's input digest (here
    made of its name and address), then apply its records."""
    for svc, addr in changes:
        digest = hashlib.blake2b(f"{svc}/{addr}".encode(), digest_size=16).digest()
        p.versions.fold(("shop", svc), int.from_bytes(digest))
    p.apply([(("shop", svc), names(svc, addr)) for svc, addr in changes])


def publisher(serial_file: str | None) -> ZonePublisher:
    zone = Zone(serial=1)
    return ZonePublisher(zone, Versions(zone, SerialClock(serial_file)), ResponseCache(zone), serial_file)


def test_a_change_is_served_with_a_new_serial_at_once() -> None:
    p = publisher(None)
    seen: list[tuple[int, bool]] = []
    p.on_serial.append(lambda s, new: seen.append((s, new)))
    apply(p, ("web", 1))
    assert seen == [] and not p.versions.established  # not loaded: no serial yet
    p.load()
    s0 = p.zone.serial
    assert seen == [(s0, True)] and p.cache.serial == s0.to_bytes(4, "big")
    nx = encode_name("nothing.shop.svc.clusterset.local")
    assert p.cache.answer(nx, b"\x00\x01\x00\x01").serial_at  # a negative answer, kept
    apply(p, ("api", 2))
    s1 = p.zone.serial
    assert seen[-1] == (s1, True) and s1 != s0 and p.cache.serial == s1.to_bytes(4, "big")
    assert p.versions.deltas_since(s0) is not None  # the journal has the step
    apply(p, ("api", 2))  # nothing changed: no new serial
    assert p.zone.serial == s1 and len(seen) == 2


def test_workers_that_batched_differently_adopt_one_serial(tmp_path: Path) -> None:
    shared = str(tmp_path / "serial")

    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        a, b = publisher(shared), publisher(shared)
        for p in (a, b):
            p.load()
            p.watch(loop)
        base = a.zone.serial
        assert b.zone.serial == base
        x, y = ("x", 1), ("y", 2)
        apply(b, x, y)  # b saw both changes at once: it allocates for the content x+y first
        await asyncio.sleep(0.05)
        apply(a, x)  # a saw them one by one: x alone is new content, then x+y again
        apply(a, y)
        for _ in range(100):
            if a.zone.serial == b.zone.serial:
                break
            await asyncio.sleep(0.02)
        for p in (a, b):
            p.close(loop)
        return a.zone.serial, b.zone.serial

    sa, sb = asyncio.run(run())
    assert sa == sb


def test_a_lagging_process_keeps_its_serial_until_its_content_changes(tmp_path: Path) -> None:
    """Three processes share one serial file. When one allocates a serial for new
    content, another that has not applied the change yet and looks at the file keeps
    its own serial; once it applies the change it adopts the same new serial. One
    change, one new serial."""

    path = str(tmp_path / "serial")
    a, b, c = SerialClock(path), SerialClock(path), SerialClock(path)
    s0, new = a.assign(b"old", None)
    assert new and b.assign(b"old", None) == (s0, False) == c.assign(b"old", None)
    s1, new = a.assign(b"new", s0)
    assert new and s1 != s0
    assert b.assign(b"old", s0) == (s0, False)  # lagging: its content is unchanged
    assert c.assign(b"old", s0) == (s0, False)
    assert b.assign(b"new", s0) == (s1, False) == c.assign(b"new", s0)
    assert SerialClock(path).current() == s1
