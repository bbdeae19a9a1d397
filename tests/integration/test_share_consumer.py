"""recipes.queues.ShareConsumer on a real broker (share groups, KIP-932).

Kafka 4.x (the harness's newest): two consumers of one share group split the records and
each record is accepted exactly once; RELEASE delivers a record again (delivery count 2);
REJECT never does; a consumer closed with records in flight releases them at once;
implicit mode accepts what the last poll returned; RENEW keeps a record past the group's
lock duration (set to 1 s for the group: the harness's broker allows it,
``group.share.min.record.lock.duration.ms``); a record acknowledged after its lock ran out
is reported as AcquisitionLockExpiredError. Kafka 3.9: the typed error naming Kafka 4.2
and share.version.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

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
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        settings = {"share.auto.offset.reset": "earliest", **config}
        resource = ConfigResource(ConfigResourceType.GROUP, group, settings)
        admin.alter_configs([resource], raise_on_unknown=False)
    finally:
        admin.close()
    return group


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
