"""The C digest text (zone/_digest.c) against the Python one (zone/journal.py `_text`):
byte for byte, over the records of generated services (both kinds, locality on and off)
and over hand-made names of every shape a zone holds."""

from __future__ import annotations

import random

import pytest
from test_models import endpoint_slice, service_import

import mcsdns.zone.journal as journal
from mcsdns.data.objects import EndpointSlice
from mcsdns.dns.types import RRType
from mcsdns.zone.locality import OFF, Locality
from mcsdns.zone.records import service_records
from mcsdns.zone.rrsets import EMPTY, Names, One, RRset

_digest = pytest.importorskip("mcsdns.zone._digest", reason="the C extension is not built (no compiler)")

ZONE = b"\x0aclusterset\x05local\x00"


def agree(names: Names) -> None:
    """The C text is the Python one (`digest_text` with the C one set aside)."""
    key = ("ns", "svc")
    fast = journal._C_TEXT
    journal._C_TEXT = None
    try:
        want = journal.digest_text(key, names)
    finally:
        journal._C_TEXT = fast
    assert _digest.text(b"ns/svc", names) == want


def test_generated_services() -> None:
    rng = random.Random(3)
    near = Locality(cluster_id="a")
    built = 0
    for _ in range(600):
        si = service_import(rng)
        slices = [endpoint_slice(rng) for _ in range(rng.randint(0, 3))]
        slices = [EndpointSlice(si.namespace, s.name, si.name, s.cluster, s.ipv6, s.endpoints, s.ports)
                  for s in slices]
        for loc in (OFF, near):
            names = service_records(si, slices, ZONE, loc)
            agree(names)
            built += len(names) > 1
    assert built > 200  # services with records, not only empty ones


def test_every_shape_of_name() -> None:
    a, b = b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02"
    six = bytes(15) + b"\x01"
    long_rd = bytes(range(256)) * 200  # longer than the table of lengths the Python side starts with
    names: Names = {
        b"\x01z" + ZONE: One(RRset(RRType.A, (b, a))),  # sorted within
        b"\x01a" + ZONE: {RRType.AAAA: RRset(RRType.AAAA, (six,)), RRType.A: RRset(RRType.A, (a,))},
        b"\x01e" + ZONE: EMPTY,
        b"\x01m" + ZONE: {},
        b"\x01t" + ZONE: One(RRset(300, (long_rd,))),  # a type past the first table
        ZONE: {RRType.SRV: RRset(RRType.SRV, (b"\x00\x01" + a, b"\x00\x00" + b), rotate=True, groups=(1, 1))},
    }
    agree(names)
    agree({})
    with pytest.raises(TypeError):
        _digest.text(b"h", {b"x": One(RRset(RRType.A, ("not bytes",)))})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        _digest.text(b"h", {b"x": One(RRset(70000, (a,)))})
