"""The records, left-out reports, cuts and digests of a service are exactly those the code
made before the first-load speed-ups: the same names in the same order, the same RRsets
(types, rdatas and their order, Additional, rotation, tiers) in the same shapes (One, the
shared EMPTY, dicts), the same LeftOut and the same `service_digest` (it decides the SOA
serials shared between processes and kept in --state-dir). Checked against the frozen
copy of that code (records_reference.py), on generated services and on a fixed varied set
whose golden hash was taken from the unchanged checkout; and the zone applies changes
(Zone.stage, Zone.commit) as before."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import pytest
import records_reference as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcsdns.data.objects import Endpoint, EndpointSlice, Port, ServiceImport
from mcsdns.dns.names import NameTooLong, encode_name, prefix, under
from mcsdns.zone import records
from mcsdns.zone.journal import service_digest, work_out
from mcsdns.zone.leftout import LeftOut
from mcsdns.zone.locality import OFF, ONLY_WHEN_AVAILABLE, Locality
from mcsdns.zone.records import service_records
from mcsdns.zone.rrsets import Names
from mcsdns.zone.zone import Zone

ZONES = (encode_name("clusterset.local"), encode_name(".".join(["z" * 60] * 3) + ".local"))
LABELS = ("web", "db", "a" * 63, "b" * 40, "shop")
CLUSTERS = ("c1", "c2", "east.c3", "x" * 63 + "." + "y" * 63, "c" * 50)
HOSTS = ("p0", "p1", "p2", "p3", "h" * 63, "10-0-0-1", "2001-db8--1")
PORT_NAMES = ("", "http", "dns", "p" * 63, "metrics")
LOCALITIES = (
    OFF, Locality(cluster_id="c1"),
    Locality(cluster_id="c1", region="r1", zone="z1", cluster_regions={"c2": "r1", "east.c3": "r2"}),
    Locality(cluster_id="c2", policy=ONLY_WHEN_AVAILABLE, cluster_regions={"c1": "r1", "c2": "r1"}),
    Locality(terminating_fallback=True),
    Locality(cluster_id="east.c3", region="r2", policy=ONLY_WHEN_AVAILABLE, terminating_fallback=True))
V4 = tuple(bytes((10, 0, 0, i)) for i in range(8))
V6 = tuple(bytes((0xfd, 0, *([0] * 13), i)) for i in range(8))
Case = tuple[ServiceImport, list[EndpointSlice], bytes, Locality]  # a service, its slices, zone, locality


def dump(names: Mapping[bytes, Any], left: LeftOut) -> tuple[Any, ...]:
    """Everything a build gives, in order, shapes named (One, dict, the shared empty map)."""
    out = []
    for n, rrsets in names.items():
        shape = type(rrsets).__name__
        out.append((n, shape, [(t, rr.rtype, rr.rdatas, rr.extra, rr.rotate, rr.groups)
                               for t, rr in rrsets.items()]))
    return (out, [(k, list(c.items())) for k, c in left.counts.items()], list(left.first.items()), left.cuts)


def both(si: ServiceImport, slices: list[EndpointSlice], zone: bytes, loc: Locality
         ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(live, reference) dumps of one build, each with its digest."""
    left, ref_left = LeftOut(), LeftOut()
    names = service_records(si, slices, zone, loc, left)
    ref_names = ref.service_records(si, slices, zone, loc, ref_left)
    key = (si.namespace, si.name)
    assert work_out(key, {}, names, False).digest == service_digest(key, names)
    return ((dump(names, left), service_digest(key, names)),
            (dump(ref_names, ref_left), ref.service_digest(key, ref_names)))


ports = st.lists(st.builds(Port, st.sampled_from(PORT_NAMES), st.sampled_from(("TCP", "UDP", "SCTP")),
                           st.sampled_from((53, 80, 8080))), max_size=4).map(tuple)


@st.composite
def endpoint(draw: st.DrawFn, v6: bool) -> Endpoint:
    addrs = draw(st.lists(st.sampled_from(V6 if v6 else V4), min_size=1, max_size=3, unique=True))
    ready = draw(st.booleans())
    return Endpoint(tuple(addrs), draw(st.sampled_from(HOSTS)), ready, draw(st.booleans()) or ready,
                    draw(st.booleans()), draw(st.sampled_from(("", "z1", "z2"))))


@st.composite
def endpoint_slice(draw: st.DrawFn, ns: str, svc: str) -> EndpointSlice:
    v6 = draw(st.booleans())
    eps = draw(st.lists(endpoint(v6), max_size=6))
    return EndpointSlice(ns, f"{svc}-{draw(st.integers(0, 9))}", svc, draw(st.sampled_from(CLUSTERS)), v6,
                         tuple(eps), draw(ports))


