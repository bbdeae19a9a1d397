"""The pipeline benchmark's latency accounting: which batch made an event visible, and
when. Its latency figures (and their ratios to Structured Streaming's) rest on it."""

from __future__ import annotations

import importlib
from typing import Any

# Imported by name at run time: mypy checks benchmarks/ as scripts (they import their
# siblings by bare name), and a static import here would map the file to a second module.
bench = importlib.import_module("benchmarks.pipeline_throughput")
PARTITIONS: int = bench.PARTITIONS
Feed, first_showing, latencies = bench.Feed, bench.first_showing, bench.latencies
time_to_exact, visible_at = bench.time_to_exact, bench.visible_at


def event(partition: int, offset: int) -> int:
    """The index of the event at ``offset`` of ``partition`` (one producer, round robin)."""
    return offset * PARTITIONS + partition


def test_an_event_is_visible_from_the_first_batch_that_passes_its_offset() -> None:
    at = visible_at([(2.0, 0, 5), (1.0, 0, 3), (4.0, 1, 2)])
    assert [at(event(0, o)) for o in range(6)] == [1.0, 1.0, 1.0, 2.0, 2.0, None]
    assert [at(event(1, o)) for o in range(3)] == [4.0, 4.0, None]
    assert at(event(2, 0)) is None  # a partition with no batch yet


def test_a_batch_that_ends_no_further_than_an_earlier_one_shows_nothing_new() -> None:
    # Published again after a hand-over (the same range, later): the first one counts.
    at = visible_at([(1.0, 0, 3), (5.0, 0, 3), (6.0, 0, 2), (7.0, 0, 4)])
    assert [at(event(0, o)) for o in range(4)] == [1.0, 1.0, 1.0, 7.0]


def test_the_batch_found_carries_its_own_payload() -> None:
    job_of = first_showing([(3.0, 0, 4, "second"), (1.0, 0, 2, "first")])
    assert job_of(event(0, 1)) == (1.0, "first")
    assert job_of(event(0, 2)) == (3.0, "second")
    assert job_of(event(0, 4)) is None


def feed(acked: list[tuple[int, float]]) -> Any:
    fed = Feed.__new__(Feed)
    fed.acked = acked
    return fed


def test_latency_runs_from_each_events_acknowledgement_to_its_batch() -> None:
    # Events 0..PARTITIONS-1 acknowledged at 10.0, the next round at 11.0.
    fed = feed([(PARTITIONS, 10.0), (2 * PARTITIONS, 11.0)])
    visible = [(12.5, p, 2) for p in range(PARTITIONS)]
    assert (
        sorted(latencies(fed, 2 * PARTITIONS, visible)) == [1.5] * PARTITIONS + [2.5] * PARTITIONS
    )
    # An event no batch showed has no latency (it is not counted as zero).
    assert len(latencies(fed, 2 * PARTITIONS, visible[1:])) == 2 * (PARTITIONS - 1)


def test_time_to_exact_waits_for_every_event_acknowledged_before_the_kill() -> None:
    fed = feed([(PARTITIONS, 10.0), (2 * PARTITIONS, 20.0)])
    visible = [(12.0, p, 1) for p in range(PARTITIONS)]
    assert time_to_exact(fed, visible, killed_at=15.0) == 0.0  # all shown before the kill
    late = [*visible[:-1], (19.0, PARTITIONS - 1, 1)]
    assert time_to_exact(fed, late, killed_at=15.0) == 4.0
    assert time_to_exact(fed, visible[:-1], killed_at=15.0) is None  # one never shown
