"""A broken or hostile API endpoint costs a bounded effort (tests/fakeapi/hostile.py): a watch that
fails at once is followed only after client-go's backoff, whatever it read; a list item that
does not decode is dropped and counted while the rest are served; a watch line without end is
cut at 6 MiB, in linear time; a 429 or 503's Retry-After is honoured, within a bound."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from fakeapi.hostile import HostileAPI
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import run_server, wait_for
from support.kube_objects import addrs, endpoint_slice, service_import

from mcsdns.kube.apiclient.cache import Cache
from mcsdns.kube.apiclient.client import Client
from mcsdns.kube.apiclient.errors import RETRY_AFTER_MAX, Unreachable, parse_retry_after
from mcsdns.kube.apiclient.reflector import MAX_LINE, WATCH_BACKOFF, LineTooLong, Reflector, lines
from mcsdns.kube.resources import SERVICE_IMPORTS

Z = "clusterset.local"
PATH = SERVICE_IMPORTS.path(version="v1beta1")


class Waits(threading.Event):
    """A stop event that records each wait asked of it and returns at once; set after `n`."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.asked: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and not self.is_set():
            self.asked.append(timeout)
            if len(self.asked) >= self.n:
                self.set()
        return self.is_set()


@pytest.fixture
def api() -> Iterator[HostileAPI]:
    a = HostileAPI()
    with a:
        a.put(service_import("web", "shop", ["10.1.0.1"]))
        yield a


def reflect(api: HostileAPI, tmp_path: Path, stop: Waits, **kw: Any) -> tuple[Reflector, list[str]]:
    """A reflector of ServiceImports run until `stop` is set (a minute at most); the errors it counted."""
    client = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None)
    errors: list[str] = []
    r = Reflector("imports", client, PATH, stop=stop, on_list=lambda items, gone: None,
                  on_event=lambda typ, obj: None, on_error=errors.append, **kw)
    r.start()
    wait_for(stop.is_set)
    stop.set()
    r.interrupt()
    assert r.thread is not None
    r.thread.join(5)
    client.close()
    return r, errors


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


JUNK = {
    "junk": [b"junk\n"],
    "closed at once": [],
    "deep event": [b'{"type":"ADDED","object":{"metadata":{"name":"x"},"x":' + deep(3000) + b"}}\n"],
    "huge integer": [b'{"type":"ADDED","object":{"metadata":{"name":"x"},"x":' + b"9" * 5000 + b"}}\n"],
    "unknown type": [b'{"type":"HELLO","object":{"metadata":{}}}\n'],
}


@pytest.mark.parametrize("body", JUNK.values(), ids=JUNK.keys())
def test_a_watch_that_fails_at_once_is_followed_only_after_a_growing_backoff(
        api: HostileAPI, tmp_path: Path, body: list[bytes], caplog: pytest.LogCaptureFixture) -> None:
    """Before: a watch whose first line was junk counted as one that delivered an event, so it
    was opened again at once (55,990 watch requests and as many WARNING lines in 25 s from
    `mcsdns serve`); a deep event broke the stream the same way."""
    api.watch_body = body
    stop = Waits(6)
    with caplog.at_level(logging.WARNING, logger="mcsdns.kube"):
        _, errors = reflect(api, tmp_path, stop)
    base, cap = WATCH_BACKOFF
    assert len(stop.asked) == 6, (stop.asked, api.watch_requests())
    for k, wait in enumerate(stop.asked):  # client-go's: 0.8 s doubling, jittered up to twice that
        assert min(cap, base * 2 ** k) <= wait <= 2 * min(cap, base * 2 ** k), stop.asked
    assert api.watch_requests() <= len(stop.asked) + 1  # one watch per wait: never opened again at once
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= api.watch_requests()  # one line per watch at most
    assert not any(r.exc_info for r in caplog.records)
    if body:
        assert errors.count("bad_event") == api.watch_requests()


def test_mcsdns_serve_against_a_junk_watch(api: HostileAPI, tmp_path: Path) -> None:
    """End to end: each collection's watch is opened again after 0.8 s, 1.6 s, 3.2 s... (at
    least): twice at most in 2 s, with one WARNING each. Before: 6,039 in 2 s (55,990 in 25 s)."""
    api.watch_body = [b"junk\n"]
    with run_server(["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc"))], tmp_path) as srv:
        started = time.monotonic()
        mark = api.watch_requests()
        time.sleep(2.0)
        seen = api.watch_requests() - mark
        window = time.monotonic() - started  # longer under load: a larger bound, never a smaller one
        per_collection = 1 + sum(1 for k in range(1, 20) if WATCH_BACKOFF[0] * (2 ** k - 1) <= window)
        collections = len({u.split("?")[0] for _, u in api.requests if "watch=" in u})
        assert addrs(srv, f"web.shop.svc.{Z}") == ["10.1.0.1"]
        assert collections >= 2 and seen <= per_collection * collections, (seen, window, api.requests)
        assert srv.logs().count("WARNING") <= api.watch_requests()


