"""The pipeline's coordination side without a broker: package surface, generator tally, timeline."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal

import recipes.pipeline
from recipes.pipeline import BatchPublished, PartitionsAssigned, RebalanceBegan, WorkerEvent
from recipes.pipeline._cluster import Timeline
from recipes.pipeline._generator import EventSpec, Tally


def test_importing_the_package_does_not_import_pyspark() -> None:
    code = "import sys, recipes.pipeline; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_all_is_sorted_and_exported() -> None:
    # Constants, then classes, then functions, each alphabetical (ruff's RUF022 order).
    def kind(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert recipes.pipeline.__all__ == sorted(recipes.pipeline.__all__, key=kind)
    for name in recipes.pipeline.__all__:
        assert getattr(recipes.pipeline, name) is not None


def test_tally_counts_valid_events_per_key_and_window() -> None:
    spec = EventSpec(keys=3, span_ms=30_000, malformed_every=4)
    tally = Tally(window_ms=10_000)
    for i in range(8):
        tally.add(spec, i)
    assert (tally.produced, tally.malformed) == (8, 2)
    assert sum(c for c, _ in tally.results.values()) == 6
    expected: dict[tuple[str, int], tuple[int, Decimal]] = {}
    for i in (0, 1, 2, 4, 5, 6):
        key, ts, value = spec.fields(i)
        count, total = expected.get((key, ts - ts % 10_000), (0, Decimal(0)))
        expected[(key, ts - ts % 10_000)] = (count + 1, total + value)
    assert tally.results == expected
    # The bytes say the same as the fields; malformed ones are not JSON.
    event = json.loads(spec.event(5))
    assert (event["key"], event["ts_ms"], Decimal(event["value"])) == spec.fields(5)
    assert not spec.event(3).startswith(b"{")


class _Stub:
    def __init__(self, name: str, events: list[WorkerEvent], killed_at: float | None) -> None:
        self.name = name
        self.events = events
        self.killed_at = killed_at


def _assigned(
    worker: str, t: float, partitions: tuple[int, ...], generation: int, ms: int
) -> PartitionsAssigned:
    return PartitionsAssigned(
        worker=worker,
        t=t,
        partitions=partitions,
        owned=partitions,
        generation=generation,
        rebalance_ms=ms,
    )


def _batch(worker: str, t: float, partition: int) -> BatchPublished:
    return BatchPublished(
        worker=worker,
        t=t,
        topic="events",
        partition=partition,
        start=0,
        end=1,
        records=1,
        rejected=0,
        stage_ms=1,
        ms=1,
    )


def test_timeline_follows_ownership_through_a_kill() -> None:
    a = _Stub(
        "a",
        [_assigned("a", 1.0, (0, 1), 1, 10), _batch("a", 2.0, 0)],
        killed_at=3.0,
    )
    b = _Stub(
        "b",
        [
            _assigned("b", 1.0, (2,), 1, 30),
            RebalanceBegan(worker="b", t=9.0, generation=1),
            _assigned("b", 9.5, (0, 1), 2, 500),
            _batch("b", 10.0, 1),
            _batch("b", 11.0, 0),
        ],
        killed_at=None,
    )
    timeline = Timeline([a, b], t0=0.0)  # type: ignore[list-item]
    assert timeline.ownership() == {
        0: [("a", 1.0, 3.0), ("b", 9.5, None)],
        1: [("a", 1.0, 3.0), ("b", 9.5, None)],
        2: [("b", 1.0, None)],
    }
    assert timeline.rebalances() == [(1, 1.0, 2, 30), (2, 9.5, 1, 500)]
    kill = timeline.kill_report("a", [0, 1])
    assert kill.detected_after_s == 6.0
    assert kill.resumed_after_s == {0: 8.0, 1: 7.0}