@st.composite
def service(draw: st.DrawFn) -> Case:
    ns, name = draw(st.sampled_from(LABELS)), draw(st.sampled_from(LABELS))
    headless = draw(st.booleans())
    ips = () if headless else tuple(draw(st.lists(st.sampled_from(V4 + V6), max_size=4, unique=True)))
    si = ServiceImport(ns, name, headless, ips, draw(ports))
    slices = draw(st.lists(endpoint_slice(ns, name), max_size=4)) if headless else []
    return si, slices, draw(st.sampled_from(ZONES)), draw(st.sampled_from(LOCALITIES))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(service())
def test_generated_services_build_as_before(case: Case) -> None:
    live, before = both(*case)
    assert live == before


def c_made(si: ServiceImport, slices: list[EndpointSlice], zone: bytes, loc: Locality) -> Names | None:
    """What the C mirror makes of a service (None: it declines, or is not asked)."""
    if not si.headless:
        return records._C_CLUSTERSETIP(si, zone) if records._C_CLUSTERSETIP else None
    if loc.enabled or records._C_HEADLESS is None:
        return None
    return records._C_HEADLESS(si, slices, zone, loc.terminating_fallback)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(service())
def test_the_c_records_are_the_reference_records(case: Case) -> None:
    si, slices, zone, loc = case
    made = c_made(si, slices, zone, loc)
    if made is not None:
        ref_left = LeftOut()
        assert dump(made, LeftOut()) == dump(ref.service_records(si, slices, zone, loc, ref_left), ref_left)


def test_the_c_records_make_the_common_services() -> None:
    """Every plain service of both kinds is made in C (none declined), as the reference does."""
    if records._C_CLUSTERSETIP is None:
        pytest.skip("the C extension is not built (no compiler)")
    p80 = Port("http", "TCP", 80)
    for i in range(60):
        si = ServiceImport("ns", f"s{i}", False, ((V4 + V6)[i % 16],), (p80, Port("", "UDP", 53))[:i % 3])
        eps = tuple(Endpoint((bytes((10, 1, 0, j)),), f"p{j}", True, True, False, "") for j in range(i))
        sl = [EndpointSlice("ns", f"h{i}-{c}", f"h{i}", c, False, eps, (p80,)) for c in ("c1", "east.c3")]
        hl = ServiceImport("ns", f"h{i}", True, (), (p80,))
        fallback = Locality(terminating_fallback=i % 2 == 1)
        cases: list[Case] = [(si, [], ZONES[i % 2], OFF), (hl, sl[:1 + i % 2], ZONES[0], fallback)]
        for case in cases:
            made, ref_left = c_made(*case), LeftOut()
            assert made is not None
            assert dump(made, LeftOut()) == dump(ref.service_records(*case, ref_left), ref_left)


def _big(cluster: str, n: int, host: str, v6: bool = False, at: int = 0) -> EndpointSlice:
    """`n` ready endpoints of one address each, hostnames `<host><i>`."""
    def addr(i: int) -> bytes:
        if v6:
            return bytes((0xfd, at, *([0] * 10), *(i + 1).to_bytes(4, "big")))
        return bytes((10, at, i >> 8, i & 255))
    eps = tuple(Endpoint((addr(i),), f"{host}{i}", True, True, False, "") for i in range(n))
    return EndpointSlice("big", f"s-{cluster}-{at}", "svc", cluster, v6, eps,
                         (Port("http", "TCP", 80), Port("http", "UDP", 80), Port("", "TCP", 9)))


def fixed() -> list[Case]:
    """A varied set: every kind of service, merged hostnames, names too long, duplicated
    ports, tiers, and RRsets past SAFE_COUNT, some cut to one message."""
    z = ZONES[0]
    p80, u80, p53 = Port("http", "TCP", 80), Port("http", "UDP", 80), Port("dns", "UDP", 53)
    si_ports = (p80, u80, Port("http", "TCP", 81), Port("", "TCP", 1), p53, Port("p" * 63, "TCP", 2))
    vips = (V4[1], V6[1], V4[2], V4[1])
    cases: list[Case] = [(ServiceImport("ns", "vip", False, vips, si_ports), [], z, OFF),
                         (ServiceImport("ns", "v6", False, (V6[3],), (p53,)), [], z, OFF),
                         (ServiceImport("ns", "none", False, (), ()), [], z, OFF),
                         (ServiceImport("a" * 63, "b" * 63, False, (V4[0],), (p80,)), [], ZONES[1], OFF)]
    merged = [EndpointSlice("ns", "m-1", "hl", "c1", False, (
        Endpoint((V4[0], V4[1]), "p0", True, True, False, "z1"),
        Endpoint((V4[1], V4[2]), "p0", True, True, False, "z2"),
        Endpoint((V4[3],), "p1", False, True, True, ""),
        Endpoint((V4[4],), "h" * 63, True, True, False, "")), (p80, u80, p53, Port("", "TCP", 7))),
        EndpointSlice("ns", "m-2", "hl", "c2", True, (
            Endpoint((V6[0], V6[1]), "p0", True, True, False, "z1"),
            Endpoint((V6[2],), "p2", True, False, False, "")), (p80, Port("p" * 63, "TCP", 3))),
        EndpointSlice("ns", "m-3", "hl", "x" * 63 + "." + "y" * 63, False, (
            Endpoint((V4[5],), "p0", True, True, False, ""),), (p80,))]
    for loc in LOCALITIES:
        cases.append((ServiceImport("ns", "hl", True, (), (p80,)), merged, z, loc))
    big = ServiceImport("big", "svc", True, (), (p80,))
    cases += [(big, [_big("c1", 300, "p")], z, OFF),  # past SAFE_COUNT, not cut
              (big, [_big("c2", 2500, "p", at=2), _big("c1", 2000, "q", at=1)], z, LOCALITIES[2]),  # A cut
              (big, [_big("c1", 700, "h" * 55, v6=True), _big("c2", 300, "g" * 55, v6=True, at=1)], z,
               LOCALITIES[1])]  # SRV cut
    return cases


