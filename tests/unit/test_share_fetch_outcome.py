"""``FetchOutcome``: a fetch's records come in runs; ``records`` is the same, one by one."""

from __future__ import annotations

import uuid

from coordination.share_group import AcquiredRecord, AcquiredRun, FetchOutcome


def test_records_are_the_runs_one_by_one_in_order_with_their_run_s_count_and_lock() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    outcome = FetchOutcome(
        runs=[
            AcquiredRun(a, "a", 0, 1, 30_000, [(5, b"k", b"v", (), 100), (6, None, b"w", (), 101)]),
            AcquiredRun(a, "a", 0, 2, 30_000, [(9, None, None, (("h", b"x"),), 102)]),
            AcquiredRun(b, "b", 3, 1, 15_000, [(0, None, b"z", (), 103)]),
        ]
    )
    assert outcome.records == [
        AcquiredRecord(a, "a", 0, 5, b"k", b"v", (), 100, 1, 30_000),
        AcquiredRecord(a, "a", 0, 6, None, b"w", (), 101, 1, 30_000),
        AcquiredRecord(a, "a", 0, 9, None, None, (("h", b"x"),), 102, 2, 30_000),
        AcquiredRecord(b, "b", 3, 0, None, b"z", (), 103, 1, 15_000),
    ]
    assert FetchOutcome().records == []
