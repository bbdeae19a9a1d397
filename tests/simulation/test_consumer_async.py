"""The consumer through its asyncio face, as shipped (``consumer-async``: AsyncConsumer on
asyncio's own event loop on simulated time): ``async for``, getone, getmany with and without
``max_records``, calls cancelled before, while and after their fetch ran, commits after
records handed out, through fault histories; and the checker that catches a cancellation
that loses what its fetch took."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.simulation import run_seeds


def test_async_consumers_lose_nothing_through_fault_histories() -> None:
    summary = run_seeds("consumer-async", range(15))
    assert not summary.failures, summary.failures[0].violation
    assert summary.faults == 15 * 100


def test_the_checker_finds_a_cancelled_getmany_that_loses_its_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As AsyncConsumer's getmany was: records its poll took count as handed out even when
    # the call was cancelled, so the next commit passes them.
    from recipes.partitioning._consumer import Consumer

    real = Consumer._deliver

    def keeps_refused(self: Consumer, delivery: Any, handed: bool) -> None:
        real(self, delivery, True)

    monkeypatch.setattr(Consumer, "_deliver", keeps_refused)
    summary = run_seeds("consumer-async", range(10), stop_at_first=True)
    assert summary.failures, "commits past records of cancelled calls went unnoticed"
    failure = summary.failures[0]
    assert failure.violation is not None and "never returned record" in failure.violation


def test_an_async_history_replays_exactly_from_its_seed() -> None:
    # asyncio's loop on simulated time adds nothing that depends on the run: its tasks,
    # timers and worker threads follow the seed.
    from coordination.testing.simulation import History, HistorySettings
    from devtools.simulation.consumers import AsyncConsumersDriver

    first = History(AsyncConsumersDriver, 7, HistorySettings(faults=30), log_to_trace=True).run()
    again = History(AsyncConsumersDriver, 7, HistorySettings(faults=30), log_to_trace=True).run()
    assert first.ok and len(first.trace) > 100
    assert first.trace == again.trace
    assert (first.steps, first.simulated_s) == (again.steps, again.simulated_s)
