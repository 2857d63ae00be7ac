"""Hostile query streams cannot grow the server's memory or its metric series
beyond what configuration allows (the attacks of robustness/memory_abuse.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import dns.edns
import dns.message
import dns.query

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.helpers import EXAMPLE, Server, cpu_seconds, run_server  # noqa: E402

from robustness.memory_abuse import (  # noqa: E402
    SERVED,
    THREE_NAMES,
    metric_lines,
    query,
    random_case,
    random_name,
    rss_kib,
    send_tcp,
    send_udp,
    send_window,
)

MIB = 1024  # KiB


def test_large_queries_with_edns_options_do_not_grow_memory(tmp_path: Path) -> None:
    """Distinct 60 kB queries (one big EDNS option each) are answered, never kept:
    on the code before this test the server grew by about 86 MiB here."""
    rng = random.Random(7)
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        send_udp(srv, (query(i, SERVED) for i in range(100)))
        before = rss_kib(srv.proc.pid)
        n = 1500
        assert send_udp(srv, (query(i, SERVED, 1, rng.randbytes(60_000)) for i in range(n))) == n
        assert send_tcp(srv, (query(i, SERVED, 1, rng.randbytes(60_000)) for i in range(150))) == 150
        grown = rss_kib(srv.proc.pid) - before
        assert grown < 16 * MIB, f"RSS grew {grown} KiB"
        assert srv.metric("mcsdns_cache_bytes ") < 64 * 1024


def test_random_query_types_add_no_metric_series(tmp_path: Path) -> None:
    """Unknown query types are counted under type="other"; before, each became a series."""
    rng = random.Random(8)
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        send_udp(srv, (query(i, SERVED, t) for i, t in enumerate((1, 28, 33, 16))))
        lines = metric_lines(srv)
        n = 2000
        assert send_udp(srv, (query(i, SERVED, rng.randrange(256, 65280)) for i in range(n))) == n
        added = metric_lines(srv) - lines
        assert added <= 4, f"{added} metric lines added"
        got = srv.metric_sum("mcsdns_dns_responses_total", 'type="other"', 'proto="udp"')
        assert got == n


def test_query_with_edns_option_is_answered_but_not_cached(tmp_path: Path) -> None:
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        def ask(options: list[dns.edns.Option]) -> dns.message.Message:
            q = dns.message.make_query("web.shop.svc.clusterset.local.", "A", use_edns=0, options=options)
            return dns.query.udp(q, "127.0.0.1", port=srv.port, timeout=2)

        cookie: list[dns.edns.Option] = [dns.edns.GenericOption(dns.edns.OptionType.COOKIE, b"\x01" * 8)]
        plain = ask([])
        for _ in range(5):
            r = ask(cookie)
            assert r.answer == plain.answer and r.rcode() == 0
        hits = srv.metric("mcsdns_cache_hits_total ")
        used = srv.metric("mcsdns_cache_bytes ")
        for _ in range(5):
            ask(cookie)
        assert srv.metric("mcsdns_cache_hits_total ") == hits
        assert srv.metric("mcsdns_cache_bytes ") == used
        for _ in range(5):
            ask([])
        assert srv.metric("mcsdns_cache_hits_total ") >= hits + 5


def test_response_cache_stays_within_its_budget(tmp_path: Path) -> None:
    """--cache-size 1: distinct case variants of a name fill the cache, which is
    emptied at 1 MiB and counted; every query is still answered."""
    rng = random.Random(9)
    with run_server(["--manifests", str(EXAMPLE), "--cache-size", "1"], tmp_path) as srv:
        n = 5000
        assert send_udp(srv, (query(i, random_case(rng, SERVED)) for i in range(n))) == n
        assert srv.metric("mcsdns_cache_flushes_total ") >= 1
        assert 0 < srv.metric("mcsdns_cache_bytes ") <= 1 << 20


def test_distinct_names_memory_bound(tmp_path: Path) -> None:
    """Random 255-octet names (negative answers, question memo, response cache)
    stay within the documented bound: --cache-size + 40 MiB."""
    rng = random.Random(10)
    with run_server(["--manifests", str(EXAMPLE), "--cache-size", "4"], tmp_path) as srv:
        send_udp(srv, (query(i, SERVED) for i in range(100)))
        before = rss_kib(srv.proc.pid)
        n = 30_000
        assert send_udp(srv, (query(i & 0xFFFF, random_name(rng)) for i in range(n))) == n
        grown = rss_kib(srv.proc.pid) - before
        assert grown < (4 + 40) * MIB, f"RSS grew {grown} KiB"


def scrape_ms(srv: Server, n: int = 50) -> float:
    """The server's CPU per /metrics read, in ms, over `n` reads (CPU: a busy machine cannot
    stretch it as it stretches wall-clock time)."""
    before = cpu_seconds(srv.proc.pid)
    for _ in range(n):
        assert srv.http("/metrics")[0] == 200
    return (cpu_seconds(srv.proc.pid) - before) / n * 1000


def test_every_query_type_at_three_names_leaves_scrapes_cheap(tmp_path: Path) -> None:
    """All 65,536 query types at three names (two served, one not): the counters stay a
    fixed set and a scrape costs what it did before the stream; before, each type and
    rcode was kept as its own counter until the cache was flushed, and /metrics walked
    every cached response in Python (about 40 times slower here), stalling DNS meanwhile."""
    with run_server(["--manifests", str(EXAMPLE)], tmp_path) as srv:
        send_udp(srv, (query(i, SERVED) for i in range(100)))
        fresh = scrape_ms(srv)
        before, responses = rss_kib(srv.proc.pid), srv.metric_sum("mcsdns_dns_responses_total")
        n = 65536 * len(THREE_NAMES)
        assert send_window(srv, (query(t, name, t) for name in THREE_NAMES for t in range(65536))) == n
        after = scrape_ms(srv)
        print(f"\nCPU per scrape: {fresh:.2f} ms before the stream, {after:.2f} ms after")
        assert after <= 3 * fresh + 1, f"a scrape took {after:.2f} ms of CPU ({fresh:.2f} ms before)"
        grown = rss_kib(srv.proc.pid) - before
        assert grown < (32 + 40) * MIB, f"RSS grew {grown} KiB"  # the default --cache-size + 40 MiB
        assert srv.metric_sum("mcsdns_dns_responses_total") - responses == n
