"""``Consumer(group_protocol="consumer")`` (KIP-848) on a real Kafka 4 broker: consumers
split a topic without a group-wide rebalance, read every record, commit fenced by the
member epoch, and a consumer that leaves hands over its partitions with nothing lost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coordination import describe_group, errors
from recipes.partitioning import (
    AsyncConsumer,
    BrokerAssignedPartitioning,
    Consumer,
    RangeAssignor,
    RebalanceListener,
    TopicPartition,
)

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


def new_consumer(
    created: list[Consumer], kafka: str, group: str, topic: str, **kw: Any
) -> Consumer:
    c = Consumer(
        group,
        topics=[topic],
        group_protocol="consumer",
        group_remote_assignor="uniform",
        bootstrap_servers=kafka,
        **{**FAST, **kw},
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


# ------------------------------------------------------------------ static membership


class Recorder(RebalanceListener):
    """What the listener was told, in order, and what it holds now."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []
        self.held: frozenset[TopicPartition] = frozenset()

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("assigned", partitions))
        self.held |= partitions

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("revoked", partitions))
        self.held -= partitions

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.calls.append(("lost", partitions))
        self.held -= partitions


def static_consumer(
    created: list[Consumer], kafka: str, group: str, topic: str, instance: str, **kw: Any
) -> Consumer:
    c = Consumer(
        group,
        topics=[topic],
        group_protocol="consumer",
        group_instance_id=instance,
        bootstrap_servers=kafka,
        **{**FAST, **kw},
    )
    created.append(c)
    c.start()
    return c


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_static_member_back_within_its_session_gets_its_partitions_and_nobody_else_moves(
    kafka: str, consumers: list[Consumer]
) -> None:
    topic = f"kip848-s-{uuid.uuid4().hex[:8]}"
    group = f"kip848-s-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, PARTITIONS)
    watched = Recorder()
    a = static_consumer(consumers, kafka, group, topic, "a")
    b = static_consumer(consumers, kafka, group, topic, "b", listener=watched)
    half = PARTITIONS // 2
    wait_for(lambda: len(a.assignment()) == half and len(b.assignment()) == half, "halves")
    a_had, b_had = a.assignment(), b.assignment()
    # b owns its partitions just before its listener hears of them: wait for the listener.
    wait_for(lambda: watched.held == b_had, "b's listener")
    told_b = len(watched.calls)
    # A static member's close is a leave with epoch -2: the broker keeps its partitions for
    # the instance until its session (6 s on the test brokers) runs out.
    a.close()
    time.sleep(1.0)
    again = static_consumer(consumers, kafka, group, topic, "a")
    wait_for(lambda: again.assignment() == a_had, "the instance's partitions back")
    assert b.assignment() == b_had and watched.calls[told_b:] == []


def test_a_second_consumer_with_an_instance_id_in_use_is_refused_and_the_first_keeps_all(
    kafka: str, consumers: list[Consumer]
) -> None:
    # The reverse of the classic protocol, which fences the member already in the group.
    topic = f"kip848-s-{uuid.uuid4().hex[:8]}"
    group = f"kip848-s-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, PARTITIONS)
    first = static_consumer(consumers, kafka, group, topic, "same")
    wait_for(lambda: len(first.assignment()) == PARTITIONS, "the first's assignment")
    second = static_consumer(consumers, kafka, group, topic, "same")
    with pytest.raises(errors.UnreleasedInstanceIdError, match="group_instance_id"):
        second.broker_assigned.ensure_active_group(timeout=30)
    with pytest.raises(errors.UnreleasedInstanceIdError):  # its poll loop learns it too
        second.poll(timeout_ms=100)
    first.poll(timeout_ms=100)
    assert len(first.assignment()) == PARTITIONS


# ------------------------------------------------------------------ pattern, rack


def test_a_pattern_is_the_brokers_on_whole_topic_names_and_takes_new_topics(
    kafka: str, consumers: list[Consumer]
) -> None:
    prefix = f"kip848-p-{uuid.uuid4().hex[:8]}"
    create(kafka, f"{prefix}-orders", 2)
    create(kafka, f"{prefix}-orders-eu", 2)
    whole = Consumer(
        f"{prefix}-g1",
        pattern=f"{prefix}-orders",
        group_protocol="consumer",
        bootstrap_servers=kafka,
        **FAST,
    )
    prefixed = Consumer(
        f"{prefix}-g2",
        pattern=f"{prefix}-orders.*",
        group_protocol="consumer",
        bootstrap_servers=kafka,
        **FAST,
    )
    consumers.extend([whole, prefixed])
    whole.start()
    prefixed.start()

    def topics(c: Consumer) -> set[str]:
        return {t for t, _ in c.assignment()}

    # RE2J on the whole name: "-orders" does not take "-orders-eu" (the classic pattern,
    # Python's re.match, would).
    wait_for(lambda: topics(prefixed) == {f"{prefix}-orders", f"{prefix}-orders-eu"}, "both")
    wait_for(lambda: topics(whole) == {f"{prefix}-orders"}, "the exact name")
    create(kafka, f"{prefix}-orders-us", 2)
    wait_for(lambda: f"{prefix}-orders-us" in topics(prefixed), "the new matching topic", 60.0)
    assert topics(whole) == {f"{prefix}-orders"}


def test_the_rack_reaches_the_broker(kafka: str, consumers: list[Consumer]) -> None:
    topic = f"kip848-r-{uuid.uuid4().hex[:8]}"
    group = f"kip848-r-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, PARTITIONS)
    c = new_consumer(consumers, kafka, group, topic, client_rack="rack-7")
    wait_for(lambda: len(c.assignment()) == PARTITIONS, "the assignment")
    (member,) = describe_group(group, bootstrap_servers=kafka).members
    assert member.decoded is not None and member.decoded["rack"] == "rack-7"


# ------------------------------------------------------------------ asyncio


def test_the_async_consumer_reads_every_record_once_on_the_new_protocol(kafka: str) -> None:
    topic = f"kip848-a-{uuid.uuid4().hex[:8]}"
    group = f"kip848-a-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, PARTITIONS)
    produce(kafka, topic, PARTITIONS, PER_PARTITION)

    read: list[tuple[int, int]] = []

    async def read_all() -> None:
        async with AsyncConsumer(
            group,
            topics=[topic],
            group_protocol="consumer",
            bootstrap_servers=kafka,
            **FAST,
        ) as consumer:
            async for record in consumer:
                read.append((record.partition, record.offset))
                if len(read) == PARTITIONS * PER_PARTITION:
                    await consumer.commit()
                    break

    asyncio.run(asyncio.wait_for(read_all(), 60))
    assert sorted(read) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    check = Consumer(group, topics=[topic], group_protocol="consumer", bootstrap_servers=kafka)
    try:
        committed = check.broker_assigned.committed_offsets([(topic, p) for p in range(PARTITIONS)])
    finally:
        check.close()
    assert {tp: om.offset if om else None for tp, om in committed.items()} == {
        (topic, p): PER_PARTITION for p in range(PARTITIONS)
    }
