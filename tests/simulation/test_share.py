"""The share consumer (KIP-932) in the deterministic simulator (``--recipe share``):
ShareConsumers as shipped against the model of Kafka's share groups, through seeded fault
histories; the checker finding a consumer that reports refused acknowledgements as done; a
history replayed from its seed.

A history of 100 faults costs about half a second of one core (docs/simulation.md); CI runs
SIMULATION_SHARE_HISTORIES of them (40 by default).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from coordination.testing.simulation import HistorySettings
from devtools.simulation import replay, run_seeds

from ._histories import assert_histories_pass, outcomes_of

SHARE_HISTORIES = int(os.environ.get("SIMULATION_SHARE_HISTORIES", "40"))


@pytest.mark.timeout(600)
def test_every_record_is_accepted_once_or_archived_through_fault_histories() -> None:
    assert_histories_pass("share", SHARE_HISTORIES, timeout_s=600)


def test_the_checker_finds_a_consumer_that_reports_refused_acknowledgements_as_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A consumer that takes every acknowledgement's outcome for a success: a record whose
    # lock ran out, a request without an answer, a session the leader lost.
    from recipes.queues import ShareConsumer

    real_settle = ShareConsumer._settle

    def lying(self: ShareConsumer, sent: dict[Any, Any], codes: dict[Any, int], *more: Any) -> Any:
        return real_settle(self, sent, {key: 0 for key in sent}, *more)

    monkeypatch.setattr(ShareConsumer, "_settle", lying)
    summary = run_seeds("share", range(10), HistorySettings(faults=40), stop_at_first=True)
    assert summary.failures, "acknowledgements reported done though refused went unnoticed"
    failure = summary.failures[0]
    assert failure.violation is not None and "applied no such" in failure.violation, (
        failure.violation
    )
    assert failure.trace


def test_a_history_replays_exactly_from_its_seed() -> None:
    settings = HistorySettings(faults=20)
    first, again = replay("share", 5, settings), replay("share", 5, settings)
    assert first.ok, first.violation
    assert (first.steps, first.faults, first.trace) == (again.steps, again.faults, again.trace)


def test_acknowledgements_never_ride_on_the_fetch_that_opens_a_session() -> None:
    # Kafka answers INVALID_REQUEST to a ShareFetch that opens a share session (epoch 0) and
    # carries acknowledgements, and all of them are lost. Sessions are opened again after a
    # lost answer, a broker restart or a moved partition, with acknowledgements pending:
    # these histories had such fetches before the acknowledgements were made to follow it.
    from devtools.simulation.queues import ShareConsumersDriver

    outcomes = outcomes_of(ShareConsumersDriver, (1, 2, 5), HistorySettings(faults=30))
    assert outcomes["ACCEPT ok"] > 0
    assert not [k for k in outcomes if k.endswith("INVALID_REQUEST")], outcomes
    assert outcomes["lag readings"] > 0, outcomes  # the polls' lookups, through the faults


def test_the_checker_finds_a_lag_reading_that_is_not_a_count_of_the_partitions_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The polls read the lag (DescribeShareGroupOffsets to the model's coordinator) every
    # two seconds; one that reads it wrong (here: a million records too many) is caught.
    from coordination.share_group import ShareGroupMember

    real = ShareGroupMember.share_partition_lag

    def inflated(self: ShareGroupMember, timeout: float | None = None) -> dict[Any, int]:
        return {tp: lag + 1_000_000 for tp, lag in real(self, timeout).items()}

    monkeypatch.setattr(ShareGroupMember, "share_partition_lag", inflated)
    summary = run_seeds("share", range(5), HistorySettings(faults=20), stop_at_first=True)
    assert summary.failures, "a wrong lag reading went unnoticed"
    violation = summary.failures[0].violation
    assert violation is not None and "read a lag of" in violation, violation


def _names_twice(consumer_class: Any) -> Any:
    real = consumer_class._unpolled

    def twice(self: Any, records: Any, reason: str, fetched_at: float) -> None:
        real(self, records, reason, fetched_at)
        real(self, records, reason, fetched_at)

    return ("_unpolled", twice)


def _counts_locks_short(consumer_class: Any) -> Any:
    real = consumer_class._hold

    def short(self: Any, fetched: Any, otherwise: float, fetched_at: float) -> Any:
        runs = [r._replace(lock_timeout_ms=r.lock_timeout_ms // 2) for r in fetched.runs]
        return real(self, dataclasses.replace(fetched, runs=runs), otherwise, fetched_at)

    return ("_hold", short)


def _miscounts_deliveries(consumer_class: Any) -> Any:
    real = consumer_class._hold

    def miscounted(self: Any, fetched: Any, otherwise: float, fetched_at: float) -> Any:
        runs = [r._replace(delivery_count=r.delivery_count + 1) for r in fetched.runs]
        return real(self, dataclasses.replace(fetched, runs=runs), otherwise, fetched_at)

    return ("_hold", miscounted)


def _forgets(reason: str) -> Any:
    def forgets(consumer_class: Any) -> Any:
        real = consumer_class._unpolled

        def silent(self: Any, records: Any, named: str, fetched_at: float) -> None:
            if named != reason:
                real(self, records, named, fetched_at)

        return ("_unpolled", silent)

    forgets.__name__ = f"forgets_{reason}"
    return forgets


UNSEEN = "neither handed it out nor named it to on_records_unpolled"


@pytest.mark.parametrize(
    ("breaks", "found"),
    [
        # Completeness, checked at the end of a history: a delivery whose answer reached
        # the consumer ends handed out or named.
        (_forgets("lock_expired"), UNSEEN),
        (_forgets("closed"), UNSEEN),
        (_names_twice, "all accounted for already"),
        (_counts_locks_short, "before a lock of 3.0s could run out"),
        (_miscounts_deliveries, "which the model never delivered to it"),
    ],
)
def test_the_checker_finds_a_consumer_that_misnames_what_it_acquired(
    monkeypatch: pytest.MonkeyPatch, breaks: Any, found: str
) -> None:
    # Every record a poll hands out and every record on_records_unpolled names must be a
    # delivery the model made to that member, accounted for once; a lock named run out must
    # have run out; every delivery that reached the consumer is handed out or named. A
    # consumer naming a record twice, counting locks from half their duration, handing out
    # records with a wrong delivery count, or not naming records for one of the reasons, is
    # caught.
    from recipes.queues import ShareConsumer

    monkeypatch.setattr(ShareConsumer, *breaks(ShareConsumer))
    summary = run_seeds("share", range(10), HistorySettings(faults=40), stop_at_first=True)
    assert summary.failures, f"{breaks.__name__} went unnoticed"
    violation = summary.failures[0].violation
    assert violation is not None and found in violation, violation


def test_histories_reach_records_named_unpolled_for_both_reasons() -> None:
    # The consumers fetching ahead leave records unpolled: their lock runs out during long
    # handling (slow callbacks, pauses), and close() releases the round fetched ahead.
    from devtools.simulation.queues import ShareConsumersDriver

    outcomes = outcomes_of(ShareConsumersDriver, range(6), HistorySettings(faults=40))
    assert outcomes["unpolled lock_expired"] > 0 and outcomes["unpolled closed"] > 0, outcomes


def test_the_checker_holds_records_named_undecodable_to_the_models_deliveries() -> None:
    # The model's batches always decode, so no history names a record "undecodable"; the
    # checker accepts such a naming for a delivery the model made to that member at that
    # count, once, and nothing else (nor a reason the consumer does not give).
    from collections import Counter

    from coordination.hooks import RecordsUnpolled
    from coordination.testing.simulation import Violation
    from devtools.simulation.queues import ShareConsumersDriver

    model: Any = dataclasses.make_dataclass("Model", [("deliveries", Counter)])(
        Counter({("m1", 0, 5, 2): 1})
    )

    def named(offset: int, count: int, reason: str = "undecodable") -> RecordsUnpolled:
        return RecordsUnpolled(
            group_id="g",
            member_id="m1",
            topic="jobs",
            partition=0,
            offsets=(offset,),
            delivery_counts=(count,),
            reason=reason,
            fetched_at=1.0,
        )

    def check(driver: ShareConsumersDriver, event: RecordsUnpolled) -> None:
        driver._unpolled.append(("consumer-1", 1.0, event))
        driver._check_unpolled(model)

    driver = ShareConsumersDriver(HistorySettings(faults=1))
    check(driver, named(5, 2))
    assert driver.outcomes["unpolled undecodable"] == 1
    with pytest.raises(Violation, match="all accounted for already"):
        check(driver, named(5, 2))  # the same delivery named twice
    for wrong in (named(5, 3), named(6, 2)):  # a count, an offset the model did not deliver
        with pytest.raises(Violation, match="never delivered to it"):
            check(ShareConsumersDriver(HistorySettings(faults=1)), wrong)
    with pytest.raises(Violation, match="for no known reason"):
        check(ShareConsumersDriver(HistorySettings(faults=1)), named(5, 2, reason="corrupt"))


def test_the_checker_finds_a_delivery_above_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # A model that hands out the third acquisition of every run one delivery above the
    # limit: the check after every step (which scans the holders and counts only when a
    # lock was taken since the last scan) must see it.
    from coordination.testing.simulation._share_group_coordinator import ShareGroupsModel

    real_acquire = ShareGroupsModel._acquire
    calls = [0]

    def over_the_limit(self: ShareGroupsModel, node_id: int, *args: Any) -> list[int]:
        offsets = real_acquire(self, node_id, *args)
        calls[0] += 1
        if offsets and calls[0] == 3:
            p = args[1]
            held = self._leaders[node_id].acquired[p][offsets[0]]
            held.count = self.settings.delivery_count_limit + 1
        return offsets

    monkeypatch.setattr(ShareGroupsModel, "_acquire", over_the_limit)
    summary = run_seeds("share", range(3), stop_at_first=True)
    assert summary.failures, "a delivery above the limit went unnoticed"
    assert "above the limit" in (summary.failures[0].violation or "")
