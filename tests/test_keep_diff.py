"""The C decoder that keeps declared fields (data/_keep.c, `Fields.decoder`) against json +
`Fields.keep`: over generated objects written every way json can write them, cut short
and with characters changed, it either declines (None: json decodes) or returns exactly
what `keep(json's value)` is, types included, ending where json ends; and it never
accepts text json refuses: huge integers (kept or not), deep nesting, control characters,
bytes that are not UTF-8 and text cut short included, alone and in whole lists."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_models import endpoint_slice, malformed, noisy, service_import

from mcsdns.data.fields import Each, Fields
from mcsdns.data.objects import EndpointSlice, ServiceImport
from mcsdns.kube.listdecode import decode_list

_keep = pytest.importorskip("mcsdns.data._keep", reason="the C extension is not built (no compiler)")

SHAPES: list[Fields] = [ServiceImport.SOURCE, EndpointSlice.SOURCE,
                        Fields("a", b=Fields("c", d=Each(Fields("e"))), f=Each(Fields()))]
_JSON = json.JSONDecoder()


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (True is not 1, 1.0 is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)  # NaN


def check(fields: Fields, text: str, pos: int = 0) -> bool:
    """`decode` agrees with json + keep at `pos`; whether it decoded."""
    got = _keep.decode(_keep.compile(fields.shape()), text, pos)
    try:
        value, end = _JSON.raw_decode(text, pos)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer json will not convert
        assert got is None, f"C decoded text json refuses: {text[pos:pos + 200]!r}"
        return False
    if got is None:
        return False
    assert got[1] == end, (got[1], end)
    assert same(got[0], fields.keep(value)), (got[0], fields.keep(value))
    return True


def writings(rng: random.Random, obj: Any) -> list[str]:
    """`obj` as json writes it: compact, spaced, indented, with and without ASCII escapes."""
    compact = (",", ":")
    return [json.dumps(obj, separators=compact), json.dumps(obj), json.dumps(obj, indent=rng.choice([1, 2])),
            json.dumps(obj, ensure_ascii=False, separators=compact)]


def raw_objects(seed: int) -> list[Any]:
    rng = random.Random(seed)
    out: list[Any] = []
    for make in (service_import, endpoint_slice):
        for _ in range(300):
            out.append(malformed(rng, noisy(rng, make(rng).manifest())))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_objects_written_every_way(seed: int) -> None:
    rng = random.Random(seed)
    decoded = tried = 0
    for obj in raw_objects(seed):
        for text in writings(rng, obj):
            for fields in SHAPES[:2]:
                tried += 1
                decoded += check(fields, text)
    assert decoded > tried // 2  # most are decoded here, not declined


@pytest.mark.parametrize("seed", range(3))
def test_text_cut_short_or_changed(seed: int) -> None:
    rng = random.Random(seed)
    for obj in raw_objects(seed)[:200]:
        text = rng.choice(writings(rng, obj))
        for fields in SHAPES[:2]:
            for _ in range(3):
                cut = text[:rng.randrange(len(text))]
                check(fields, cut)
                i = rng.randrange(len(text))
                changed = text[:i] + rng.choice('{}[]:,"\\ -0.1eEtfnux\x00\x1f\u00e9\u4e2d') + text[i + 1:]
                check(fields, changed)


def test_at_a_position_inside_a_larger_text() -> None:
    obj = {"metadata": {"name": "a", "namespace": "b"}, "spec": {"type": "Headless"}}
    text = '{"items":[' + json.dumps(obj) + ", " + json.dumps(obj) + "]}"
    first = text.index("[") + 1
    assert check(ServiceImport.SOURCE, text, first)
    assert check(ServiceImport.SOURCE, text, text.index("{", first + 1))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
              st.text(max_size=8), st.sampled_from(["a", "e", "name", "spec", "\u00e9", "\\", '"'])),
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "\u00e9", "a\nb"]), c, max_size=5)),
    max_leaves=30)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(json_values, st.integers(0, 3), st.integers(0, 2))
def test_any_json_value(value: Any, style: int, which: int) -> None:
    text = writings(random.Random(style), value)[style]
    check(SHAPES[which], text)


def test_escapes_floats_and_big_numbers_are_left_to_json() -> None:
    shape = Fields("a", "b")
    for text in ['{"a":"x\\ny"}', '{"a":1.5}', '{"a":1e3}', '{"a":NaN}', '{"a":-Infinity}',
                 '{"a":' + "9" * 40 + "}", '{"\\u0061":1}', "[" * 100 + "]" * 100]:
        assert _keep.decode(_keep.compile(shape.shape()), text, 0) is None, text
    # not kept: checked only, so decoded here
    text = '{"c":"x\\ny","d":1.5e-3,"a":2}'
    assert _keep.decode(_keep.compile(shape.shape()), text, 0) == ({"a": 2}, len(text))


def test_text_json_refuses_is_refused_in_parts_not_kept_too() -> None:
    bad = ['1.', '-', '01', '1e', '1e+', '.5', '+1', 'tru', 'nul', '"a\\x"', '"\\u12"', '"a\tb"', '[1,]',
           '{"a":1,}', '{"a" 1}', '{a:1}', '{"a":1 "b":2}', "{'a':1}", '[1 2]', '"\\ud800\\u"', '{"a"}']
    for v in bad:
        for fields in (Fields("k"), Fields("x")):  # the bad part not kept, then kept
            text = '{"x":' + v + ',"k":1}'
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)
            assert _keep.decode(_keep.compile(fields.shape()), text, 0) is None, text


_DIGITS = sys.get_int_max_str_digits()  # json refuses an integer longer than this


def hostile_values() -> list[str]:
    """Values json refuses, or decodes only where C must decline."""
    return ["9" * (_DIGITS + 1), "-" + "9" * (_DIGITS + 1), "9" * _DIGITS, "9" * 32, "9" * 31,
            "1" + "0" * 5000 + ".5", "[" * 3000 + "]" * 3000, "[" * 65 + "]" * 65,
            '"a\x00b"', '"\udcff"', '"bad\udcffbyte"', '{"a":[1,2}', '"cut']


@pytest.mark.parametrize("value", hostile_values(), ids=lambda v: v[:12])
@pytest.mark.parametrize("kept", [True, False])
def test_hostile_values_kept_or_not(value: str, kept: bool) -> None:
    """A 5,000-digit integer in a field nothing reads was decoded by C where json refuses it."""
    fields = Fields("k", "x") if kept else Fields("k")
    for text in ('{"x":' + value + ',"k":1}', '{"k":1,"x":' + value + "}", '{"k":[' + value + "]}"):
        check(fields, text)
        check(fields, text[:len(text) // 2])


def test_a_huge_integer_is_refused_by_both_decoders() -> None:
    text = '{"k":1,"x":' + "9" * 5000 + "}"
    assert _keep.decode(_keep.compile(Fields("k").shape()), text, 0) is None
    with pytest.raises(ValueError):
        json.loads(text)


def _list_text(bad: bytes) -> bytes:
    good = json.dumps(service_import_obj()).encode()
    return b'{"kind":"ServiceImportList","metadata":{"resourceVersion":"5"},"items":[' + \
        b",".join([good, bad, good]) + b"]}"


def service_import_obj() -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "shop", "resourceVersion": "4"},
            "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ports": [{"port": 80}]}}


@pytest.mark.parametrize("bad", [
    b'{"metadata":{"name":"x"},"n":' + b"9" * 5000 + b"}",
    b'{"metadata":{"name":"x"},"spec":{"ports":[{"port":' + b"9" * 5000 + b"}]}}",
    b'{"metadata":{"name":"x"},"n":' + b"[" * 3000 + b"]" * 3000 + b"}",
    b'{"metadata":{"name":"x\x00"}}',
    b'{"metadata":{"name":"x\xff\xfe"}}',
    b'{"metadata":{"name":"x"},"spec":{"type":"ClusterSetIP",}}',
], ids=["int-unread", "int-read", "deep", "nul", "utf8", "comma"])
@pytest.mark.parametrize("chunk", [7, 1 << 16])
def test_whole_lists_decode_the_same_with_and_without_c(bad: bytes, chunk: int) -> None:
    """The same items handed on and the same items dropped, with the C decoder and without."""
    data = _list_text(bad)
    results = []
    for scan in (ServiceImport.SOURCE.decoder(), None):
        got: list[Any] = []
        dropped: list[str] = []
        decode_list([data[i:i + chunk] for i in range(0, len(data), chunk)], got.append, batch=64,
                    scan=scan, on_bad=dropped.append)
        results.append(([ServiceImport.SOURCE.keep(g) for g in got], len(dropped)))
    assert results[0] == results[1] and results[0][1] == 1 and len(results[0][0]) == 2, results
