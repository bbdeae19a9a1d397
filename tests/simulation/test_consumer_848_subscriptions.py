"""Patterns and racks on Kafka's consumer group protocol (KIP-848) in the simulator: half of
``consumer-848``'s histories (run by the thousands in test_simulation.py) subscribe by
pattern, and topics are created while they run; most members have a rack. Here: that those
histories do what they claim (the new topic is read, the decoy never), and that their
checks find a broker that matches the pattern within names, a consumer that never learns a
new topic's name, and one whose rack never reaches the broker."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from coordination.testing.simulation import History, HistorySettings
from coordination.testing.simulation._consumer_group_coordinator import (
    ConsumerGroupsModel,
    ConsumerGroupState,
)
from devtools.simulation import run_seeds
from devtools.simulation.consumers import (
    DECOY_TOPIC,
    LATE_TOPIC,
    BrokerAssignedConsumersDriver,
)

# Seeds of consumer-848 whose histories subscribe by pattern.
PATTERN_SEEDS = [3, 8, 11, 12, 13, 15]


def test_a_topic_created_later_is_read_and_one_matched_in_part_never_is() -> None:
    for seed in PATTERN_SEEDS[:3]:
        history = History(BrokerAssignedConsumersDriver, seed, HistorySettings(faults=100))
        result = history.run()
        driver = history.driver
        assert isinstance(driver, BrokerAssignedConsumersDriver)
        assert driver.by_pattern and result.ok, result.violation
        # Every partition of the late topic was read and committed well past its start.
        assert {p for t, p in driver.committed if t == LATE_TOPIC} == {0, 1, 2}
        assert all(offset > 100 for (t, _), offset in driver.committed.items() if t == LATE_TOPIC)
        assert not any(t == DECOY_TOPIC for t, _ in driver.returned)


def test_the_checker_finds_a_broker_that_matches_the_pattern_within_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # re.search where Kafka (RE2J's matches) takes whole names: "xevents-late" matches too.
    def searching(self: ConsumerGroupsModel, group: ConsumerGroupState) -> None:
        resolved = {
            m.regex: frozenset(t for t in self._topics if re.search(m.regex, t))
            for m in group.members.values()
            if m.regex is not None
        }
        if resolved != group.resolved:
            group.resolved = resolved
            self._bump(group)

    monkeypatch.setattr(ConsumerGroupsModel, "_resolve_regexes", searching)
    summary = run_seeds("consumer-848", PATTERN_SEEDS, stop_at_first=True)
    assert summary.failures, "partitions of a topic nobody subscribed to went unnoticed"
    violation = summary.failures[0].violation
    assert violation is not None and "no consumer subscribed to" in violation, violation


def test_the_checker_finds_a_consumer_that_never_learns_a_new_topics_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The topics' names looked up once, when the consumer joins, and kept: the new topic's
    # partitions, assigned by id, are never taken.
    from recipes.partitioning._broker_assigned import _Callbacks

    real_subscription = _Callbacks.subscription

    def snapshot(self: _Callbacks) -> object:
        if not hasattr(self, "known"):
            self.known = dict(self._owner._topics._metadata.topic_ids())  # type: ignore[attr-defined]
        return real_subscription(self)

    def kept(self: _Callbacks, topic_ids: frozenset[object]) -> Mapping[object, str]:
        known = self.known  # type: ignore[attr-defined]
        return {t: known[t] for t in topic_ids if t in known}

    monkeypatch.setattr(_Callbacks, "subscription", snapshot)
    monkeypatch.setattr(_Callbacks, "topic_names", kept)
    # With 100 faults most members are restarted after the topic's creation, and a new
    # consumer reads the names afresh: fewer faults leave members that joined before it.
    summary = run_seeds("consumer-848", range(40), HistorySettings(faults=30), stop_at_first=True)
    assert summary.failures, "a topic's partitions never taken went unnoticed"
    violation = summary.failures[0].violation
    assert violation is not None and "not owned by exactly one" in violation, violation
    assert f"('{LATE_TOPIC}', " in violation and "died" not in violation, violation


def test_the_checker_finds_a_consumer_whose_rack_never_reaches_the_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dataclasses import replace

    from recipes.partitioning._broker_assigned import _Callbacks

    real = _Callbacks.subscription
    monkeypatch.setattr(_Callbacks, "subscription", lambda self: replace(real(self), rack=None))
    summary = run_seeds("consumer-848", range(3), stop_at_first=True)
    assert summary.failures, "a rack lost on the way went unnoticed"
    violation = summary.failures[0].violation
    assert violation is not None and "rack at the broker is None" in violation, violation
