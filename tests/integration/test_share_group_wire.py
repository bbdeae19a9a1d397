"""The share-group requests (KIP-932) on a real broker, through the transport.

On Kafka 4 (share.version is enabled on a freshly formatted 4.2+ cluster): a
ShareGroupHeartbeat joins (epoch 0) and gets a member epoch and then the topic's partition;
a ShareFetch opens a share session (epoch 0, then 1, 2, ...) and acquires the produced
records with delivery count 1; a ShareAcknowledge accepts one and releases another, which the
next ShareFetch (piggy-backing an ACCEPT) acquires again with delivery count 2; a RENEW (v2)
restarts its lock; closing the session accepts it; ShareGroupDescribe shows the member, and
a heartbeat of epoch -1 leaves. On Kafka 3.9, which offers none of these APIs, each request
is answered UNSUPPORTED_VERSION with a message naming Kafka 4.1 and share.version.

The heartbeats, fetches and acknowledgements go on a broker's own connection
(DirectConnection), the describes on kafka-python's connections: both paths of the transport.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from coordination._protocol import share_group_codec as codec
from coordination._protocol.error_codes import ErrorCode
from coordination._protocol.share_group import (
    AcknowledgementBatch,
    AcknowledgeType,
    ShareAcknowledgePartition,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopic,
    ShareFetchPartition,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareFetchTopic,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareRecord,
)
from coordination._transport.kafka import KafkaTransport
from coordination.errors import UnsupportedVersionError, broker_error
from coordination.transport import CoordinatorNode

from .test_consumer_group_member import create_topic_with_id
from .test_consumer_group_wire import COORDINATOR_ERRORS, coordinator_of, kafka_version

pytestmark = pytest.mark.integration

TIMEOUT_S = 10.0
ACCEPT, RELEASE, RENEW = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.RENEW


@pytest.fixture
def transport(kafka: str) -> Iterator[KafkaTransport]:
    t = KafkaTransport(
        client_id="share-group-wire",
        request_timeout_ms=int(TIMEOUT_S * 1000),
        connection={"bootstrap_servers": kafka},
    )
    yield t
    t.close()


def test_share_group_requests(
    kafka: str, transport: KafkaTransport, request: pytest.FixtureRequest
) -> None:
    if kafka_version(request) < (4, 0):
        unsupported_before_kafka_4(transport)
    else:
        join_fetch_acknowledge_and_leave(kafka, transport)


class Member:
    """One share-group member's requests, as a share consumer sends them."""

    def __init__(self, transport: KafkaTransport, group: str, leader: CoordinatorNode) -> None:
        self.transport = transport
        self.group = group
        self.member_id = str(uuid.uuid4())  # the member makes its own id
        self.epoch = 0
        self.session_epoch = 0  # 0 opens the share session
        self.leader = leader

    def heartbeat(self, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
        deadline = time.monotonic() + 30
        while True:
            answer = self.transport.send(
                request,
                ShareGroupHeartbeatResponse,
                coordinator=coordinator_of(self.transport, self.group),
                timeout_s=TIMEOUT_S,
            )
            if answer.error_code not in COORDINATOR_ERRORS:
                return answer
            assert time.monotonic() < deadline, answer
            time.sleep(0.2)

    def fetch(self, **fields: object) -> ShareFetchResponse:
        request = ShareFetchRequest(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.session_epoch,
            max_wait_ms=500,
            min_bytes=1,
            max_records=10,
            batch_size=10,
            **fields,  # type: ignore[arg-type]
        )
        answer = self.transport.send(
            request, ShareFetchResponse, coordinator=self.leader, timeout_s=TIMEOUT_S
        )
        self.session_epoch += 1
        return answer

    def acknowledge(
        self, topic_id: uuid.UUID, *batches: AcknowledgementBatch, renew: bool = False
    ) -> ShareAcknowledgeResponse:
        partitions = (ShareAcknowledgePartition(0, batches),)
        request = ShareAcknowledgeRequest(
            self.group,
            self.member_id,
            self.session_epoch,
            is_renew_ack=renew,
            topics=(ShareAcknowledgeTopic(topic_id, partitions),),
        )
        answer = self.transport.send(
            request, ShareAcknowledgeResponse, coordinator=self.leader, timeout_s=TIMEOUT_S
        )
        self.session_epoch = self.session_epoch + 1 if self.session_epoch >= 0 else -1
        return answer


def leader_of(kafka: str, topic: str) -> CoordinatorNode:
    """The broker leading the topic's partition 0 (ShareFetch goes to partition leaders)."""
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        (described,) = admin.describe_topics([topic])
        (partition,) = described["partitions"]
        brokers = {b["broker_id"]: b for b in admin.describe_cluster()["brokers"]}
        leader = brokers[partition["leader_id"]]
        return CoordinatorNode(leader["broker_id"], leader["host"], leader["port"])
    finally:
        admin.close()


def acquired_until(
    member: Member, count: int, first: ShareFetchResponse | None = None, **fields: object
) -> list[tuple[ShareRecord, int]]:
    """ShareFetches (the first with ``fields``) until ``count`` records are acquired."""
    got: list[tuple[ShareRecord, int]] = []
    deadline = time.monotonic() + 30
    answer = first or member.fetch(**fields)
    while True:
        assert answer.error_code == ErrorCode.NONE, answer
        assert answer.version == 2  # Kafka 4.2+
        assert answer.acquisition_lock_timeout_ms > 0
        for topic in answer.responses:
            for partition in topic.partitions:
                assert partition.error_code == ErrorCode.NONE, partition
                assert partition.acknowledge_error_code == ErrorCode.NONE, partition
                got.extend(codec.acquired(partition))
        if len(got) >= count:
            return got
        assert time.monotonic() < deadline, f"acquired only {got}"
        answer = member.fetch()


def join_fetch_acknowledge_and_leave(kafka: str, transport: KafkaTransport) -> None:
    group, topic = f"sg-wire-{uuid.uuid4().hex[:8]}", f"sg-wire-{uuid.uuid4().hex[:8]}"
    topic_id = create_topic_with_id(kafka, topic, 1)
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        # A share group starts at the end of its partitions by default: from the start here,
        # so that the records produced before the member joined are delivered.
        config = {"share.auto.offset.reset": "earliest"}
        resource = ConfigResource(ConfigResourceType.GROUP, group, config)
        admin.alter_configs([resource], raise_on_unknown=False)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka)
    try:
        for n in range(3):
            producer.send(topic, key=b"k", value=f"record-{n}".encode(), headers=[("n", b"%d" % n)])
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)

    member = Member(transport, group, leader_of(kafka, topic))
    joined = member.heartbeat(
        ShareGroupHeartbeatRequest(group, member.member_id, 0, subscribed_topic_names=(topic,))
    )
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.version == 1 and joined.member_id == member.member_id
    assert joined.member_epoch >= 1 and joined.heartbeat_interval_ms > 0
    member.epoch, assignment = joined.member_epoch, joined.assignment
    deadline = time.monotonic() + 30
    while not assignment:  # the assignor runs after the join
        assert time.monotonic() < deadline, "no assignment"
        time.sleep(0.2)
        answer = member.heartbeat(ShareGroupHeartbeatRequest(group, member.member_id, member.epoch))
        assert answer.error_code == ErrorCode.NONE, answer
        member.epoch = answer.member_epoch
        assignment = answer.assignment if answer.assignment is not None else assignment
    assert [(t.topic_id, t.partitions) for t in assignment] == [(topic_id, (0,))]

    # Open the share session on the partition: all three records, first delivery.
    fetch_topics = (ShareFetchTopic(topic_id, (ShareFetchPartition(0),)),)
    first = acquired_until(member, 3, topics=fetch_topics)
    assert [(r.offset, r.key, r.value, count) for r, count in first] == [
        (n, b"k", f"record-{n}".encode(), 1) for n in range(3)
    ]
    assert [r.headers for r, _ in first] == [(("n", b"%d" % n),) for n in range(3)]
    assert all(r.timestamp > 0 for r, _ in first)

    # Accept offset 0, release offset 1 (one type per offset).
    acknowledged = member.acknowledge(topic_id, AcknowledgementBatch(0, 1, (ACCEPT, RELEASE)))
    assert acknowledged.error_code == ErrorCode.NONE, acknowledged
    assert acknowledged.version == 2
    ((partition,),) = [t.partitions for t in acknowledged.responses]
    assert partition.partition_index == 0 and partition.error_code == ErrorCode.NONE, partition

    # The next fetch accepts offset 2 on the way and gets offset 1 back, second delivery.
    piggy_backed = (ShareFetchPartition(0, (AcknowledgementBatch(2, 2, (ACCEPT,)),)),)
    again = acquired_until(member, 1, topics=(ShareFetchTopic(topic_id, piggy_backed),))
    assert [(r.offset, r.value, count) for r, count in again] == [(1, b"record-1", 2)]

    # RENEW (v2, KIP-1222) keeps the lock; then closing the session (-1) accepts the record.
    renewed = member.acknowledge(topic_id, AcknowledgementBatch(1, 1, (RENEW,)), renew=True)
    assert renewed.error_code == ErrorCode.NONE, renewed
    assert renewed.acquisition_lock_timeout_ms > 0
    assert [p.error_code for t in renewed.responses for p in t.partitions] == [ErrorCode.NONE]
    member.session_epoch = -1
    closed = member.acknowledge(topic_id, AcknowledgementBatch(1, 1, (ACCEPT,)))
    assert closed.error_code == ErrorCode.NONE, closed
    assert [p.error_code for t in closed.responses for p in t.partitions] == [ErrorCode.NONE]

    (state,) = describe(transport, group).groups
    assert state.error_code == ErrorCode.NONE and state.group_id == group, state
    assert state.group_state == "Stable" and state.group_epoch >= 1
    (described,) = state.members
    assert described.member_id == member.member_id and described.member_epoch == member.epoch
    assert described.subscribed_topic_names == (topic,)
    assert [(t.topic_id, t.topic_name, t.partitions) for t in described.assignment] == [
        (topic_id, topic, (0,))
    ]

    left = member.heartbeat(ShareGroupHeartbeatRequest(group, member.member_id, -1))
    assert left.error_code == ErrorCode.NONE, left
    assert left.member_epoch == -1
    (after,) = describe(transport, group).groups
    assert after.members == () and after.group_state == "Empty"


