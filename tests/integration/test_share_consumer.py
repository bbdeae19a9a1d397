"""recipes.queues.ShareConsumer on a real broker (share groups, KIP-932).

Kafka 4.x (the harness's newest): two consumers of one share group split the records and
each record is accepted exactly once; RELEASE delivers a record again (delivery count 2);
REJECT never does; a consumer closed with records in flight releases them at once;
implicit mode accepts what the last poll returned; RENEW keeps a record past the group's
lock duration (set to 1 s for the group: the harness's broker allows it,
``group.share.min.record.lock.duration.ms``); a record acknowledged after its lock ran out
is reported as AcquisitionLockExpiredError; a long poll holds up no heartbeat; the lag
counts the records not consumed and drops once they are accepted. On a
cluster of three: records keep coming when a partition's leader dies. Kafka 3.9: the typed
error naming Kafka 4.2 and share.version.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from coordination import ErrorCode
from coordination.hooks import CoordinationHooks, RecordsUnpolled
from coordination.share_group import AcquiredRecord, ShareGroupMember
from coordination.testing import NEWEST_KAFKA, KafkaCluster
from recipes.queues import (
    AcknowledgeType,
    AcquisitionLockExpiredError,
    ShareConsumer,
    ShareGroupsUnsupportedError,
    ShareRecord,
)

from .._versions import VERSIONS
from .test_consumer_group_member import create_topic_with_id

pytestmark = pytest.mark.integration


def _with_share_groups(version: str) -> bool:
    return tuple(int(n) for n in version.split(".")[:2]) >= (4, 2)


# The share-group tests run on the brokers that have them, the typed error's on the others.
ON_SHARE_BROKERS = pytest.mark.parametrize(
    "kafka",
    [v for v in VERSIONS if _with_share_groups(v)],
    indirect=True,
    ids=lambda v: f"kafka-{v}",
)
ON_OLDER_BROKERS = pytest.mark.parametrize(
    "kafka",
    [v for v in VERSIONS if not _with_share_groups(v)],
    indirect=True,
    ids=lambda v: f"kafka-{v}",
)

TIMEOUT_S = 30.0
ACCEPT, RELEASE, REJECT, RENEW = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.RENEW,
)


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    """Consumers a test makes (append them); closed at its end."""
    made: list[ShareConsumer] = []
    yield made
    for c in made:
        c.close(timeout=10)


def share_group(kafka: str, **config: str) -> str:
    """A new share group's id, configured to start at the beginning of its partitions
    (a share group starts at their end by default) and with ``config``."""
    group = f"queue-{uuid.uuid4().hex[:8]}"
    share_group_config(kafka, group, **config)
    return group


def share_group_config(kafka: str, group: str, **config: str) -> None:
    """Set ``group``'s config to ``config`` and a start at the beginning of its partitions
    (AlterConfigs: the group's other settings go back to the broker's)."""
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        settings = {"share.auto.offset.reset": "earliest", **config}
        resource = ConfigResource(ConfigResourceType.GROUP, group, settings)
        admin.alter_configs([resource], raise_on_unknown=False)
    finally:
        admin.close()


def produced(kafka: str, count: int, partitions: int = 1) -> str:
    topic = f"queue-{uuid.uuid4().hex[:8]}"
    create_topic_with_id(kafka, topic, partitions)
    producer = KafkaProducer(bootstrap_servers=kafka)
    try:
        for n in range(count):
            producer.send(topic, key=b"%d" % n, value=b"job-%d" % n, partition=n % partitions)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)
    return topic


def consumer(kafka: str, group: str, topic: str, made: list[ShareConsumer], **kw: object):
    c = ShareConsumer(group, topics=[topic], bootstrap_servers=kafka, **kw)  # type: ignore[arg-type]
    made.append(c)
    return c


def poll_until(
    c: ShareConsumer,
    done: Callable[[list[ShareRecord]], bool],
    on_record: Callable[[ShareRecord], None] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    deadline = time.monotonic() + timeout_s
    while not done(got):
        assert time.monotonic() < deadline, (
            f"got only {[(r.offset, r.delivery_count) for r in got]}"
        )
        for record in c.poll(timeout_ms=500):
            got.append(record)
            if on_record is not None:
                on_record(record)
    return got


@ON_OLDER_BROKERS
def test_no_share_groups(kafka: str) -> None:
    c = ShareConsumer("queue-none", topics=["t"], bootstrap_servers=kafka)
    try:
        with pytest.raises(ShareGroupsUnsupportedError) as raised:
            c.start(timeout=TIMEOUT_S)
        assert "Kafka 4.2" in str(raised.value) and "share.version" in str(raised.value)
        with pytest.raises(ShareGroupsUnsupportedError):
            c.poll(timeout_ms=100)
    finally:
        c.close(timeout=5)


@ON_SHARE_BROKERS
def test_records_are_delivered_with_their_fields_and_accepted_once(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 5)
    group = share_group(kafka)
    c = consumer(kafka, group, topic, consumers)
    got = poll_until(c, lambda got: len(got) >= 5, lambda r: c.acknowledge(r, ACCEPT))
    assert sorted((r.offset, r.key, r.value, r.delivery_count) for r in got) == [
        (n, b"%d" % n, b"job-%d" % n, 1) for n in range(5)
    ]
    assert all(r.topic == topic and r.partition == 0 and r.timestamp > 0 for r in got)
    assert c.commit() == {(topic, 0): None}
    assert c.poll(timeout_ms=1000) == []  # accepted: never delivered again
    assert c.metrics().acknowledged == {"ACCEPT": 5}


def produce_in_batches(kafka: str, topic: str, count: int, per_batch: int, partitions: int) -> None:
    """``count`` more records, flushed every ``per_batch`` (the broker acquires whole
    batches: small ones let several consumers share a partition)."""
    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=0)
    try:
        for n in range(count):
            producer.send(topic, value=b"job-%d" % n, partition=n % partitions)
            if n % per_batch == per_batch - 1:
                producer.flush(timeout=TIMEOUT_S)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)


@ON_SHARE_BROKERS
def test_two_consumers_split_the_records_and_each_is_accepted_once(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 0, partitions=2)
    produce_in_batches(kafka, topic, 120, per_batch=4, partitions=2)
    group = share_group(kafka)
    a = consumer(kafka, group, topic, consumers, max_poll_records=8)
    b = consumer(kafka, group, topic, consumers, max_poll_records=8)
    accepted: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    deadline = time.monotonic() + 60
    while len(accepted["a"]) + len(accepted["b"]) < 120:
        assert time.monotonic() < deadline, {k: len(v) for k, v in accepted.items()}
        for name, c in (("a", a), ("b", b)):
            for record in c.poll(timeout_ms=200):
                c.acknowledge(record, ACCEPT)
                accepted[name].append((record.partition, record.offset))
            assert all(error is None for error in c.commit().values())
    together = accepted["a"] + accepted["b"]
    assert sorted(together) == sorted({(p, o) for p, o in together})  # none twice
    assert len(together) == 120
    assert accepted["a"] and accepted["b"], "one consumer got everything"
    for c in (a, b):
        assert c.poll(timeout_ms=300) == []


@ON_SHARE_BROKERS
def test_a_released_record_comes_back_with_delivery_count_2(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 2)
    c = consumer(kafka, share_group(kafka), topic, consumers)
    first = poll_until(c, lambda got: len(got) >= 2)
    c.acknowledge(first[0], RELEASE)
    c.acknowledge(first[1], ACCEPT)
    assert c.commit() == {(topic, 0): None}
    (again,) = poll_until(c, lambda got: len(got) >= 1)
    assert (again.offset, again.value, again.delivery_count) == (0, b"job-0", 2)
    c.acknowledge(again, ACCEPT)
    assert c.commit() == {(topic, 0): None}
    assert c.metrics().records_redelivered == 1


@ON_SHARE_BROKERS
def test_a_rejected_record_is_never_delivered_again(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 2)
    group = share_group(kafka)
    c = consumer(kafka, group, topic, consumers)
    got = poll_until(c, lambda got: len(got) >= 2)
    c.acknowledge(got[0], REJECT)
    c.acknowledge(got[1], RELEASE)
    assert c.commit() == {(topic, 0): None}
    # Only the released one comes back, to this consumer or a new one.
    other = consumer(kafka, group, topic, consumers)
    seen: list[ShareRecord] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for each in (c, other):
            for record in each.poll(timeout_ms=200):
                seen.append(record)
                each.acknowledge(record, ACCEPT)
            each.commit()
    assert [(r.offset, r.delivery_count) for r in seen] == [(1, 2)]


@ON_SHARE_BROKERS
def test_closing_with_records_in_flight_releases_them_at_once(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 3)
    group = share_group(kafka)
    leaving = consumer(kafka, group, topic, consumers)
    staying = consumer(kafka, group, topic, consumers)
    staying.start(timeout=TIMEOUT_S)
    held = poll_until(leaving, lambda got: len(got) >= 3)
    leaving.acknowledge(held[0], ACCEPT)
    closed_at = time.monotonic()
    assert leaving.close() == {(topic, 0): None}
    # The lock is 30 s: the others' records come back long before it would run out.
    again = poll_until(staying, lambda got: len(got) >= 2, lambda r: staying.acknowledge(r))
    assert time.monotonic() - closed_at < 10
    assert sorted((r.offset, r.delivery_count) for r in again) == [(1, 2), (2, 2)]


class _Unpolled(CoordinationHooks):
    def __init__(self) -> None:
        self.events: list[RecordsUnpolled] = []

    def on_records_unpolled(self, event: RecordsUnpolled) -> None:
        self.events.append(event)


@ON_SHARE_BROKERS
def test_a_consumer_fetching_ahead_accepts_each_record_once_and_releases_its_round_at_close(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    # Each poll reads the answer of the fetch the one before sent (on the leader's own
    # connection, answered while the records were handled) and sends the next.
    topic = produced(kafka, 0, partitions=2)
    produce_in_batches(kafka, topic, 200, per_batch=4, partitions=2)
    group = share_group(kafka)
    unpolled = _Unpolled()
    ahead = consumer(
        kafka, group, topic, consumers, fetch_ahead=True, max_poll_records=10, hooks=[unpolled]
    )
    accepted: list[tuple[int, int]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(accepted) < 100:
        assert time.monotonic() < deadline, len(accepted)
        for record in ahead.poll(timeout_ms=500):
            assert record.delivery_count == 1
            ahead.acknowledge(record, ACCEPT)
            accepted.append((record.partition, record.offset))
    closed_at = time.monotonic()
    assert all(error is None for error in ahead.close().values())
    # A round was out at close: its records, never handed out, go back at once (the lock
    # is 30 s), each having spent a delivery.
    released = {(e.partition, offset) for e in unpolled.events for offset in e.offsets}
    assert released and all(e.reason == "closed" for e in unpolled.events)
    other = consumer(kafka, group, topic, consumers)
    rest = poll_until(
        other, lambda got: len(accepted) + len(got) >= 200, lambda r: other.acknowledge(r)
    )
    assert time.monotonic() - closed_at < 10
    assert all(error is None for error in other.commit().values())
    together = accepted + [(r.partition, r.offset) for r in rest]
    assert len(together) == 200 and len(set(together)) == 200
    assert {(r.partition, r.offset) for r in rest if r.delivery_count == 2} == released


@ON_SHARE_BROKERS
def test_implicit_mode_accepts_what_the_last_poll_returned(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 4)
    group = share_group(kafka)
    c = consumer(kafka, group, topic, consumers, acknowledgement_mode="implicit")
    got = poll_until(c, lambda got: len(got) >= 4)
    with pytest.raises(Exception, match="explicit"):
        c.acknowledge(got[0], ACCEPT)
    assert c.poll(timeout_ms=500) == []  # and it accepted all four
    assert c.metrics().acknowledged == {"ACCEPT": 4}
    other = consumer(kafka, group, topic, consumers)
    assert other.poll(timeout_ms=1500) == []


@ON_SHARE_BROKERS
def test_renew_keeps_a_record_past_the_lock_and_an_expired_one_is_reported(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 2)
    group = share_group(kafka, **{"share.record.lock.duration.ms": "1500"})
    c = consumer(kafka, group, topic, consumers)
    other = consumer(kafka, group, topic, consumers)
    other.start(timeout=TIMEOUT_S)
    kept, dropped = poll_until(c, lambda got: len(got) >= 2)
    renewed_until = time.monotonic() + 4  # well past the 1.5 s lock
    while time.monotonic() < renewed_until:
        c.acknowledge(kept, RENEW)
        assert c.commit() == {(topic, 0): None}
        # The other consumer gets the record left to expire, never the renewed one.
        for record in other.poll(timeout_ms=300):
            assert record.offset == dropped.offset and record.delivery_count >= 2
            other.acknowledge(record, RELEASE)
        other.commit()
    c.acknowledge(kept, ACCEPT)
    assert c.commit() == {(topic, 0): None}
    assert c.metrics().lock_renewals >= 4
    c.acknowledge(dropped, ACCEPT)  # its lock ran out 2.5 s ago
    (outcome,) = c.commit().values()
    assert isinstance(outcome, AcquisitionLockExpiredError)
    assert outcome.offsets == (dropped.offset,)


@ON_SHARE_BROKERS
def test_the_broker_refuses_an_acknowledgement_after_the_lock_ran_out(kafka: str) -> None:
    # The member underneath, without the consumer's own check of the lock's time.
    topic = produced(kafka, 1)
    group = share_group(kafka, **{"share.record.lock.duration.ms": "1000"})
    with ShareGroupMember(group, [topic], bootstrap_servers=kafka) as member:
        member.wait_assigned(timeout=TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        records: list[AcquiredRecord] = []
        while not records:
            assert time.monotonic() < deadline
            records = member.fetch({}, max_wait_ms=500).records
        (record,) = records
        assert record.lock_timeout_ms == 1000
        time.sleep(2.5)  # the lock runs out; the broker makes the record available again
        key = (record.topic_id, record.partition)
        answer = member.acknowledge({key: {record.offset: AcknowledgeType.ACCEPT}})
        assert answer == {key: ErrorCode.INVALID_RECORD_STATE}
        again = member.fetch({}, max_wait_ms=2000).records
        assert [(r.offset, r.delivery_count) for r in again] == [(record.offset, 2)]


@ON_SHARE_BROKERS
def test_a_subscribed_topic_that_does_not_exist_holds_up_nothing(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 2)
    missing = f"queue-missing-{uuid.uuid4().hex[:8]}"
    c = ShareConsumer(share_group(kafka), topics=[topic, missing], bootstrap_servers=kafka)
    consumers.append(c)
    got = poll_until(c, lambda got: len(got) >= 2, lambda r: c.acknowledge(r))
    assert {(r.topic, r.offset) for r in got} == {(topic, 0), (topic, 1)}
    assert c.commit() == {(topic, 0): None}


@ON_SHARE_BROKERS
def test_a_long_poll_holds_up_no_heartbeat(kafka: str, consumers: list[ShareConsumer]) -> None:
    # The fetch waits at the partition's leader on a connection of its own; the heartbeats
    # (every 0.5 s on the test broker) go on the coordinator's meanwhile.
    topic = produced(kafka, 0)
    c = consumer(kafka, share_group(kafka), topic, consumers)
    c.start(timeout=TIMEOUT_S)
    before = c.member.metrics().heartbeat_total
    started = time.monotonic()
    assert c.poll(timeout_ms=3000) == []
    assert time.monotonic() - started >= 2.9
    after = c.member.metrics()
    assert after.heartbeat_total - before >= 4
    assert after.last_heartbeat_age_s is not None and after.last_heartbeat_age_s < 1.5


@ON_SHARE_BROKERS
def test_lag_shows_the_records_not_done_and_drops_once_they_are_accepted(
    kafka: str, consumers: list[ShareConsumer]
) -> None:
    topic = produced(kafka, 2, partitions=2)
    group = share_group(kafka)
    c = consumer(kafka, group, topic, consumers, lag_refresh_ms=200)
    # Kafka 4.3 tells no lag for a new group's partition until a first acknowledgement
    # records its state: accept one record on each partition first.
    first = poll_until(c, lambda got: len(got) >= 2, lambda r: c.acknowledge(r, ACCEPT))
    assert all(error is None for error in c.commit().values())
    assert c.lag() == {(topic, 0): 0, (topic, 1): 0}
    k = 5
    producer = KafkaProducer(bootstrap_servers=kafka)
    try:
        for n in range(k):
            producer.send(topic, value=b"more-%d" % n, partition=n % 2)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)
    # Consumed none: the lag is the K records produced.
    assert c.lag() == {(topic, 0): 3, (topic, 1): 2} == c.metrics().lag
    got = poll_until(c, lambda got: len(got) >= k)
    assert len(first) + len(got) == 2 + k
    for r in got:
        c.acknowledge(r, ACCEPT)
    # The polls read the lag (every 0.2 s): it drops to 0 once the acceptances are in.
    deadline = time.monotonic() + TIMEOUT_S
    while c.metrics().lag != {(topic, 0): 0, (topic, 1): 0}:
        assert time.monotonic() < deadline, c.metrics().lag
        c.poll(timeout_ms=100)


def test_records_keep_coming_when_a_partition_leader_dies() -> None:
    # Three brokers (a KRaft quorum survives one's death); partitions with 2 replicas.
    fast_failover = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
    with KafkaCluster(3, version=NEWEST_KAFKA, config=fast_failover) as cluster:
        kafka = cluster.bootstrap_servers
        topic = f"queue-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(bootstrap_servers=kafka)
        try:
            admin.create_topics([NewTopic(topic, 3, 2)])
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                (described,) = admin.describe_topics([topic])
                leaders = {p["partition_index"]: p["leader_id"] for p in described["partitions"]}
                if len(leaders) == 3 and all(n >= 0 for n in leaders.values()):
                    break
                assert time.monotonic() < deadline, described
                time.sleep(0.2)
        finally:
            admin.close()
        produce_in_batches(kafka, topic, 30, per_batch=5, partitions=3)
        made: list[ShareConsumer] = []
        try:
            c = consumer(kafka, share_group(kafka), topic, made)
            accepted = poll_until(c, lambda got: len(got) >= 30, lambda r: c.acknowledge(r))
            assert all(e is None for e in c.commit().values())
            cluster.kill_broker(leaders[0])
            produce_in_batches(kafka, topic, 30, per_batch=5, partitions=3)
            accepted += poll_until(
                c, lambda got: len(got) >= 30, lambda r: c.acknowledge(r), timeout_s=90
            )
            c.commit()
        finally:
            for each in made:
                each.close(timeout=10)
    seen = [(r.partition, r.offset) for r in accepted]
    assert len(seen) == 60 and len(set(seen)) == 60, sorted(seen)


def produced_in_one_batch(kafka: str, count: int) -> str:
    """A one-partition topic whose ``count`` records are one record batch."""
    topic = f"queue-{uuid.uuid4().hex[:8]}"
    create_topic_with_id(kafka, topic, 1)
    producer = KafkaProducer(bootstrap_servers=kafka, linger_ms=500)
    try:
        for n in range(count):
            producer.send(topic, value=b"job-%d" % n, partition=0)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)
    return topic


@ON_SHARE_BROKERS
@pytest.mark.parametrize("mode", ["batch_optimized", "record_limit"])
def test_record_limit_acquires_at_most_max_poll_records_even_inside_a_batch(
    kafka: str, consumers: list[ShareConsumer], mode: str
) -> None:
    topic = produced_in_one_batch(kafka, 10)
    group = share_group(kafka)
    c = consumer(kafka, group, topic, consumers, max_poll_records=3, acquire_mode=mode)
    sizes = []
    got: list[ShareRecord] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < 10:
        assert time.monotonic() < deadline, f"got only {[r.offset for r in got]}"
        records = c.poll(timeout_ms=500)
        if records:
            sizes.append(len(records))
            got += records
            for r in records:
                c.acknowledge(r, ACCEPT)
    assert sorted(r.offset for r in got) == list(range(10))
    if mode == "record_limit":
        assert max(sizes) <= 3, sizes
    else:
        # Kafka's default acquires the whole batch, past max_poll_records.
        assert max(sizes) == 10, sizes
