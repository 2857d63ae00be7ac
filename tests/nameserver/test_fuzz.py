"""Hostile DNS input never crashes the query path, and the server keeps answering."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcsdns.dns.errors import Drop, FormErr  # noqa: E402
from mcsdns.dns.message import parse_query  # noqa: E402
from robustness.fuzz import in_process, over_socket  # noqa: E402
from robustness.packets import query  # noqa: E402


def test_generated_hostile_messages_in_process() -> None:
    r = asyncio.run(in_process(20_000, seed=7))
    assert r["crashes"] == 0 and r["problems"] == 0
    assert r["responses"] > 0 and r["dropped"] > 0  # both outcomes exercised
    print(f"\nslowest message: {r['worst_ms']:.1f} ms, {r['worst_cpu_ms']:.1f} ms of CPU")
    assert r["worst_cpu_ms"] < 50  # CPU: a busy machine cannot stretch it


def test_hostile_messages_to_a_live_server() -> None:
    s = over_socket(3000, seed=7)
    assert s["server_alive"] == 1 and s["same_answer_after"] == 1
    assert s["tracebacks_in_log"] == 0


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=300))
def test_parser_raises_only_its_own_errors(data: bytes) -> None:
    try:
        q = parse_query(data)
    except (Drop, FormErr):
        return
    assert len(q.question) == len(q.qname) + 4 and q.qname.endswith(b"\x00")


@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 2**32 - 1), st.binary(max_size=40), st.integers(0, 60))
def test_any_prefix_or_suffix_of_a_query_is_handled(seed: int, junk: bytes, cut: int) -> None:
    msg = query(random.Random(seed))
    for m in (msg[:cut], msg + junk):
        try:
            parse_query(m)
        except (Drop, FormErr):
            pass