def describe(transport: KafkaTransport, group: str) -> ShareGroupDescribeResponse:
    deadline = time.monotonic() + 30
    while True:
        answer = transport.send(
            ShareGroupDescribeRequest((group,)),
            ShareGroupDescribeResponse,
            coordinator=None,  # kafka-python's connections; one broker is the coordinator
            timeout_s=TIMEOUT_S,
        )
        if answer.error_code not in COORDINATOR_ERRORS:
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def unsupported_before_kafka_4(transport: KafkaTransport) -> None:
    # Kafka 3.9 lists none of the APIs 76-79 in ApiVersions (4.0 lists v0, early access).
    group = f"sg-wire-{uuid.uuid4().hex[:8]}"
    member = Member(transport, group, coordinator_of(transport, group))
    joining = ShareGroupHeartbeatRequest(group, member.member_id, 0, subscribed_topic_names=("t",))
    answers: list[codec.Response] = [
        member.heartbeat(joining),
        describe(transport, group),
        member.fetch(),
        member.acknowledge(uuid.uuid4(), AcknowledgementBatch(0, 0, (ACCEPT,))),
    ]
    for answer in answers:
        assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION and answer.version == -1
    heartbeat, described = answers[0], answers[1]
    assert isinstance(heartbeat, ShareGroupHeartbeatResponse)
    assert heartbeat.error_message is not None
    assert "Kafka 4.1 or newer" in heartbeat.error_message
    assert "share.version" in heartbeat.error_message
    error = broker_error(heartbeat.error_code, group_id=group, api="ShareGroupHeartbeat")
    assert isinstance(error, UnsupportedVersionError)
    assert isinstance(described, ShareGroupDescribeResponse)
    assert [g.group_id for g in described.groups] == [group]
