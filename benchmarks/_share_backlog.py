"""What the one-consumer share benchmarks share: a backlog of small records written once, a
fresh share group per run that reads it from the start, and the loop that reads and
accepts the backlog (``share_consumer_cpu.py`` measures its CPU time,
``share_fetch_ahead.py`` its records/s with and without fetching ahead)."""

from __future__ import annotations

import cProfile
import time
import uuid
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from recipes.queues import AcknowledgeType, ShareConsumer, ShareRecord

PARTITIONS = 8
VALUE = b"v" * 100
MAX_POLL_RECORDS = 500
RUN_TIMEOUT_S = 300.0


class BenchmarkError(Exception):
    pass


def prepare(bootstrap: str, records: int) -> str:
    """A new topic holding ``records`` records."""
    topic = f"share-backlog-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    produce(bootstrap, topic, records, PARTITIONS)
    return topic


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    """``records`` small records (``VALUE``) into ``topic``, round robin over its partitions."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=256 * 1024
    )
    for i in range(records):
        producer.send(topic, value=VALUE, partition=i % partitions)
    producer.flush()
    producer.close()


def new_group(bootstrap: str) -> str:
    """A fresh share group that starts at the beginning of its partitions."""
    group = f"share-backlog-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        settings = {"share.auto.offset.reset": "earliest"}
        admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, settings)])
    finally:
        admin.close()
    return group


@dataclass(frozen=True)
class Reading:
    """How long one consumer took to read and accept ``records`` of the backlog, from the
    end of its first poll that returned records until the last record was handled (a new
    group's first fetch waits while the broker sets up its share-partitions: left out):
    wall-clock seconds, and this process's CPU seconds (every thread's, the heartbeats'
    included)."""

    records: int
    wall_s: float
    cpu_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s


def read_backlog(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    poll_ms: int,
    work_s: float = 0.0,
    fetch_ahead: bool = False,
    profiler: cProfile.Profile | None = None,
) -> Reading:
    """One consumer of a fresh group reads ``records`` of ``topic`` in explicit mode, waits
    ``work_s`` after each poll that returned records (the application's work per batch),
    and accepts every record (the next poll carries the acknowledgements); ``profiler``, if
    given, runs while it reads."""
    consumer = ShareConsumer(
        new_group(bootstrap),
        topics=[topic],
        bootstrap_servers=bootstrap,
        max_poll_records=MAX_POLL_RECORDS,
        fetch_ahead=fetch_ahead,
    )
    try:
        consumer.start(timeout=60)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        first: list[ShareRecord] = []
        while not first:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"no record in {RUN_TIMEOUT_S:.0f} s")
            first = consumer.poll(timeout_ms=poll_ms)
        started, started_cpu = time.monotonic(), time.process_time()
        if profiler is not None:
            profiler.enable()
        batch, handled = first, 0
        while True:
            if batch and work_s:
                time.sleep(work_s)
            for record in batch:
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)
            handled += len(batch)
            if handled >= records:
                break
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{handled} of {records} records in {RUN_TIMEOUT_S:.0f} s")
            batch = consumer.poll(timeout_ms=poll_ms)
        consumer.commit()  # the last poll's acknowledgements
        if profiler is not None:
            profiler.disable()
        wall_s, cpu_s = time.monotonic() - started, time.process_time() - started_cpu
        return Reading(records - len(first), wall_s, cpu_s)
    finally:
        consumer.close()
