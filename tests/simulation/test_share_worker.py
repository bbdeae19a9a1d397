"""The share worker in the deterministic simulator: ``ShareWorker`` (``--recipe
share-worker``) and ``AsyncShareWorker`` on asyncio's loop on simulated time (``--recipe
share-worker-async``), as shipped, with handlers that succeed, fail (retried), outlast half
their record's lock (renewed), meet poison records (copied to a dead-letter stand-in, then
rejected) or, async, are cancelled while they run, through seeded fault histories; the
checker finding workers broken on purpose; histories replayed from their seeds.

A history of 100 faults costs about half a second of one core (the asyncio face's about
1.3 s); CI runs SIMULATION_SHARE_WORKER_HISTORIES of each (40 and 20 by default).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from coordination.testing.simulation import HistorySettings
from devtools.simulation import replay, run_seeds

from ._histories import assert_histories_pass, outcomes_of

_CI_HISTORIES = os.environ.get("SIMULATION_SHARE_WORKER_HISTORIES")
WORKER_HISTORIES = int(_CI_HISTORIES or "40")
ASYNC_WORKER_HISTORIES = int(_CI_HISTORIES or "20")


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("recipe", "histories"),
    [("share-worker", WORKER_HISTORIES), ("share-worker-async", ASYNC_WORKER_HISTORIES)],
)
def test_every_record_is_accepted_after_its_handler_returned_or_dead_lettered_through_faults(
    recipe: str, histories: int
) -> None:
    assert_histories_pass(recipe, histories)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["threads", "asyncio"])
def test_the_histories_reach_every_outcome_of_a_handler(asynchronous: bool) -> None:
    from devtools.simulation.queues import AsyncShareWorkersDriver, ShareWorkersDriver

    kind = AsyncShareWorkersDriver if asynchronous else ShareWorkersDriver
    outcomes = outcomes_of(kind, range(4), HistorySettings(faults=40))
    assert (outcomes["handler cancelled"] > 0) is asynchronous, outcomes
    for reached in (
        "handler succeed",
        "handler fail",
        "handler slow",
        "handler poison",
        "applied ACCEPT",
        "applied RELEASE",
        "applied REJECT",
        "applied RENEW",
        "dead-letter copies failed",
    ):
        assert outcomes[reached] > 0, (reached, outcomes)


def _accepts_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipes.queues import AcknowledgeType
    from recipes.queues._worker import ShareWorker, _Decision, _Why

    def accepting(self: ShareWorker, record: Any, exc: Exception) -> Any:
        return _Decision(AcknowledgeType.ACCEPT, _Why.ACCEPTED)

    monkeypatch.setattr(ShareWorker, "_failed", accepting)


def _rejects_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipes.queues._worker import ShareWorker

    monkeypatch.setattr(ShareWorker, "_dead_letter", lambda self, *args: True)


def _runs_a_handler_too_many(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipes.queues._worker import ShareWorker

    real_init = ShareWorker.__init__

    def one_thread_too_many(self: ShareWorker, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self._concurrency += 1

    monkeypatch.setattr(ShareWorker, "__init__", one_thread_too_many)


def _takes_a_cancelled_handler_for_a_success(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipes.queues import AsyncShareWorker, HandlerCancelledError

    real = AsyncShareWorker._raised

    def cancelled_is_done(self: AsyncShareWorker, task: Any, record: Any) -> Any:
        raised = real(self, task, record)
        return None if isinstance(raised, HandlerCancelledError) else raised

    monkeypatch.setattr(AsyncShareWorker, "_raised", cancelled_is_done)


@pytest.mark.parametrize(
    ("recipe", "broken", "found"),
    [
        ("share-worker", _accepts_failures, "which no handler returned"),
        ("share-worker", _rejects_without_a_copy, "with no dead-letter copy"),
        ("share-worker", _runs_a_handler_too_many, "handlers at once"),
        ("share-worker-async", _takes_a_cancelled_handler_for_a_success, "which no handler"),
    ],
    ids=["accepts-failures", "rejects-without-copy", "too-many-handlers", "async-cancelled-done"],
)
def test_the_checker_finds_a_broken_worker(
    recipe: str,
    broken: Callable[[pytest.MonkeyPatch], Any],
    found: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken(monkeypatch)
    summary = run_seeds(recipe, range(10), HistorySettings(faults=20), stop_at_first=True)
    assert summary.failures, "the broken guarantee went unnoticed in 10 histories"
    violation = summary.failures[0].violation
    assert violation is not None and found in violation, violation


@pytest.mark.parametrize("recipe", ["share-worker", "share-worker-async"])
def test_a_history_replays_exactly_from_its_seed(recipe: str) -> None:
    settings = HistorySettings(faults=20)
    first, again = replay(recipe, 3, settings), replay(recipe, 3, settings)
    assert first.ok, first.violation
    assert (first.steps, first.faults, first.trace) == (again.steps, again.faults, again.trace)
