"""The partitioning recipe's consumer on a real broker: patterns, fenced commits, pause state."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from coordination import OffsetAndMetadata, errors
from coordination.clock import SYSTEM_CLOCK
from coordination.testing import NEWEST_KAFKA, KafkaCluster
from recipes.partitioning import (
    Consumer,
    CooperativeStickyAssignor,
    PartitionsNotOwnedError,
    RangeAssignor,
    TopicPartition,
)
from recipes.partitioning._metadata import KafkaTopicMetadata

from .members import FAST, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    created: list[Consumer] = []
    yield created
    for c in created:
        c.close()


def create(kafka: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(kafka: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def consumer(created: list[Consumer], kafka: str, group: str, **kw: Any) -> Consumer:
    c = Consumer(group, bootstrap_servers=kafka, **{**FAST, **kw})
    created.append(c)
    c.start()
    return c


def poll_all(cs: list[Consumer]) -> None:
    for c in cs:
        c.poll(timeout_ms=50)


def settled(cs: list[Consumer], total: int) -> bool:
    poll_all(cs)

    def states() -> list[tuple[int | None, int]]:
        # A member turns STABLE before its assignment is applied: until then it owns the
        # last generation's partitions, so each owned set is read between two equal states.
        out = []
        for c in cs:
            stable = c.group.generation_if_stable()
            out.append((stable.generation_id if stable else None, c.group._owned_generation()))
        return out

    before = states()
    owned = [c.assignment() for c in cs]
    union = frozenset().union(*owned)
    generations = {stable for stable, _ in before}
    return (
        sum(len(o) for o in owned) == total
        and len(union) == total
        and len(generations) == 1
        and None not in generations
        and all(applied == stable for stable, applied in before)
        and states() == before
    )


def test_pattern_subscription_picks_up_new_topics(kafka: str, consumers) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    create(kafka, f"{prefix}-a", 2)
    c = consumer(consumers, kafka, f"g-{prefix}", pattern=rf"{prefix}-.*", metadata_max_age_ms=500)
    wait_until(lambda: settled([c], 2), 30, "the first topic to be assigned")
    create(kafka, f"{prefix}-b", 3)
    wait_until(lambda: settled([c], 5), 30, "the new matching topic to be assigned")
    assert {tp.topic for tp in c.assignment()} == {f"{prefix}-a", f"{prefix}-b"}
    assert any("subscribed topics changed" in r for r in c.group.metrics().rejoin_reasons)


def test_commits_are_fenced_by_ownership_and_generation(kafka: str, consumers) -> None:
    topic = f"fence-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 4)
    produce(kafka, topic, 4, 5)
    group = f"g-{topic}"
    coop = [CooperativeStickyAssignor()]
    a = consumer(consumers, kafka, group, topics=[topic], assignors=coop)
    wait_until(lambda: settled([a], 4), 30, "a to own everything")
    wait_until(lambda: bool(a.poll(200)) or a._positions.keys() == a.assignment(), 30, "records")
    old_generation = a.group.generation()
    a.commit()
    b = consumer(consumers, kafka, group, topics=[topic], assignors=coop)
    wait_until(lambda: settled([a, b], 4), 30, "a and b to share the partitions")
    moved = sorted(set(TopicPartition(topic, p) for p in range(4)) - a.assignment())
    assert moved

    # A partition that was revoked: refused before anything is sent.
    with pytest.raises(PartitionsNotOwnedError, match=f"{topic}-{moved[0].partition}"):
        a.commit({moved[0]: 3})
    # A commit of the old generation: the broker refuses it; nothing is committed.
    before = b.committed(moved)
    with pytest.raises(errors.CommitFailedError, match="ILLEGAL_GENERATION"):
        a.group.commit_offsets(
            {(t, p): OffsetAndMetadata(1) for t, p in moved}, generation=old_generation
        )
    assert b.committed(moved) == before
    # The new owner commits normally.
    b.commit({tp: 5 for tp in b.assignment()})
    assert set(b.committed(b.assignment()).values()) == {5}


@pytest.mark.parametrize("cooperative", [True, False], ids=["cooperative", "eager"])
def test_paused_state_survives_rebalances_as_in_java(
    kafka: str, consumers, cooperative: bool
) -> None:
    topic = f"pause-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 4)
    group = f"g-{topic}"
    assignors = [CooperativeStickyAssignor()] if cooperative else [RangeAssignor()]
    a = consumer(consumers, kafka, group, topics=[topic], assignors=assignors)
    wait_until(lambda: settled([a], 4), 30, "a to own everything")
    a.pause(*a.assignment())
    b = consumer(consumers, kafka, group, topics=[topic], assignors=assignors)
    wait_until(lambda: settled([a, b], 4), 30, "a and b to share the partitions")
    if cooperative:
        # Only the revoked partitions' pause state is gone; the kept ones stay paused.
        assert a.paused() == a.assignment()
    else:
        # Eager revoked everything, which forgets every pause.
        assert a.paused() == frozenset()


def test_a_paused_partition_goes_on_after_resume_without_losing_a_record(
    kafka: str, consumers
) -> None:
    topic = f"resume-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 40)
    held, flowing = TopicPartition(topic, 0), TopicPartition(topic, 1)
    c = consumer(
        consumers, kafka, f"g-{topic}", topics=[topic], max_poll_records=5, fetch_max_wait_ms=50
    )
    got: dict[TopicPartition, list[Any]] = {held: [], flowing: []}
    both = frozenset(got)

    def polled(tp: TopicPartition, n: int, unpaused: frozenset[TopicPartition] = both) -> bool:
        """Poll once; True once ``tp`` has returned ``n`` records."""
        for t, records in c.poll(timeout_ms=100).items():
            assert t in unpaused, f"{t} returned records while paused"
            got[t].extend(records)
        return len(got[tp]) >= n

    def commit_checked() -> None:
        # A commit never passes a record poll() did not return.
        c.commit()
        for tp, offset in c.committed([held, flowing]).items():
            returned = [r.offset for r in got[tp]]
            assert offset is None or offset <= len(returned), (tp, offset, len(returned))
            assert returned[: offset or 0] == list(range(offset or 0))

    wait_until(lambda: polled(held, 5), 30, "some records of partition 0")
    assert len(got[held]) < 40, "max_poll_records=5 should leave records to fetch"
    commit_checked()
    c.pause(held)
    produce(kafka, topic, 2, 20)  # records 40-59 of each partition
    wait_until(
        lambda: polled(flowing, 60, frozenset({flowing})),
        30,
        "the unpaused partition to keep flowing",
    )
    commit_checked()
    c.resume(held)
    wait_until(lambda: polled(held, 60), 30, "the paused partition's rest")
    for _ in range(5):  # and nothing more
        polled(held, 60)
    for tp in (held, flowing):
        assert [r.offset for r in got[tp]] == list(range(60)), tp  # each once, in order
        values = [f"{tp.partition}-{i}".encode() for n in (40, 20) for i in range(n)]
        assert [r.value for r in got[tp]] == values
    commit_checked()
    assert c.committed([held, flowing]) == {held: 60, flowing: 60}


def test_end_offsets_and_the_lag_of_each_owned_partition(kafka: str, consumers) -> None:
    topic = f"lag-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 2)
    produce(kafka, topic, 2, 30)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    c = consumer(
        consumers, kafka, f"g-{topic}", topics=[topic], max_poll_records=5, fetch_max_wait_ms=50
    )
    assert c.end_offsets(tps) == {tps[0]: 30, tps[1]: 30}
    returned: dict[TopicPartition, int] = {tp: 0 for tp in tps}

    def some_returned() -> bool:
        for tp, records in c.poll(timeout_ms=100).items():
            returned[tp] += len(records)
        return all(returned[tp] > 0 for tp in tps)

    wait_until(some_returned, 30, "records of both partitions")
    metrics = c.metrics()
    assert set(metrics.positions) == set(tps)
    for tp in tps:
        assert metrics.positions[tp] == returned[tp]
        # The end as of the last fetch response is 30: the lag is what poll() has not returned.
        assert metrics.lag[tp] == 30 - returned[tp]
    assert metrics.total_lag == 60 - sum(returned.values())
    assert metrics.member.rebalance_total >= 1


def test_partition_racks_come_from_the_brokers_and_reach_a_rack_aware_consumer() -> None:
    # A broker of its own, with broker.rack set (every broker of a KafkaCluster shares it).
    with KafkaCluster(brokers=1, version=NEWEST_KAFKA, config={"broker.rack": "r0"}) as kafka:
        bootstrap = kafka.bootstrap_servers
        create(bootstrap, "racked", 3)
        metadata = KafkaTopicMetadata({"bootstrap_servers": bootstrap}, SYSTEM_CLOCK)
        try:
            wait_until(lambda: "racked" in metadata.partition_racks(["racked"]), 30, "racks")
            assert metadata.partition_racks(["racked"]) == {"racked": [frozenset({"r0"})] * 3}
        finally:
            metadata.close()
        created: list[Consumer] = []
        try:
            near = consumer(created, bootstrap, "racks", topics=["racked"], client_rack="r0")
            far = consumer(created, bootstrap, "racks", topics=["racked"], client_rack="r1")
            wait_until(lambda: settled([near, far], 3), 30, "both consumers")
            # Every partition is on r0 alone: the same racks everywhere, so plain ranges.
            assert sorted(len(c.assignment()) for c in (near, far)) == [1, 2]
        finally:
            for c in created:
                c.close()


@pytest.mark.parametrize("fetcher", [None, "lean"])
def test_a_committed_offset_past_the_log_end_is_reset_and_the_records_from_there_come(
    kafka: str, consumers: list[Consumer], fetcher: str | None
) -> None:
    # A committed offset beyond the partition's end (the topic recreated, or an offset set
    # by hand): the fetcher resets the position per auto_offset_reset, as Kafka's consumer
    # does, and every record from the reset position on is returned, none skipped.
    topic = f"past-end-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 1)
    produce(kafka, topic, 1, 5)
    tp = TopicPartition(topic, 0)
    group = f"g-{topic}"
    first = consumer(consumers, kafka, group, topics=[topic])
    wait_until(lambda: settled([first], 1), 30, "the first consumer to own the partition")
    first.commit({tp: 50})
    first.close()
    c = consumer(
        consumers, kafka, group, topics=[topic], auto_offset_reset="earliest", fetcher=fetcher
    )
    got: list[int] = []  # (not settled(): its polls would drop what they return)

    def read() -> bool:
        got.extend(r.offset for records in c.poll(200).values() for r in records)
        return len(got) >= 5

    wait_until(read, 30, f"records 0-4 after the reset (got {got})")
    assert got == [0, 1, 2, 3, 4]
    c.commit()
    assert c.committed([tp])[tp] == 5