def test_a_watch_that_moves_the_resource_version_is_followed_at_once(api: HostileAPI, tmp_path: Path) -> None:
    """A watch that delivered an event resets the backoff, however short it was."""
    api.watch_body = [json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(rv)}}}
                                 ).encode() + b"\n" for rv in range(100, 103)]
    stop = Waits(3)
    r, _ = reflect(api, tmp_path, stop)
    # the first watch moves to 102: no wait; every later one starts from 102 and does not move it
    assert r.rv == "102" and api.watch_requests() == 4, api.requests
    assert WATCH_BACKOFF[0] <= stop.asked[0] <= 2 * WATCH_BACKOFF[0]


def test_a_watch_answering_410_every_time_is_not_relisted_at_once(api: HostileAPI, tmp_path: Path) -> None:
    api.watch_body = [b'{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}\n']
    stop = Waits(4)
    _, errors = reflect(api, tmp_path, stop)
    lists = sum(1 for _, u in api.requests if "watch=" not in u)
    assert errors.count("expired") == 4 and lists <= 5, (errors, lists)
    assert all(w >= WATCH_BACKOFF[0] for w in stop.asked), stop.asked


class _Chunks:
    """A streamed response's chunks, as `Response.chunks` gives them."""

    def __init__(self, data: list[bytes]) -> None:
        self.data = data
        self.read = 0

    def chunks(self) -> Iterator[bytes]:
        for c in self.data:
            self.read += len(c)
            yield c


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=12),
       st.lists(st.integers(1, 17), min_size=1, max_size=20))
def test_lines_are_the_lines_however_the_stream_is_cut(parts: list[bytes], sizes: list[int]) -> None:
    data = b"\n".join(parts)
    chunks: list[bytes] = []
    i = 0
    while i < len(data):
        n = sizes[len(chunks) % len(sizes)]
        chunks.append(data[i:i + n])
        i += n
    got = list(lines(_Chunks(chunks)))  # type: ignore[arg-type]
    assert got == [p for p in parts if p.strip()]


def test_a_line_without_end_is_cut_at_the_limit_in_linear_time() -> None:
    """Before: a 64 MiB watch stream with no newline cost 54 s of CPU (each chunk searched
    the whole line again and copied it), and was read to its end."""
    line = b"x" * (MAX_LINE - 1)
    stream = _Chunks([line[i:i + 4096] for i in range(0, len(line), 4096)] + [b"\n", b"y"])
    t0 = time.thread_time()
    got = list(lines(stream))  # type: ignore[arg-type]
    assert time.thread_time() - t0 < 1.0  # about 10 ms; searching the whole line per chunk is seconds
    assert got == [line, b"y"]
    endless = _Chunks([b"x" * 65536] * (4 * MAX_LINE // 65536))
    with pytest.raises(LineTooLong):
        list(lines(endless))  # type: ignore[arg-type]
    assert endless.read <= MAX_LINE + 65536


def test_a_watch_line_without_end_drops_the_watch(api: HostileAPI, tmp_path: Path) -> None:
    api.watch_body = [b"x" * 65536] * (2 * MAX_LINE // 65536)
    stop = Waits(2)
    _, errors = reflect(api, tmp_path, stop)
    assert errors.count("long_line") == api.watch_requests() >= 2, errors
    assert all(w >= WATCH_BACKOFF[0] for w in stop.asked)


BAD_ITEMS = [
    b'{"metadata":{"name":"deep","namespace":"shop"},"x":' + deep(3000) + b"}",
    b'{"metadata":{"name":"n\x00ul","namespace":"shop"}}',
    b'{"metadata":{"name":"bad\xff\xfe","namespace":"shop"}}',
    b'{"metadata":{"name":"huge","namespace":"shop"},"x":' + b"9" * 5000 + b"}",
    b'{"metadata":{"name":"cut","namespace":"shop"},"spec":{"type":"ClusterSetIP"',  # the last item cut short
]


def test_undecodable_list_items_are_dropped_and_the_rest_served(api: HostileAPI, tmp_path: Path) -> None:
    """Before: one item nested 3,000 deep, a raw NUL, bytes that are not UTF-8, a 5,000-digit
    integer or an item cut short failed the whole list on every retry: every name SERVFAIL
    (and a traceback per retry for the deep one)."""
    api.put(endpoint_slice("db-1", "shop", "db", ["10.2.0.1"]))
    api.put(service_import("db", "shop", [], typ="Headless"))
    api.bad_items["serviceimports"] = BAD_ITEMS
    api.bad_items["endpointslices"] = BAD_ITEMS[:2]
    with run_server(["--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc"))], tmp_path) as srv:
        assert addrs(srv, f"web.shop.svc.{Z}") == ["10.1.0.1"]
        assert addrs(srv, f"db.shop.svc.{Z}") == ["10.2.0.1"]
        assert srv.metric_sum("mcsdns_source_errors_total", 'error="bad_item"') == len(BAD_ITEMS) + 2
        logs = srv.logs()
        assert "Traceback" not in logs, logs
        assert logs.count(f"skipped {len(BAD_ITEMS)} list item(s) that do not decode") == 1, logs
        assert logs.count("skipped 2 list item(s) that do not decode") == 1, logs


def test_list_items_that_are_not_objects_with_metadata_are_dropped(api: HostileAPI, tmp_path: Path) -> None:
    """As a watch event whose object or metadata is not an object is skipped. Before: an item
    whose metadata was a list failed the cache's list (a traceback per retry); others were
    dropped without a word."""
    api.bad_items["serviceimports"] = [b'{"metadata":[1]}', b'{"metadata":"x"}', b"1", b'"x"', b"[]", b"null"]
    client = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None)
    stop = threading.Event()
    errors: list[str] = []
    cache = Cache("imports", client, PATH, lambda key, old, new: None, stop, on_error=errors.append)
    cache.start()
    try:
        assert wait_for(lambda: cache.reflector.lists == 1)
        assert [k for k, _ in cache.items()] == [("shop", "web")] and errors.count("bad_item") == 6
    finally:
        stop.set()
        cache.reflector.interrupt()
        client.close()


