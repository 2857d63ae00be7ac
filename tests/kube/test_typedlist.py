"""A list decoded by msgspec as its text arrives (mcsdns/kube/apiclient/typedlist.py): items
handed on while the rest is still coming, the same items as decoding it whole, and text
that is not of the expected form left to the streaming json decoder (a bad item dropped
alone, a broken list refused)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcsdns.data.fields import Each, Fields
from mcsdns.kube.apiclient.listdecode import decode_list

KEPT = Fields("kind", metadata=Fields("name", "namespace"), endpoints=Each(Fields("addresses")))


def kube_list(n: int, items_first: bool = False) -> dict[str, Any]:
    """A list as kube-apiserver sends it (compact; for custom resources `items` before
    `kind` and `metadata`), with fields no parser reads."""
    items = [{"apiVersion": "v1", "kind": "X", "metadata": {
        "name": f"n{i}", "namespace": "ns", "uid": f"u{i}",
        "annotations": {"text": 'a string with ,{"apiVersion": in it'},
        "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
        "endpoints": [{"addresses": [f"10.0.{i // 250}.{i % 250}"], "zone": "z"}]} for i in range(n)]
    meta = {"resourceVersion": "42", "continue": ""}
    return ({"apiVersion": "v1", "items": items, "kind": "XList", "metadata": meta} if items_first
            else {"kind": "XList", "apiVersion": "v1", "metadata": meta, "items": items})


def chunks_of(data: bytes, size: int, fed: list[int]) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        fed[0] = min(len(data), i + size)
        yield data[i:i + size]


@pytest.mark.parametrize("items_first", [False, True])
def test_items_are_decoded_while_the_list_arrives_and_equal_whole_decoding(items_first: bool) -> None:
    doc = kube_list(400, items_first)
    data = json.dumps(doc, separators=(",", ":")).encode()
    fed = [0]
    seen_at: list[int] = []
    got: list[Any] = []

    def item(obj: Any) -> None:
        seen_at.append(fed[0])
        got.append(obj)

    head = decode_list(chunks_of(data, 4096, fed), item, batch=8192, typed=KEPT.decoder())
    assert got == [KEPT.keep(i) for i in doc["items"]]
    assert head == {**doc, "items": None}
    assert seen_at[len(seen_at) // 2] < len(data) * 3 // 4  # half of them before three quarters came
    assert seen_at == sorted(seen_at)


def test_an_item_not_utf8_after_items_were_handed_on_is_dropped_alone() -> None:
    doc = kube_list(200)
    text = json.dumps(doc, separators=(",", ":")).encode()
    at = text.index(b'"name":"n150"')
    data = text[:at] + b'"x":"\xff\xfe",' + text[at:]  # bytes that are not UTF-8, in item 150
    got: list[Any] = []
    dropped: list[str] = []
    head = decode_list(chunks_of(data, 1024, [0]), got.append, batch=2048, typed=KEPT.decoder(),
                       on_bad=dropped.append)
    assert [g["metadata"]["name"] for g in got] == [f"n{i}" for i in range(200) if i != 150]
    assert len(dropped) == 1 and head["metadata"]["resourceVersion"] == "42"


@pytest.mark.parametrize("tail", [b"]}}", b"]", b'],"kind":"XList"', b"]} x"])
def test_a_broken_end_of_the_list_is_refused(tail: bytes) -> None:
    body = json.dumps(kube_list(50), separators=(",", ":")).encode()
    data = body[:body.rindex(b"]")] + tail
    with pytest.raises(ValueError):
        decode_list(chunks_of(data, 512, [0]), lambda item: None, batch=1024, typed=KEPT.decoder(),
                    on_bad=lambda why: None)


@pytest.mark.parametrize("head", [b'{"kind":"XList",,"items":[', b'{"kind":"XList" "items":['])
def test_a_broken_head_is_refused(head: bytes) -> None:
    data = head + b'{"kind":"X"}]}'
    with pytest.raises(ValueError):
        decode_list([data], lambda item: None, typed=KEPT.decoder(), on_bad=lambda why: None)


names = st.text(st.characters(codec="utf-8"), max_size=8)


@settings(max_examples=150, deadline=None)
@given(names=st.lists(names, max_size=30), size=st.integers(1, 200), batch=st.integers(1, 300),
       items_first=st.booleans())
def test_same_items_however_cut(names: list[str], size: int, batch: int, items_first: bool) -> None:
    doc = kube_list(len(names), items_first)
    for item, name in zip(doc["items"], names, strict=True):
        item["metadata"]["name"] = name
    data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    got: list[Any] = []
    head = decode_list(chunks_of(data, size, [0]), got.append, batch=batch, typed=KEPT.decoder())
    assert got == [KEPT.keep(i) for i in doc["items"]] and head == {**doc, "items": None}
