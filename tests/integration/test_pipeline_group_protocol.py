"""``PipelineWorker(group_protocol="consumer")`` (KIP-848) on a real broker, with a stand-in
for Spark (``stage=``: no JVM starts): two workers hand partitions over (a joining worker
takes half of them while batches flow, then a leaving one hands over the rest), and every
offset's result is published exactly once; on Kafka 3, which has no consumer
protocol, the worker stops with the broker's ``UnsupportedVersionError``.

The stand-in reads each batch's range from the broker (as Spark's Kafka source does) and
stages the records' values; the output protocol (commit naming the staged batch, publish,
recover, fenced cleanup) is the worker's own.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from coordination.errors import UnsupportedVersionError
from recipes.pipeline import (
    OffsetRange,
    PartitionsAssigned,
    PartitionsReleased,
    PipelineOutput,
    PipelineWorker,
    StagedBatch,
    WorkerEvent,
)

from .test_consumer import create
from .test_consumer_group_member import on_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 4
PER_ROUND = 30  # records per partition produced in each of the test's three rounds
VALUES = "values.json"


class RangeReader:
    """The stand-in stage: reads each range's records from the broker, as Spark's Kafka
    source does, and stages their values (one consumer, one range at a time)."""

    def __init__(self, kafka: str) -> None:
        self._consumer = KafkaConsumer(
            bootstrap_servers=kafka, enable_auto_commit=False, isolation_level="read_committed"
        )
        self._lock = threading.Lock()

    def _read(self, offsets: OffsetRange) -> list[str]:
        tp = KafkaTopicPartition(offsets.topic, offsets.partition)
        values: list[str] = []
        with self._lock:
            self._consumer.assign([tp])
            self._consumer.seek(tp, offsets.start_offset)
            deadline = time.monotonic() + 30
            while len(values) < offsets.end_offset - offsets.start_offset:
                assert time.monotonic() < deadline, f"{offsets.name}: read {len(values)}"
                for record in self._consumer.poll(timeout_ms=200).get(tp, []):
                    if record.offset < offsets.end_offset:
                        values.append(record.value.decode())
        return values

    def stage(
        self, output: PipelineOutput, ranges: Sequence[OffsetRange], owner: str
    ) -> list[StagedBatch]:
        staged = []
        for offsets in ranges:
            values = self._read(offsets)
            path = output.new_staging_path(offsets)
            path.mkdir()
            (path / VALUES).write_text(json.dumps(values), encoding="utf-8")
            staged.append(
                output.finish_stage(
                    path,
                    offsets,
                    records=len(values),
                    rejected_offsets=[],
                    window_ms=None,
                    files={VALUES: len(values)},
                )
            )
        return staged

    def close(self) -> None:
        self._consumer.close()


class Running:
    """A worker running on a thread of its own; what its run() raised is kept."""

    def __init__(self, worker: PipelineWorker) -> None:
        self.worker = worker
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"run-{worker.name}")
        worker.start()
        self._thread.start()

    def _run(self) -> None:
        try:
            self.worker.run(self.stop)
        except BaseException as e:
            self.error = e

    def close(self) -> None:
        self.stop.set()
        self._thread.join(30)
        self.worker.close()


@pytest.fixture
def reader(kafka: str) -> Iterator[RangeReader]:
    r = RangeReader(kafka)
    yield r
    r.close()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for r in started:
        r.close()


def worker(
    kafka: str, group: str, topic: str, root: Path, name: str, stage: Any, events: list[Any]
) -> PipelineWorker:
    return PipelineWorker(
        group,
        topic=topic,
        output=root,
        name=name,
        stage=stage,
        group_protocol="consumer",
        group_remote_assignor="uniform",
        bootstrap_servers=kafka,
        max_batch_records=20,
        max_batch_delay_ms=100,
        poll_interval_ms=50,
        retry_backoff_ms=50,
        on_event=events.append,
    )


def produce(kafka: str, topic: str, round_: int) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka)
    for p in range(PARTITIONS):
        for i in range(PER_ROUND):
            producer.send(topic, value=f"{round_}-{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def wait_for(
    what: str, done: Callable[[], bool], running: list[Running], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        for r in running:
            assert r.error is None, f"{r.worker.name} stopped: {r.error!r}"
        assert time.monotonic() < deadline, f"not in {timeout} s: {what}"
        time.sleep(0.1)


def published_to(output: PipelineOutput, offset: int) -> bool:
    """Whether every partition's published ranges reach ``offset``."""
    ends = {r.partition: 0 for r in output.published()}
    for r in output.published():
        ends[r.partition] = max(ends[r.partition], r.end_offset)
    return all(ends.get(p, 0) >= offset for p in range(PARTITIONS))


