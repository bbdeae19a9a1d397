"""The example semaphore (examples/semaphore.py) on the deterministic simulator, through its
driver (examples/semaphore_simulation.py): no history breaks its safety or its liveness, and
a semaphore that ignores its lease is caught."""

from __future__ import annotations

import pytest

from coordination.testing.simulation import History, HistorySettings
from examples.semaphore import Semaphore
from examples.semaphore_simulation import SemaphoreDriver


def test_the_semaphore_never_gives_out_more_permits_than_it_has_under_faults() -> None:
    failures = []
    for seed in range(12):
        result = History(SemaphoreDriver, seed, HistorySettings(faults=40)).run()
        if not result.ok:
            failures.append((seed, result.violation, result.trace[-30:]))
    assert not failures, failures[0]


def test_without_faults_permits_go_to_the_first_members_and_the_rest_wait() -> None:
    result = History(SemaphoreDriver, 7, HistorySettings(faults=0, members=4)).run()
    assert result.ok, (result.violation, result.trace[-30:])


def test_a_semaphore_that_ignores_its_lease_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check has teeth: a holder that trusts its assignment without its lease keeps the
    # permit through partitions and pauses while the group gives it to another member.
    monkeypatch.setattr(Semaphore, "holds", lambda self: self._granted)
    violations = [
        result.violation
        for seed in range(20)
        if not (result := History(SemaphoreDriver, seed, HistorySettings(faults=40)).run()).ok
    ]
    assert any(v is not None and "hold a permit at once" in v for v in violations), violations
