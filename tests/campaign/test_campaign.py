"""The fault campaign on real brokers: a short run (about 6 minutes, 110 faults) must find
nothing in any of its groups (an election, tasks, and two consumer groups on one stream:
the classic protocol's and KIP-848's), and every piece of work must find an owner soon
after the last fault.

The seed is random (printed; ``CAMPAIGN_SEED`` fixes it). A broker or a workload that does
not start fails the test with the reason; nothing is skipped.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from devtools.campaign import Campaign, Settings

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

FAULTS = 110
# After the last fault, no leadership, task or partition (of either consumer group) may stay
# unowned longer than this: a session timeout (6 s) to notice a dead member, a rebalance, a
# static member's hold-back (one more session), with room for a broker restart on a busy
# two-core machine.
MAX_UNOWNED_S = 45.0


@pytest.mark.timeout(1800)
def test_a_short_campaign_finds_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("CAMPAIGN_SEED") or random.randrange(2**31))
    print(f"campaign seed={seed}, events in {tmp_path}")
    report = Campaign(Settings(seed=seed, faults=FAULTS, spacing=2.4, run_dir=tmp_path)).run()
    summary = f"seed={seed} run={tmp_path}\n{report.summary()}\n{report.figures()}"
    print(summary)
    assert report.faults >= 100, summary
    assert report.violations == [], summary
    assert report.counts_of_work["writes"] > 0, summary
    assert report.counts_of_work["produced"] > 1000, summary
    assert report.max_unowned_s <= MAX_UNOWNED_S, summary