def test_a_list_cut_short_is_an_error_retried_with_backoff(api: HostileAPI, tmp_path: Path) -> None:
    """A list whose text ends early (the answer complete as HTTP) is incomplete: not served, an
    error for that attempt, retried with backoff, no traceback."""
    api.cut_lists["serviceimports"] = 200
    stop = Waits(5)
    r, _ = reflect(api, tmp_path, stop)
    assert r.lists == 0 and sum(1 for _, u in api.requests if "watch=" not in u) == 5


@pytest.mark.parametrize("body", [b'{"kind":"L","metadata":[1],"items":[]}', b'{"kind":"L","metadata":"x"}',
                                  b'{"kind":"L","metadata":{"x":' + deep(3000) + b'},"items":[]}', b"[]", b"",
                                  b'{"kind":"L","items":[],"metadata":{"resourceVersion":"\xff"}}'])
def test_a_list_that_is_not_one_is_an_error_without_a_traceback(
        api: HostileAPI, tmp_path: Path, body: bytes, caplog: pytest.LogCaptureFixture) -> None:
    api.list_bodies["serviceimports"] = body
    stop = Waits(3)
    with caplog.at_level(logging.DEBUG, logger="mcsdns.kube"):
        r, _ = reflect(api, tmp_path, stop)
    assert r.lists == 0 and not any(rec.exc_info for rec in caplog.records), caplog.text


def test_retry_after_is_honoured_within_a_bound(api: HostileAPI, tmp_path: Path) -> None:
    """Before: a 429's Retry-After was ignored; the retries came after the own backoff alone
    (0.2 s doubling, full jitter)."""
    date = formatdate(time.time() + 25, usegmt=True)
    for ask, least in (("7", 7.0), (date, 15.0), ("3600", RETRY_AFTER_MAX)):
        api.throttle(2, 429, ask)
        stop = Waits(2)
        reflect(api, tmp_path, stop)
        assert all(least <= w <= RETRY_AFTER_MAX for w in stop.asked), (ask, stop.asked)
    api.throttle(1, 503, "junk")  # unreadable: the own backoff alone
    stop = Waits(1)
    reflect(api, tmp_path, stop)
    assert stop.asked[0] <= 0.2


def test_the_error_carries_the_retry_after(api: HostileAPI, tmp_path: Path) -> None:
    client = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None)
    try:
        api.throttle(1, 503, "12")
        with pytest.raises(Unreachable) as e:
            client.get(PATH)
        assert e.value.status == 503 and e.value.retry_after == 12.0
    finally:
        client.close()


@pytest.mark.parametrize("value, want", [
    ("5", 5.0), (" 0 ", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
    ("-3", None), ("1.5", None), ("soon", None), ("", None), (None, None),
    ("Wed, 21 Oct 2015 07:28:00", None),  # no zone: not an HTTP date
])
def test_parse_retry_after(value: str | None, want: float | None) -> None:
    assert parse_retry_after(value) == want
    when = 1445412480.0 - 30  # 30 s before the date above
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=when) == 30.0


def test_an_answer_nested_too_deep_is_a_value_error(api: HostileAPI, tmp_path: Path) -> None:
    api.list_bodies["serviceimports"] = b'{"x":' + deep(100_000) + b"}"
    client = Client.load(str(api.write_kubeconfig(tmp_path / "kc")), None)
    try:
        with pytest.raises(ValueError, match="nested too deep"):
            client.get(PATH)
    finally:
        client.close()