# sha256 of the fixed set's dumps and digests, taken with the code at 58424b2
GOLDEN = "a5fc8cc251f5797117c5057dbcfc266391a8f2ed3506c01378bc9906f15e9605"


@pytest.fixture(params=["C", "Python"])
def maker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The records made by the C mirror where it is built (`_records`), or by Python alone."""
    if request.param == "Python":
        monkeypatch.setattr(records, "_C_CLUSTERSETIP", None)
        monkeypatch.setattr(records, "_C_HEADLESS", None)
    elif records._C_CLUSTERSETIP is None:
        pytest.skip("the C extension is not built (no compiler)")
    return str(request.param)


def test_a_fixed_varied_set_builds_as_before(maker: str) -> None:
    h = hashlib.sha256()
    for case in fixed():
        live, before = both(*case)
        assert live == before
        h.update(repr(live).encode())
    assert h.hexdigest() == GOLDEN


def test_the_digest_of_rdata_and_types_larger_than_the_zone_makes_is_as_before() -> None:
    """Rdata past dns.limits.RDATA_MAX and types past 255 (the digest's tables) hash as before."""
    from mcsdns.zone.rrsets import One, RRset
    names: Names = {b"\x01a\x00": One(RRset(300, (b"x" * 300,))), b"\x01b\x00": {1: RRset(1, (b"\x01" * 4,))},
             b"\x01c\x00": One(RRset(65535, (b"y" * 65535, b"z")))}
    assert service_digest(("ns", "svc"), names) == ref.service_digest(("ns", "svc"), names)
    small: Names = {b"\x01d\x00": One(RRset(16, (b"short",)))}
    assert service_digest(("ns", "svc"), small) == ref.service_digest(("ns", "svc"), small)


def _built(make: Any, *args: Any) -> tuple[str, bytes]:
    try:
        return "ok", make(*args)
    except ref.NameTooLong as e:  # the live one is another class: compare by name and content
        return "NameTooLong", e.name
    except NameTooLong as e:
        return "NameTooLong", e.name


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text("ab-_", max_size=70), max_size=5), st.sampled_from((b"\x00", ZONES[0], ZONES[1])))
def test_names_are_built_as_before(labels: list[str], base: bytes) -> None:
    assert _built(prefix, labels, base) == _built(ref.prefix, labels, base)
    for lab in labels:
        assert _built(under, lab, base) == _built(ref.under, lab, base)


ZONE_KEYS = (("ns1", "a"), ("ns1", "b"), ("ns2", "a"))


def _variant(key: tuple[str, str], v: int) -> Names:
    """No names (0), a ClusterSetIP service (1, 2), or a headless one (3)."""
    if v == 0:
        return {}
    if v < 3:
        si = ServiceImport(*key, False, (V4[v],), (Port("http", "TCP", 80),))
        return service_records(si, [], ZONES[0])
    eps = (Endpoint((V4[0],), "p0", True, True, False, ""), Endpoint((V4[1],), "p1", True, True, False, ""))
    sl = EndpointSlice(key[0], f"{key[1]}-1", key[1], "c1", False, eps, (Port("http", "TCP", 80),))
    return service_records(ServiceImport(*key, True, (), ()), [sl], ZONES[0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ZONE_KEYS), st.integers(0, 3)), max_size=12))
def test_zone_changes_are_applied_as_before(steps: list[tuple[tuple[str, str], int]]) -> None:
    """Services added, changed, set again unchanged and removed: the same zone (names in
    order), the same Change for each, and the same namespace names."""
    zone, before = Zone(serial=1), ref.RefZone(serial=1)
    for key, v in steps:
        got = zone.set_service(key, _variant(key, v))
        want = before.set_service(key, _variant(key, v))
        assert got == want
        assert list(zone.names.items()) == list(before.names.items())
        assert zone.svc_names == before.svc_names and zone.ns_refs == before.ns_refs
