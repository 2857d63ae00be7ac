"""A list response decoded as it streams in (mcsdns/kube/apiclient/listdecode.py): the same objects
as decoding it whole, however the bytes are cut; items handed on before the list ends;
a large item decoded a bounded number of times; broken text refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcsdns.data.fields import Each, Fields
from mcsdns.kube.apiclient import listdecode
from mcsdns.kube.apiclient.listdecode import decode_list

scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False) | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)
items = st.lists(st.dictionaries(st.text(max_size=6), values, max_size=5), max_size=8)


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    out, i = [], 0
    for n in sizes:
        out.append(data[i:i + n])
        i += n
    out.append(data[i:])
    return out


KEPT = Fields("a", "", b=Fields("c"), d=Each(Fields("e")))  # a shape whose keys `items` holds


@settings(max_examples=300, deadline=None)
@given(items=items, meta=st.dictionaries(st.text(max_size=5), values, max_size=3),
       sizes=st.lists(st.integers(1, 40), max_size=60), indent=st.sampled_from([None, 1]),
       items_first=st.booleans(), kept=st.booleans())
def test_same_as_whole_decoding_however_cut(items: list[dict[str, Any]], meta: dict[str, Any],
                                            sizes: list[int], indent: int | None, items_first: bool,
                                            kept: bool) -> None:
    """`kept`: each item decoded by `Fields.decoder` where it can (the rest by json), as
    `Fields.keep` keeps it."""
    doc = {"items": items, "kind": "XList", "metadata": meta} if items_first else {
        "kind": "XList", "metadata": meta, "items": items}
    data = json.dumps(doc, indent=indent, ensure_ascii=False).encode()
    got: list[Any] = []
    typed = KEPT.decoder() if kept else None
    head = decode_list(cut(data, sizes), got.append, batch=16, typed=typed)
    if typed is None:
        assert got == items
    else:  # an item json decoded (not of the declared shape) is whole: keep it to compare
        assert [KEPT.keep(g) for g in got] == [KEPT.keep(i) for i in items]
    assert head == {**doc, "items": None}


def test_items_are_handed_on_before_the_list_ends() -> None:
    data = json.dumps({"kind": "XList", "metadata": {"resourceVersion": "7"},
                       "items": [{"n": i} for i in range(100)]}).encode()
    seen_at: list[int] = []
    fed = 0

    def chunks() -> Any:
        nonlocal fed
        for i in range(0, len(data), 64):
            fed = i + 64
            yield data[i:i + 64]

    decode_list(chunks(), lambda item: seen_at.append(fed), batch=64)
    assert seen_at[0] <= 128 and seen_at[49] <= len(data) // 2 + 64 and seen_at == sorted(seen_at)


def test_a_large_item_is_decoded_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    big = {"endpoints": [{"addresses": [f"10.0.{i // 256}.{i % 256}"]} for i in range(20000)]}
    data = json.dumps({"kind": "XList", "items": [big]}).encode()
    tries = 0
    real = listdecode._PLAIN.raw_decode

    class Counting:
        def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
            nonlocal tries
            tries += 1
            return real(s, idx)

    monkeypatch.setattr(listdecode, "_PLAIN", Counting())
    monkeypatch.setattr(listdecode, "_HOOKED", Counting())
    got: list[Any] = []
    decode_list(cut(data, [512] * (len(data) // 512)), got.append)  # ~1,400 chunks
    assert got == [big]
    assert tries < 40, tries  # about log2(size / chunk) attempts, not one per chunk


@pytest.mark.parametrize("text", ['{"items": [{"a": 1}', '{"items": [{"a": 1}] ', '{"items": [1 2]}',
                                  '["not", "a", "list object"]', '{"items": [{}]} trailing', ''])
def test_broken_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        decode_list([text.encode()], lambda item: None)


def _without_managed(v: Any) -> Any:
    """What the decoder hands on: a member "managedFields" that is not its object's first and
    whose value is an array with no array inside is left out (the value is read from the
    original, before anything inside it is left out)."""
    if isinstance(v, list):
        return [_without_managed(x) for x in v]
    if not isinstance(v, dict):
        return v

    def has_list(x: Any) -> bool:
        return isinstance(x, list) or (isinstance(x, dict) and any(has_list(y) for y in x.values()))

    first = next(iter(v), None)
    return {k: _without_managed(x) for k, x in v.items() if not (
        k == "managedFields" and k != first and isinstance(x, list) and not any(map(has_list, x)))}


_entry_value: st.SearchStrategy[Any] = (
    st.text() | st.dictionaries(st.text(max_size=8), st.just({}), max_size=3)
    | st.lists(st.text(max_size=3), max_size=2))
managed: st.SearchStrategy[list[dict[str, Any]]] = st.lists(st.dictionaries(
    st.sampled_from(["manager", "time", "fieldsV1", "f:spec", "k"]), _entry_value, max_size=4), max_size=3)
objects = st.lists(st.tuples(st.dictionaries(st.text(max_size=6), values, max_size=4), managed,
                             st.integers(0, 4)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(objs=objects, sizes=st.lists(st.integers(1, 60), max_size=60))
def test_managed_fields_are_left_out_exactly(objs: list[tuple[dict[str, Any], Any, int]],
                                             sizes: list[int]) -> None:
    """metadata.managedFields (a fifth to two fifths of a real server's list) is dropped from the
    text before decoding, wherever it sits in its object and whatever its strings hold
    (brackets, quotes, backslashes); when it holds an array, or comes first, it is kept."""
    items = []
    for meta, mf, at in objs:
        pairs = list(meta.items())
        pairs.insert(min(at, len(pairs)), ("managedFields", mf))
        items.append({"metadata": dict(pairs), "spec": {"ports": [{"port": 80}]}})
    data = json.dumps({"kind": "XList", "metadata": {"resourceVersion": "1"}, "items": items},
                      separators=(",", ":"), ensure_ascii=False).encode()
    got: list[Any] = []
    decode_list(cut(data, sizes), got.append, batch=16)
    assert got == _without_managed(items)


HUGE = b'{"x":' + b"9" * 5000 + b"}"  # json refuses the number; msgspec skips it, unread
BAD = [b'{"x":' + b"[" * 3000 + b"]" * 3000 + b"}", b'{"x":"a\x00b"}', b'{"x":"\xff\xfe"}',
       b'{"x":' + b"9" * 5000 + b"}", b'{"x":[1,2}', b"tru", b'{"x":1,}', b'{"\\q":1}',
       b'{"x":' + b'[{"a":' * 2000 + b"1" + b"}]" * 2000 + b"}"]


@settings(max_examples=150, deadline=None)
@given(items=items, bad=st.sampled_from(BAD), at=st.integers(0, 8),
       sizes=st.lists(st.integers(1, 300), max_size=60), kept=st.booleans())
def test_an_item_that_does_not_decode_is_dropped_and_the_rest_decoded(
        items: list[dict[str, Any]], bad: bytes, at: int, sizes: list[int], kept: bool) -> None:
    """Before: one such item (too deep, a raw control character, bytes not UTF-8, an integer
    json refuses, not JSON) refused the whole list."""
    texts = [json.dumps(i, ensure_ascii=False).encode() for i in items]
    texts.insert(min(at, len(texts)), bad)
    data = b'{"kind":"XList","metadata":{"resourceVersion":"9"},"items":[' + b", ".join(texts) + b"]}"
    got: list[Any] = []
    dropped: list[str] = []
    typed = KEPT.decoder() if kept else None
    head = decode_list(cut(data, sizes), got.append, batch=16, typed=typed, on_bad=dropped.append)
    if kept and bad == HUGE:  # in a field no parser reads (test_a_huge_number_in_an_unread_field)
        return
    assert [KEPT.keep(g) for g in got] == [KEPT.keep(i) for i in items] and len(dropped) == 1, dropped
    assert head == {"kind": "XList", "metadata": {"resourceVersion": "9"}, "items": None}


def test_a_huge_number_in_an_unread_field_is_skipped_by_the_typed_decoder() -> None:
    """json refuses a 5,000-digit integer (the item is dropped); msgspec skips it unbuilt, in
    a field the parser does not read, and the item is served."""
    data = b'{"kind":"XList","items":[' + HUGE[:-1] + b',"a":1}, {"a":2}]}'
    for typed, want, bad in ((KEPT.decoder(), [{"a": 1}, {"a": 2}], 0), (None, [{"a": 2}], 1)):
        got: list[Any] = []
        dropped: list[str] = []
        decode_list([data], got.append, typed=typed, on_bad=dropped.append)
        assert got == want and len(dropped) == bad


@pytest.mark.parametrize("text", [
    '{"items": [{"a": 1}, {"b": [', '{"items": [{"a": "cut', '{"items": [1, ,]}', '{"items": [{"a": 1}]}}',
    '{"metadata": {"x": ' + "[" * 3000 + "]" * 3000 + "}}", '{"kind": "\udcff"}'])
def test_a_broken_list_is_refused_even_where_items_may_be_dropped(text: str) -> None:
    """Text that ends inside an item, a comma without an item, a head that does not decode:
    the list itself is broken."""
    with pytest.raises(ValueError):
        decode_list([text.encode("utf-8", "surrogateescape")], lambda item: None, on_bad=lambda why: None)


@pytest.mark.parametrize("text, end", [
    ('{"a":"x]"}, 1', 10), ('[[1],{"a":[2]}],', 15), ("tru, 1", 3), ("1]", 1), ('{"a":[1,2},{"b":1}', 10),
    ('{"a":{"b":1]', 11), ('{"a":"cut', None), ("[" * 2000 + "]" * 2000, 4000),
    ("[" * 2000 + "]" * 1999, None)])
def test_the_extent_of_a_value_from_its_brackets_and_quotes(text: str, end: int | None) -> None:
    assert listdecode.extent(text, 0) == end
