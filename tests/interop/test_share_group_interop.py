"""This library's ShareConsumer and Kafka's Java ``KafkaShareConsumer`` (kafka-clients 4.3.1,
tests/interop/java/SharePeer.java) in one share group (KIP-932): they split the records,
each record is accepted exactly once, and a record one of them releases goes to the other
with its delivery count raised.

What makes the split deterministic is the broker's assignment, not luck. Kafka's share-group
assignor (``simple``) balances partitions over the members and shares a partition between
members only when there are more members than partitions. So with two members and four
partitions each member gets two of its own, and every record of a partition goes to that
partition's member. The records are produced only once the broker has split the
partitions: our consumer, alone first, holds all four; it holds two once Java has joined.
With one partition and two members, the partition is both members'; there a record goes to
whichever member fetches it, so the release tests let only one of them fetch at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recipes.queues import AcknowledgeType, ShareConsumer, ShareRecord

from ..integration.test_share_consumer import ON_SHARE_BROKERS, produced, share_group
from .peers import (
    PeerProcess,
    produce,
    start_java_share_peer,
    topic_partitions,
    wait_until,
)

pytestmark = [pytest.mark.integration, ON_SHARE_BROKERS]

PARTITIONS = 4
RECORDS = 300
TIMEOUT_S = 60.0

Acked = tuple[str, int, int, int]
"""A record as acknowledged: topic, partition, offset, delivery count."""


def reported(peer: PeerProcess, kind: str) -> list[Acked]:
    """The records the Java peer reported as ``kind`` ("accepted", "released", "ack_failed")."""
    return [(str(t), int(p), int(o), int(d)) for e in peer.of(kind) for t, p, o, d in e["records"]]


def acked(records: list[ShareRecord]) -> list[Acked]:
    return [(r.topic, r.partition, r.offset, r.delivery_count) for r in records]


def accept_one_poll(consumer: ShareConsumer, into: list[Acked]) -> None:
    """Poll once, accept every record and commit; add them to ``into`` once the broker has
    confirmed."""
    records = consumer.poll(timeout_ms=200)
    if not records:
        return
    for record in records:
        consumer.acknowledge(record, AcknowledgeType.ACCEPT)
    outcome = consumer.commit()
    assert all(error is None for error in outcome.values()), outcome
    into.extend(acked(records))


def poll_all(consumer: ShareConsumer, count: int) -> list[ShareRecord]:
    """Poll until ``count`` records are held (none acknowledged)."""
    got: list[ShareRecord] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"got only {acked(got)}"
        got += consumer.poll(timeout_ms=500)
    return got


def no_errors(peer: PeerProcess) -> None:
    assert not peer.of("ack_failed", "error", "unparsed"), peer.describe()


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    """Our consumers a test makes (append them); closed at its end."""
    made: list[ShareConsumer] = []
    yield made
    for c in made:
        c.close(timeout=10)


def new_consumer(kafka: str, group: str, topic: str, made: list[ShareConsumer]) -> ShareConsumer:
    consumer = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka)
    made.append(consumer)
    return consumer


def test_java_and_ours_split_the_records_and_each_is_accepted_once(
    kafka: str, peers: list[PeerProcess], consumers: list[ShareConsumer], tmp_path: Path
) -> None:
    topic = produced(kafka, 0, partitions=PARTITIONS)
    everything = topic_partitions(topic, PARTITIONS)
    group = share_group(kafka)
    ours = new_consumer(kafka, group, topic, consumers)
    ours.start(timeout=TIMEOUT_S)
    wait_until(lambda: ours.assignment() == everything, TIMEOUT_S, "ours to hold every partition")
    java = start_java_share_peer(kafka, group, [topic], name="java-share", log_dir=tmp_path)
    peers.append(java)
    # The broker gives Java its half when Java joins, and takes it from ours at ours' next
    # heartbeat: from then on each partition has one member, which alone fetches from it.
    wait_until(
        lambda: len(ours.assignment()) == PARTITIONS // 2,
        TIMEOUT_S,
        "the broker to give Java half the partitions",
        peers,
    )
    mine = ours.assignment()
    written = produce(kafka, topic, RECORDS, PARTITIONS)

    by_ours: list[Acked] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(by_ours) + len(reported(java, "accepted")) < RECORDS:
        assert time.monotonic() < deadline, (
            f"accepted {len(by_ours)} here, {len(reported(java, 'accepted'))} by Java\n"
            + java.describe()
        )
        accept_one_poll(ours, by_ours)
    by_java = reported(java, "accepted")

    ours_keys = [(t, p, o) for t, p, o, _ in by_ours]
    java_keys = [(t, p, o) for t, p, o, _ in by_java]
    assert len(set(ours_keys)) == len(ours_keys) and len(set(java_keys)) == len(java_keys)
    assert not set(ours_keys) & set(java_keys), "accepted by both"
    assert set(ours_keys) | set(java_keys) == written
    assert all(d == 1 for *_, d in by_ours + by_java)
    # Each got exactly the records of its own partitions: half each.
    assert {(t, p) for t, p, _ in ours_keys} == mine
    assert {(t, p) for t, p, _ in java_keys} == everything - mine
    assert len(by_ours) == len(by_java) == RECORDS // 2

    assert ours.poll(timeout_ms=1000) == []  # nothing left to deliver
    assert java.terminate() == 0
    assert len(reported(java, "accepted")) == len(by_java)
    no_errors(java)


def test_records_ours_released_go_to_java_with_delivery_count_2(
    kafka: str, peers: list[PeerProcess], consumers: list[ShareConsumer], tmp_path: Path
) -> None:
    topic = produced(kafka, 0, partitions=1)
    produce(kafka, topic, 30, partitions=1)
    group = share_group(kafka)
    ours = new_consumer(kafka, group, topic, consumers)
    held = poll_all(ours, 30)
    released = sorted(r.offset for r in held if r.offset % 3 == 0)
    for record in held:
        kind = AcknowledgeType.RELEASE if record.offset % 3 == 0 else AcknowledgeType.ACCEPT
        ours.acknowledge(record, kind)
    assert ours.commit() == {(topic, 0): None}
    # Ours stays a member of the group, holding the one partition with Java, but polls no
    # more: what it released can only go to Java.
    java = start_java_share_peer(kafka, group, [topic], name="java-share", log_dir=tmp_path)
    peers.append(java)
    java.wait_for(
        lambda p: len(reported(p, "accepted")) >= len(released),
        TIMEOUT_S,
        "Java to accept the records ours released",
    )
    assert sorted(reported(java, "accepted")) == [(topic, 0, o, 2) for o in released]
    assert ours.assignment() == {(topic, 0)}

    assert ours.poll(timeout_ms=1000) == []  # all accepted, once
    assert java.terminate() == 0
    assert len(reported(java, "accepted")) == len(released)
    no_errors(java)


def test_records_java_released_come_to_ours_with_delivery_count_2(
    kafka: str, peers: list[PeerProcess], consumers: list[ShareConsumer], tmp_path: Path
) -> None:
    topic = produced(kafka, 0, partitions=1)
    written = produce(kafka, topic, 30, partitions=1)
    group = share_group(kafka)
    # Java alone: it releases a third of what its first poll returns and polls no more, so
    # that what it released cannot come back to it. Its one poll waits for the records: a
    # KafkaShareConsumer poll that ends before its fetch is answered asks for a fetch again,
    # and when that request reaches its fetcher after the answer, one more ShareFetch goes
    # out, waits at the broker and takes the records released meanwhile; held by a consumer
    # that polls no more, they would come to ours only after their lock, delivered 3 times.
    java = start_java_share_peer(
        kafka,
        group,
        [topic],
        name="java-share",
        log_dir=tmp_path,
        release_every=3,
        stop_after=1,
        poll_ms=int(TIMEOUT_S * 1000),
    )
    peers.append(java)
    java.wait_for(lambda p: bool(p.of("idle")), TIMEOUT_S, "Java's first poll")
    released = reported(java, "released")
    by_java = reported(java, "accepted")
    assert released and all(d == 1 for *_, d in released + by_java)

    ours = new_consumer(kafka, group, topic, consumers)
    by_ours: list[Acked] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(by_ours) + len(by_java) < len(written):
        assert time.monotonic() < deadline, f"accepted only {by_ours}\n{java.describe()}"
        accept_one_poll(ours, by_ours)
    # Ours gets what Java released (delivered twice now) and what Java never fetched.
    never_fetched = written - {(t, p, o) for t, p, o, _ in released + by_java}
    expected = [(t, p, o, 2) for t, p, o, _ in released] + [
        (t, p, o, 1) for t, p, o in never_fetched
    ]
    assert sorted(by_ours) == sorted(expected)
    assert ours.poll(timeout_ms=1000) == []
    assert java.terminate() == 0
    assert reported(java, "accepted") == by_java
    no_errors(java)
