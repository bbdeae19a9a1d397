"""The election through its asyncio face in the deterministic simulator: each member's
event loop reads ``is_leader`` every 20 ms of simulated time, so that after a pause the
loop is often the first to see the lease ran out. Checked on top of the election's
invariants: every loop keeps turning, and the callbacks run on it.

Seeds 0 and 19 hung a loop before the loop stopped waiting for itself (the loop deposed
the leader and waited for its own ``on_deposed``), when the loop was a model of asyncio's;
on asyncio's own loop, seed 11 hangs one with both guards removed (the election's
``must_not_wait`` and ``LoopBridge.run``'s own check). They stay here as histories that
must settle.
"""

from __future__ import annotations

import pytest

from devtools.simulation import run_seeds


@pytest.mark.timeout(300)
def test_the_async_elections_loops_keep_turning_and_the_group_keeps_a_leader() -> None:
    summary = run_seeds("election-async", [0, 11, 19, *range(1, 6)])
    assert summary.failures == [], [(r.seed, r.violation, r.trace[-20:]) for r in summary.failures]
    assert summary.histories == 8 and summary.faults == 800
