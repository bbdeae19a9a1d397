"""The consumer group protocol's requests (KIP-848) on a real broker, through the transport:
on Kafka 4 a ConsumerGroupHeartbeat joins (epoch 0), gets a member epoch and then the
topic's partitions, ConsumerGroupDescribe shows the member as the heartbeats left it, and a
heartbeat of epoch -1 leaves; on Kafka 3.9 (no such API offered) both requests are answered
UNSUPPORTED_VERSION with a message naming Kafka 4.0, which the error table makes an
UnsupportedVersionError.

The heartbeats go on the coordinator's own connection (DirectConnection), the describes on
kafka-python's connections: both paths of the transport.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from coordination._protocol import messages as m
from coordination._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordination._protocol.error_codes import ErrorCode
from coordination._transport.kafka import KafkaTransport
from coordination.errors import UnsupportedVersionError, broker_error
from coordination.transport import CoordinatorNode

pytestmark = pytest.mark.integration

PARTITIONS = 3
TIMEOUT_S = 10.0


@pytest.fixture
def transport(kafka: str) -> Iterator[KafkaTransport]:
    t = KafkaTransport(
        client_id="consumer-group-wire",
        request_timeout_ms=int(TIMEOUT_S * 1000),
        connection={"bootstrap_servers": kafka},
    )
    yield t
    t.close()


def coordinator_of(transport: KafkaTransport, group: str) -> CoordinatorNode:
    deadline = time.monotonic() + 30
    while True:
        found = transport.send(
            m.FindCoordinatorRequest(group),
            m.FindCoordinatorResponse,
            coordinator=None,
            timeout_s=TIMEOUT_S,
        )
        if found.error_code == ErrorCode.NONE:
            return CoordinatorNode(found.node_id, found.host, found.port)
        assert time.monotonic() < deadline, found  # the offsets topic is being created
        time.sleep(0.2)


# The coordinator moved, or is still loading the group's shard of the offsets topic: a member
# finds it again and retries, and so do these tests.
COORDINATOR_ERRORS = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def heartbeat(
    transport: KafkaTransport, group: str, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    deadline = time.monotonic() + 30
    while True:
        answer = transport.send(
            request,
            ConsumerGroupHeartbeatResponse,
            coordinator=coordinator_of(transport, group),
            timeout_s=TIMEOUT_S,
        )
        if answer.error_code not in COORDINATOR_ERRORS:
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def describe(transport: KafkaTransport, group: str) -> ConsumerGroupDescribeResponse:
    deadline = time.monotonic() + 30
    while True:
        answer = transport.send(
            ConsumerGroupDescribeRequest((group,)),
            ConsumerGroupDescribeResponse,
            coordinator=None,  # one broker: it is the coordinator
            timeout_s=TIMEOUT_S,
        )
        if answer.error_code not in COORDINATOR_ERRORS:
            return answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def kafka_version(request: pytest.FixtureRequest) -> tuple[int, ...]:
    version: str = request.node.callspec.params["kafka"]
    return tuple(int(part) for part in version.split("."))


def test_consumer_group_heartbeat_and_describe(
    kafka: str, transport: KafkaTransport, request: pytest.FixtureRequest
) -> None:
    if kafka_version(request) < (4, 0):
        unsupported_before_kafka_4(transport)
    else:
        join_assignment_describe_and_leave(kafka, transport)


def join_assignment_describe_and_leave(kafka: str, transport: KafkaTransport) -> None:
    group, topic = f"cg-wire-{uuid.uuid4().hex[:8]}", f"cg-wire-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    member_id = str(uuid.uuid4())  # v1: the member makes its own id (KIP-1082)
    joined = heartbeat(
        transport,
        group,
        ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=(topic,),
            topic_partitions=(),
        ),
    )
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.version == 1
    assert joined.member_id == member_id
    assert joined.member_epoch >= 1
    assert joined.heartbeat_interval_ms > 0
    # Heartbeats until the whole topic is this member's (the broker may assign it at once, or
    # after the assignor ran); each reports what the member owns, as a member would.
    epoch, owned = joined.member_epoch, joined.assignment
    deadline = time.monotonic() + 30
    while owned is None or sum(len(t.partitions) for t in owned) < PARTITIONS:
        assert time.monotonic() < deadline, f"no full assignment; last owned {owned}"
        time.sleep(0.2)
        answer = heartbeat(
            transport,
            group,
            ConsumerGroupHeartbeatRequest(
                group, member_id, epoch, topic_partitions=owned if owned is not None else ()
            ),
        )
        assert answer.error_code == ErrorCode.NONE, answer
        epoch = answer.member_epoch
        owned = answer.assignment if answer.assignment is not None else owned
    assert len(owned) == 1
    (topic_id,) = {t.topic_id for t in owned}
    assert sorted(owned[0].partitions) == list(range(PARTITIONS))
    # Reported as owned: the member's assignment is complete, its epoch the group's.
    answer = heartbeat(
        transport,
        group,
        ConsumerGroupHeartbeatRequest(group, member_id, epoch, topic_partitions=owned),
    )
    assert answer.error_code == ErrorCode.NONE and answer.member_epoch == epoch

    described = describe(transport, group)
    assert described.version == 1
    (state,) = described.groups
    assert state.error_code == ErrorCode.NONE and state.group_id == group
    assert state.group_state == "Stable"
    assert state.group_epoch == epoch and state.assignment_epoch == epoch
    assert state.assignor_name  # the broker's default (uniform)
    (member,) = state.members
    assert member.member_id == member_id and member.member_epoch == epoch
    assert member.subscribed_topic_names == (topic,)
    assert member.member_type == 1  # a consumer-protocol member
    for assignment in (member.assignment, member.target_assignment):
        ((tid, name, partitions),) = [(t.topic_id, t.topic_name, t.partitions) for t in assignment]
        assert (tid, name, sorted(partitions)) == (topic_id, topic, list(range(PARTITIONS)))

    left = heartbeat(transport, group, ConsumerGroupHeartbeatRequest(group, member_id, -1))
    assert left.error_code == ErrorCode.NONE, left
    assert left.member_epoch == -1
    (after,) = describe(transport, group).groups
    assert after.members == () and after.group_state == "Empty"


def unsupported_before_kafka_4(transport: KafkaTransport) -> None:
    group = f"cg-wire-{uuid.uuid4().hex[:8]}"
    answer = heartbeat(
        transport,
        group,
        ConsumerGroupHeartbeatRequest(group, str(uuid.uuid4()), 0, subscribed_topic_names=("t",)),
    )
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION and answer.version == -1
    assert answer.error_message is not None and "Kafka 4.0 or newer" in answer.error_message
    error = broker_error(answer.error_code, group_id=group, api="ConsumerGroupHeartbeat")
    assert isinstance(error, UnsupportedVersionError)
    described = describe(transport, group)
    assert described.error_code == ErrorCode.UNSUPPORTED_VERSION and described.version == -1
    assert [g.group_id for g in described.groups] == [group]
