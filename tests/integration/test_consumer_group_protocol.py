"""``Consumer(group_protocol="consumer")`` (KIP-848) on a real Kafka 4 broker: consumers
split a topic without a group-wide rebalance, read every record, commit fenced by the
member epoch, and a consumer that leaves hands over its partitions with nothing lost.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coordination import errors
from recipes.partitioning import BrokerAssignedPartitioning, Consumer, RangeAssignor

from .test_consumer import create, produce
from .test_consumer_group_member import on_kafka

pytestmark = [pytest.mark.integration, on_kafka("4")]

PARTITIONS = 4
PER_PARTITION = 50
FAST: dict[str, Any] = {"retry_backoff_ms": 50, "fetch_max_wait_ms": 100}


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    created: list[Consumer] = []
    yield created
    for c in created:
        c.close()


def new_consumer(created: list[Consumer], kafka: str, group: str, topic: str) -> Consumer:
    c = Consumer(
        group,
        topics=[topic],
        group_protocol="consumer",
        group_remote_assignor="uniform",
        bootstrap_servers=kafka,
        **FAST,
    )
    created.append(c)
    c.start()
    return c


def test_two_consumers_read_every_record_once_across_a_hand_over(
    kafka: str, consumers: list[Consumer]
) -> None:
    topic = f"kip848-c-{uuid.uuid4().hex[:8]}"
    group = f"kip848-c-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, PARTITIONS)
    produce(kafka, topic, PARTITIONS, PER_PARTITION)
    a = new_consumer(consumers, kafka, group, topic)
    b = new_consumer(consumers, kafka, group, topic)
    # The broker splits the topic between them (no poll needed: the members heartbeat).
    deadline = time.monotonic() + 30
    while not (a.broker_assigned.owned() and b.broker_assigned.owned()):
        assert time.monotonic() < deadline, "the topic was never split"
        time.sleep(0.05)
    seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    a_open = True
    deadline = time.monotonic() + 60
    # Each reads and commits what it read; a leaves once it has read a third of the topic.
    while sum(len(v) for v in seen.values()) < PARTITIONS * PER_PARTITION:
        assert time.monotonic() < deadline, {k: len(v) for k, v in seen.items()}
        for name, c in (("a", a), ("b", b)):
            if c is a and not a_open:
                continue
            records = c.poll(timeout_ms=50, max_records=10)
            for batch in records.values():
                seen[name].extend((r.partition, r.offset) for r in batch)
            if records:
                c.commit()
        if a_open and len(seen["a"]) >= PARTITIONS * PER_PARTITION // 3:
            assert not a.assignment() & b.assignment()
            a.close()
            a_open = False
    everything = [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    read = seen["a"] + seen["b"]
    assert sorted(read) == everything  # every record, each once: committed before the move
    ends = b.broker_assigned.committed_offsets([(topic, p) for p in range(PARTITIONS)])
    assert {tp: om.offset if om else None for tp, om in ends.items()} == {
        (topic, p): PER_PARTITION for p in range(PARTITIONS)
    }


def test_the_consumer_protocol_refuses_client_side_assignors(kafka: str) -> None:
    with pytest.raises(errors.ConfigurationError, match="group_remote_assignor"):
        Consumer(
            "g",
            topics=["t"],
            group_protocol="consumer",
            assignors=[RangeAssignor()],
            bootstrap_servers=kafka,
        )
    c = Consumer("g", topics=["t"], group_protocol="consumer", bootstrap_servers=kafka)
    try:
        assert isinstance(c.broker_assigned, BrokerAssignedPartitioning)
        with pytest.raises(errors.CoordinatorStateError, match="broker_assigned"):
            _ = c.group
    finally:
        c.close()
