"""Applying an object costs time linear in its size: no linear scan inside a loop over its
ports, endpoints or addresses (a 10k-port ServiceImport stalled the event loop 5.8 s).

Each case applies an object of N and of 8N items, as the server does (the store parses it,
the service's records are built), and compares the CPU times: linear work costs about 8x,
a scan per item about 64x. Ratios of the same run, each the best of a few repeats, so a busy
machine slows both sides alike; the bound sits between the two by a wide margin.
"""

from __future__ import annotations

import sys

import pytest
from support.helpers import REPO

sys.path.insert(0, str(REPO))

from robustness.apply_scans import CASES, best  # noqa: E402

SMALL, GROWTH = 2000, 8
BOUND = 24  # linear: ~8-12; a scan per item: ~55-60


@pytest.mark.parametrize("case", list(CASES))
def test_apply_cost_is_linear(case: str) -> None:
    small = best(case, SMALL, 5)
    large = best(case, SMALL * GROWTH, 2)
    ratio = large / max(small, 1e-4)
    assert ratio < BOUND, (f"{case}: {SMALL * GROWTH} items cost {large:.3f} s, {SMALL} cost "
                           f"{small:.3f} s: {ratio:.0f}x for {GROWTH}x the items (linear: ~{GROWTH}x)")