@on_kafka("4")
def test_two_workers_publish_every_offset_once_across_hand_overs(
    kafka: str, tmp_path: Path, reader: RangeReader, running: list[Running]
) -> None:
    run = uuid.uuid4().hex[:8]
    topic, group, root = f"kip848-pipe-{run}", f"kip848-pipe-{run}", tmp_path / "out"
    create(kafka, topic, PARTITIONS)
    output = PipelineOutput(root)
    events: dict[str, list[WorkerEvent]] = {"a": [], "b": []}

    # a alone takes every partition; then b joins and the broker moves half of them
    # (revoked by a first: a batch in flight is committed and published before b gets
    # its partition); then a leaves and b takes the rest.
    produce(kafka, topic, 1)
    a = Running(worker(kafka, group, topic, root, "a", reader.stage, events["a"]))
    running.append(a)
    wait_for("a publishes the first round", lambda: published_to(output, 20), running)
    b = Running(worker(kafka, group, topic, root, "b", reader.stage, events["b"]))
    running.append(b)
    produce(kafka, topic, 2)  # while the broker moves partitions to b
    wait_for(
        "the broker splits the partitions",
        lambda: bool(a.worker.owned()) and bool(b.worker.owned()),
        running,
    )
    assert not a.worker.owned() & b.worker.owned()
    wait_for("the second round", lambda: published_to(output, 2 * PER_ROUND), running)
    running.remove(a)
    a.close()
    assert a.error is None, a.error
    produce(kafka, topic, 3)
    wait_for("b publishes the rest", lambda: published_to(output, 3 * PER_ROUND), running)
    assert len(b.worker.owned()) == PARTITIONS

    # Every offset published once, each batch holding its range's records.
    end = 3 * PER_ROUND
    output.check_published({(topic, p): (0, end) for p in range(PARTITIONS)})
    published: list[str] = []
    for path in output.published_paths():
        published += json.loads((path / VALUES).read_text(encoding="utf-8"))
    produced = [
        f"{n}-{p}-{i}" for n in (1, 2, 3) for p in range(PARTITIONS) for i in range(PER_ROUND)
    ]
    assert sorted(published) == sorted(produced)
    committed = b.worker.group.committed_offsets([(topic, p) for p in range(PARTITIONS)])
    assert {tp: om.offset for tp, om in committed.items() if om} == {
        (topic, p): end for p in range(PARTITIONS)
    }
    # The hand-overs were the new protocol's: a gave partitions up to b, both at member
    # epochs the broker handed out.
    revoked = [e for e in events["a"] if isinstance(e, PartitionsReleased) and e.kind == "revoked"]
    assigned_b = [e for e in events["b"] if isinstance(e, PartitionsAssigned)]
    assert revoked and assigned_b
    assert all(e.generation > 0 for e in assigned_b)


@on_kafka("3")
def test_on_kafka_3_the_worker_stops_with_the_version_it_needs(
    kafka: str, tmp_path: Path, reader: RangeReader
) -> None:
    w = PipelineWorker(
        f"kip848-pipe-old-{uuid.uuid4().hex[:8]}",
        topic="kip848-pipe-old",
        output=tmp_path / "out",
        stage=reader.stage,
        group_protocol="consumer",
        bootstrap_servers=kafka,
    )
    stop = threading.Event()
    guard = threading.Timer(60, stop.set)  # never waits forever, whatever happens
    guard.start()
    try:
        w.start()
        with pytest.raises(UnsupportedVersionError, match=r"Kafka 4\.0"):
            w.run(stop)
        assert not stop.is_set()
    finally:
        guard.cancel()
        w.close()
