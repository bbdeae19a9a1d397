"""The share workload on real brokers: a short campaign (15 faults, about 90 s) on a share
group must find nothing: every record accepted once, rejected or archived, none held by two
consumers at once, no delivery count above the limit or going down, and no lag left once one
more record per partition was settled (docs/campaign.md: the broker's lag can be stale).

The seed is random (printed; ``CAMPAIGN_SEED`` fixes it). ``python -m devtools.campaign
--workload share --faults 150`` runs a longer one.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from devtools.campaign import Settings, ShareCampaign

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

FAULTS = 15


@pytest.mark.timeout(600)
def test_a_short_share_campaign_finds_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("CAMPAIGN_SEED") or random.randrange(2**31))
    print(f"share campaign seed={seed}, events in {tmp_path}")
    settings = Settings(
        seed=seed,
        faults=FAULTS,
        spacing=1.5,
        run_dir=tmp_path,
        # Shorter sessions make shorter long pauses (a session and 1-6 s).
        session_timeout_ms=3000,
        settle_s=3.0,
        catch_up_s=60.0,
    )
    report = ShareCampaign(settings).run()
    summary = f"seed={seed} run={tmp_path}\n{report.summary()}\n{report.figures()}"
    print(summary)
    assert report.faults == FAULTS, summary
    assert report.violations == [], summary
    work = report.counts_of_work
    assert work["produced"] > 500, summary
    # Every outcome happened: accepted, rejected (poison), released and archived (bounced
    # to the delivery limit), redelivered.
    for kind in ("accepted", "rejected", "released", "archived", "redeliveries"):
        assert work[kind] > 0, summary
    # What a finding needs from the brokers' side stays with the run.
    assert sorted(p.name for p in (tmp_path / "brokers").iterdir()) == [
        "broker-1.log",
        "broker-2.log",
        "broker-3.log",
    ]
