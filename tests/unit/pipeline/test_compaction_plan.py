"""The compactor's bookkeeping without Spark: which partials versions a cycle merges."""

from __future__ import annotations

import pytest

from recipes.pipeline._delta_totals import CompactionCycle, plan_cycle


@pytest.mark.parametrize(
    ("totals_version", "merged_through", "partials_version", "cycle"),
    [
        # No partials table yet: nothing to merge.
        (0, None, None, None),
        # The first cycle merges from the partials' first version after their creation
        # (version 0, always empty).
        (0, None, 0, None),
        (0, None, 1, CompactionCycle(totals_version=0, first_version=1, last_version=1)),
        (0, None, 5, CompactionCycle(totals_version=0, first_version=1, last_version=5)),
        # Later cycles start after the mark recorded in the same totals snapshot.
        (7, 5, 9, CompactionCycle(totals_version=7, first_version=6, last_version=9)),
        (7, 5, 6, CompactionCycle(totals_version=7, first_version=6, last_version=6)),
        # Everything merged (or a partials version read before a newer cycle landed).
        (7, 9, 9, None),
        (8, 9, 4, None),
    ],
)
def test_a_cycle_merges_the_versions_after_the_recorded_mark(
    totals_version, merged_through, partials_version, cycle
):
    assert plan_cycle(totals_version, merged_through, partials_version) == cycle


def test_consecutive_cycles_cover_every_version_once():
    merged: int | None = None
    covered: list[int] = []
    for latest in (0, 0, 3, 4, 4, 9):
        cycle = plan_cycle(0, merged, latest)
        if cycle is not None:
            covered += range(cycle.first_version, cycle.last_version + 1)
            merged = cycle.last_version
    assert covered == list(range(1, 10))  # all but the creation
