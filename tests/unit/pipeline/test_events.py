"""The worker's typed events: one class per kind, and the JSON objects the CLI prints."""

from __future__ import annotations

import dataclasses
import json
from typing import get_args

import pytest

from recipes.pipeline import (
    BatchAbandoned,
    BatchFailed,
    BatchPublished,
    PartitionRecovered,
    PartitionsAssigned,
    PartitionsReleased,
    RebalanceBegan,
    WorkerClosed,
    WorkerEvent,
    WorkerEventKind,
    WorkerStarted,
)

EVENTS: list[WorkerEvent] = [
    WorkerStarted(worker="w1", t=1.5, spark_start_ms=4000, warm_up_ms=900),
    RebalanceBegan(worker="w1", t=2.0, generation=-1, reason="joining for the first time"),
    PartitionsAssigned(
        worker="w1", t=2.5, partitions=(0, 2), owned=(0, 2), generation=1, rebalance_ms=500
    ),
    PartitionsReleased(
        kind="revoked",
        worker="w1",
        t=3.0,
        partitions=(2,),
        generation=1,
        waited_ms=40,
        rebalance_ms=None,
    ),
    PartitionsReleased(
        kind="lost",
        worker="w1",
        t=3.1,
        partitions=(0,),
        generation=-1,
        waited_ms=0,
        rebalance_ms=3,
    ),
    PartitionRecovered(
        worker="w1", t=3.5, topic="t", partition=0, committed=10, published=None, orphans=1
    ),
    BatchPublished(
        worker="w1",
        t=4.0,
        topic="t",
        partition=0,
        start=10,
        end=20,
        records=10,
        rejected=1,
        stage_ms=800,
        ms=950,
    ),
    BatchAbandoned(worker="w1", t=4.5, topic="t", partition=0, start=20, end=30, reason="x"),
    BatchFailed(worker="w1", t=5.0, topic="t", partition=0, error="RuntimeError('x')"),
    WorkerClosed(worker="w1", t=6.0, records=10, batches=1),
]


def test_every_kind_has_its_event() -> None:
    assert sorted(e.kind for e in EVENTS) == sorted(get_args(WorkerEventKind))


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_an_event_goes_through_json_and_back(event: WorkerEvent) -> None:
    printed = json.loads(json.dumps(event.as_dict()))
    assert WorkerEvent.from_dict(printed) == event


def test_the_printed_object_is_the_one_the_workers_always_printed() -> None:
    batch = EVENTS[6]
    assert batch.as_dict() == {
        "event": "batch",
        "worker": "w1",
        "t": 4.0,
        "topic": "t",
        "partition": 0,
        "start": 10,
        "end": 20,
        "records": 10,
        "rejected": 1,
        "stage_ms": 800,
        "ms": 950,
    }
    assert EVENTS[2].as_dict()["partitions"] == [0, 2]  # JSON arrays, as before
    assert list(EVENTS[2].as_dict())[:3] == ["event", "worker", "t"]


def test_events_are_frozen_and_unknown_fields_of_a_newer_worker_are_ignored() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EVENTS[0].worker = "w2"  # type: ignore[misc]
    newer = {**EVENTS[-1].as_dict(), "added_later": 1}
    assert WorkerEvent.from_dict(newer) == EVENTS[-1]


@pytest.mark.parametrize(
    "data",
    [{"event": "nonsense", "worker": "w", "t": 0}, {"worker": "w"}, {"event": "closed", "t": 0}],
)
def test_what_is_no_worker_event_is_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not a"):
        WorkerEvent.from_dict(data)
