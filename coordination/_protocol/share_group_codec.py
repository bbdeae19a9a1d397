"""Encoding and decoding of the share-group messages (``share_group``), and the records a
ShareFetch returns.

Internal, no compatibility guarantee. Written from Kafka's message definitions, as
``consumer_group_codec`` is: every version of these APIs is flexible (compact strings,
bytes and arrays, a tagged field section after each struct); a nullable struct (the
heartbeat's ``Assignment``) is preceded by a byte, -1 for null and 1 otherwise; ShareFetch's
``Records`` are compact bytes, null only in v0. :func:`encode` and :func:`decode` handle the
message bodies, :func:`encode_request` and :func:`decode_response` the whole frame after its
size. Decoders (and :func:`decode_records`) raise only
:class:`~coordination.errors.ProtocolCodecError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

from ..errors import ProtocolCodecError
from . import share_group as sg
from .consumer_group_codec import (
    decode_heartbeat_answer,
    encode_heartbeat_answer,
    read_described_assignment,
    read_topic_partitions,
    write_described_assignment,
    write_topic_partitions,
)
from .record_batches import RecordFields, decode_fields
from .wire import (
    Reader,
    Writer,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)

SHARE_GROUP_HEARTBEAT_KEY: Final = 76
SHARE_GROUP_DESCRIBE_KEY: Final = 77
SHARE_FETCH_KEY: Final = 78
SHARE_ACKNOWLEDGE_KEY: Final = 79
DESCRIBE_SHARE_GROUP_OFFSETS_KEY: Final = 90
ALTER_SHARE_GROUP_OFFSETS_KEY: Final = 91

Request = (
    sg.ShareGroupHeartbeatRequest
    | sg.ShareGroupDescribeRequest
    | sg.ShareFetchRequest
    | sg.ShareAcknowledgeRequest
    | sg.DescribeShareGroupOffsetsRequest
    | sg.AlterShareGroupOffsetsRequest
)
Response = (
    sg.ShareGroupHeartbeatResponse
    | sg.ShareGroupDescribeResponse
    | sg.ShareFetchResponse
    | sg.ShareAcknowledgeResponse
    | sg.DescribeShareGroupOffsetsResponse
    | sg.AlterShareGroupOffsetsResponse
)
Message = Request | Response
M = TypeVar("M", bound=Message)


# -- shared structs ----------------------------------------------------------------------------


def _write_int32_array(out: Writer, values: tuple[int, ...]) -> None:
    out.compact_length(len(values))
    for value in values:
        out.int32(value)


def _write_batches(out: Writer, batches: tuple[sg.AcknowledgementBatch, ...]) -> None:
    out.compact_length(len(batches))
    for batch in batches:
        out.int64(batch.first_offset)
        out.int64(batch.last_offset)
        out.compact_length(len(batch.acknowledge_types))
        for kind in batch.acknowledge_types:
            out.int8(kind)
        out.no_tagged_fields()


def _read_batches(reader: Reader) -> tuple[sg.AcknowledgementBatch, ...]:
    # A batch takes at least 18 bytes: two offsets, an empty array and no tags.
    batches = []
    for _ in range(reader.compact_length("acknowledgement_batches", least_bytes=18)):
        first = reader.int64()
        last = reader.int64()
        count = reader.compact_length("acknowledge_types")
        kinds = tuple(reader.int8() for _ in range(count))
        reader.tagged_fields()
        batches.append(sg.AcknowledgementBatch(first, last, kinds))
    return tuple(batches)


def _write_leader(out: Writer, leader: sg.LeaderIdAndEpoch) -> None:
    out.int32(leader.leader_id)
    out.int32(leader.leader_epoch)
    out.no_tagged_fields()


def _read_leader(reader: Reader) -> sg.LeaderIdAndEpoch:
    leader = sg.LeaderIdAndEpoch(reader.int32(), reader.int32())
    reader.tagged_fields()
    return leader


def _write_node_endpoints(out: Writer, nodes: tuple[sg.NodeEndpoint, ...]) -> None:
    out.compact_length(len(nodes))
    for node in nodes:
        out.int32(node.node_id)
        out.compact_string(node.host, "host")
        out.int32(node.port)
        out.compact_string(node.rack, "rack")
        out.no_tagged_fields()


def _read_node_endpoints(reader: Reader) -> tuple[sg.NodeEndpoint, ...]:
    # A node takes at least 11 bytes: its id, an empty host, its port, a null rack, no tags.
    nodes = []
    for _ in range(reader.compact_length("node_endpoints", least_bytes=11)):
        node_id = reader.int32()
        host = reader.string("host")
        port = reader.int32()
        rack = reader.compact_string("rack", nullable=True)
        reader.tagged_fields()
        nodes.append(sg.NodeEndpoint(node_id, host, port, rack))
    return tuple(nodes)


# -- ShareGroupHeartbeat -----------------------------------------------------------------------


def _encode_heartbeat_request(r: sg.ShareGroupHeartbeatRequest, version: int) -> bytes:
    out = Writer()
    out.compact_string(r.group_id, "group_id")
    out.compact_string(r.member_id, "member_id")
    out.int32(r.member_epoch)
    out.compact_string(r.rack_id, "rack_id")
    names = r.subscribed_topic_names
    out.compact_length(None if names is None else len(names))
    for name in names or ():
        out.compact_string(name, "subscribed_topic_names")
    out.no_tagged_fields()
    return out.bytes()


def _decode_heartbeat_request(reader: Reader, version: int) -> sg.ShareGroupHeartbeatRequest:
    group_id = reader.string("group_id")
    member_id = reader.string("member_id")
    member_epoch = reader.int32()
    rack_id = reader.compact_string("rack_id", nullable=True)
    names = reader.string_array("subscribed_topic_names", nullable=True)
    reader.tagged_fields()
    return sg.ShareGroupHeartbeatRequest(group_id, member_id, member_epoch, rack_id, names)


def _decode_heartbeat_response(reader: Reader, version: int) -> sg.ShareGroupHeartbeatResponse:
    return decode_heartbeat_answer(reader, version, sg.ShareGroupHeartbeatResponse)


# -- ShareGroupDescribe ------------------------------------------------------------------------


def _encode_describe_request(r: sg.ShareGroupDescribeRequest, version: int) -> bytes:
    out = Writer()
    out.compact_length(len(r.group_ids))
    for group_id in r.group_ids:
        out.compact_string(group_id, "group_ids")
    out.boolean(r.include_authorized_operations)
    out.no_tagged_fields()
    return out.bytes()


def _decode_describe_request(reader: Reader, version: int) -> sg.ShareGroupDescribeRequest:
    group_ids = reader.string_array("group_ids")
    include = reader.boolean()
    reader.tagged_fields()
    assert group_ids is not None
    return sg.ShareGroupDescribeRequest(group_ids, include)


def _encode_describe_response(r: sg.ShareGroupDescribeResponse, version: int) -> bytes:
    out = Writer()
    out.int32(r.throttle_time_ms)
    out.compact_length(len(r.groups))
    for group in r.groups:
        out.int16(group.error_code)
        out.compact_string(group.error_message, "error_message")
        out.compact_string(group.group_id, "group_id")
        out.compact_string(group.group_state, "group_state")
        out.int32(group.group_epoch)
        out.int32(group.assignment_epoch)
        out.compact_string(group.assignor_name, "assignor_name")
        out.compact_length(len(group.members))
        for member in group.members:
            out.compact_string(member.member_id, "member_id")
            out.compact_string(member.rack_id, "rack_id")
            out.int32(member.member_epoch)
            out.compact_string(member.client_id, "client_id")
            out.compact_string(member.client_host, "client_host")
            out.compact_length(len(member.subscribed_topic_names))
            for name in member.subscribed_topic_names:
                out.compact_string(name, "subscribed_topic_names")
            write_described_assignment(out, member.assignment)
            out.no_tagged_fields()
        out.int32(group.authorized_operations)
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_describe_response(reader: Reader, version: int) -> sg.ShareGroupDescribeResponse:
    throttle_time_ms = reader.int32()
    # A group takes at least 20 bytes: error code, three strings, two epochs, an assignor,
    # no members, its operations and no tags.
    groups = []
    for _ in range(reader.compact_length("groups", least_bytes=20)):
        error_code = reader.int16()
        error_message = reader.compact_string("error_message", nullable=True)
        group_id = reader.string("group_id")
        group_state = reader.string("group_state")
        group_epoch = reader.int32()
        assignment_epoch = reader.int32()
        assignor_name = reader.string("assignor_name")
        members = []
        # A member takes at least 12 bytes: six fields of a byte or more, an epoch, no tags.
        for _ in range(reader.compact_length("members", least_bytes=12)):
            member_id = reader.string("member_id")
            rack_id = reader.compact_string("rack_id", nullable=True)
            member_epoch = reader.int32()
            client_id = reader.string("client_id")
            client_host = reader.string("client_host")
            names = reader.string_array("subscribed_topic_names")
            assert names is not None
            assignment = read_described_assignment(reader, "assignment")
            reader.tagged_fields()
            members.append(
                sg.DescribedShareGroupMember(
                    member_id=member_id,
                    rack_id=rack_id,
                    member_epoch=member_epoch,
                    client_id=client_id,
                    client_host=client_host,
                    subscribed_topic_names=names,
                    assignment=assignment,
                )
            )
        authorized_operations = reader.int32()
        reader.tagged_fields()
        groups.append(
            sg.DescribedShareGroup(
                error_code=error_code,
                group_id=group_id,
                error_message=error_message,
                group_state=group_state,
                group_epoch=group_epoch,
                assignment_epoch=assignment_epoch,
                assignor_name=assignor_name,
                members=tuple(members),
                authorized_operations=authorized_operations,
            )
        )
    reader.tagged_fields()
    return sg.ShareGroupDescribeResponse(tuple(groups), throttle_time_ms, version)


# -- DescribeShareGroupOffsets ------------------------------------------------------------------


def _encode_offsets_request(r: sg.DescribeShareGroupOffsetsRequest, version: int) -> bytes:
    out = Writer()
    out.compact_length(len(r.groups))
    for group in r.groups:
        out.compact_string(group.group_id, "group_id")
        out.compact_length(None if group.topics is None else len(group.topics))
        for name, partitions in group.topics or ():
            out.compact_string(name, "topic_name")
            _write_int32_array(out, partitions)
            out.no_tagged_fields()
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_offsets_request(reader: Reader, version: int) -> sg.DescribeShareGroupOffsetsRequest:
    groups = []
    # A group takes at least 3 bytes: its id, a null topic array and no tags.
    for _ in range(reader.compact_length("groups", least_bytes=3)):
        group_id = reader.string("group_id")
        count = reader.compact_length("topics", nullable=True, least_bytes=3)
        topics = None
        if count >= 0:
            topics = []
            for _ in range(count):
                name = reader.string("topic_name")
                partitions = reader.int32_array("partitions")
                reader.tagged_fields()
                topics.append((name, partitions))
        reader.tagged_fields()
        groups.append(
            sg.ShareGroupOffsetsRequestGroup(group_id, None if topics is None else tuple(topics))
        )
    reader.tagged_fields()
    return sg.DescribeShareGroupOffsetsRequest(tuple(groups))


def _encode_offsets_response(r: sg.DescribeShareGroupOffsetsResponse, version: int) -> bytes:
    out = Writer()
    out.int32(r.throttle_time_ms)
    out.compact_length(len(r.groups))
    for group in r.groups:
        out.compact_string(group.group_id, "group_id")
        out.compact_length(len(group.topics))
        for topic in group.topics:
            out.compact_string(topic.topic_name, "topic_name")
            out.uuid(topic.topic_id)
            out.compact_length(len(topic.partitions))
            for p in topic.partitions:
                out.int32(p.partition_index)
                out.int64(p.start_offset)
                out.int32(p.leader_epoch)
                if version >= 1:
                    out.int64(p.lag)
                out.int16(p.error_code)
                out.compact_string(p.error_message, "error_message")
                out.no_tagged_fields()
            out.no_tagged_fields()
        out.int16(group.error_code)
        out.compact_string(group.error_message, "error_message")
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_offsets_response(reader: Reader, version: int) -> sg.DescribeShareGroupOffsetsResponse:
    throttle_time_ms = reader.int32()
    groups = []
    # A group takes at least 5 bytes: its id, no topics, an error code, a null message, no
    # tags; a topic at least 19 (a name, its id, no partitions, no tags); a partition at
    # least 20 (v0: an index, a start offset, an epoch, an error code, a null message, no tags).
    for _ in range(reader.compact_length("groups", least_bytes=5)):
        group_id = reader.string("group_id")
        topics = []
        for _ in range(reader.compact_length("topics", least_bytes=19)):
            name = reader.string("topic_name")
            topic_id = reader.uuid()
            partitions = []
            for _ in range(reader.compact_length("partitions", least_bytes=20)):
                index = reader.int32()
                start_offset = reader.int64()
                leader_epoch = reader.int32()
                lag = reader.int64() if version >= 1 else -1
                error_code = reader.int16()
                error_message = reader.compact_string("error_message", nullable=True)
                reader.tagged_fields()
                partitions.append(
                    sg.SharePartitionOffset(
                        index, start_offset, leader_epoch, lag, error_code, error_message
                    )
                )
            reader.tagged_fields()
            topics.append(sg.ShareGroupOffsetsTopic(name, topic_id, tuple(partitions)))
        error_code = reader.int16()
        error_message = reader.compact_string("error_message", nullable=True)
        reader.tagged_fields()
        groups.append(
            sg.DescribedShareGroupOffsets(group_id, tuple(topics), error_code, error_message)
        )
    reader.tagged_fields()
    return sg.DescribeShareGroupOffsetsResponse(tuple(groups), throttle_time_ms, version)


# -- AlterShareGroupOffsets ---------------------------------------------------------------------


def _encode_alter_request(r: sg.AlterShareGroupOffsetsRequest, version: int) -> bytes:
    out = Writer()
    out.compact_string(r.group_id, "group_id")
    out.compact_length(len(r.topics))
    for name, partitions in r.topics:
        out.compact_string(name, "topic_name")
        out.compact_length(len(partitions))
        for index, start_offset in partitions:
            out.int32(index)
            out.int64(start_offset)
            out.no_tagged_fields()
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_alter_request(reader: Reader, version: int) -> sg.AlterShareGroupOffsetsRequest:
    group_id = reader.string("group_id")
    topics = []
    # A topic takes at least 3 bytes (a name, no partitions, no tags), a partition 13.
    for _ in range(reader.compact_length("topics", least_bytes=3)):
        name = reader.string("topic_name")
        partitions = []
        for _ in range(reader.compact_length("partitions", least_bytes=13)):
            partitions.append((reader.int32(), reader.int64()))
            reader.tagged_fields()
        reader.tagged_fields()
        topics.append((name, tuple(partitions)))
    reader.tagged_fields()
    return sg.AlterShareGroupOffsetsRequest(group_id, tuple(topics))


def _encode_alter_response(r: sg.AlterShareGroupOffsetsResponse, version: int) -> bytes:
    out = Writer()
    out.int32(r.throttle_time_ms)
    out.int16(r.error_code)
    out.compact_string(r.error_message, "error_message")
    out.compact_length(len(r.responses))
    for topic in r.responses:
        out.compact_string(topic.topic_name, "topic_name")
        out.uuid(topic.topic_id)
        out.compact_length(len(topic.partitions))
        for p in topic.partitions:
            out.int32(p.partition_index)
            out.int16(p.error_code)
            out.compact_string(p.error_message, "error_message")
            out.no_tagged_fields()
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_alter_response(reader: Reader, version: int) -> sg.AlterShareGroupOffsetsResponse:
    throttle_time_ms = reader.int32()
    error_code = reader.int16()
    error_message = reader.compact_string("error_message", nullable=True)
    topics = []
    # A topic takes at least 19 bytes (a name, its id, no partitions, no tags), a partition 8.
    for _ in range(reader.compact_length("responses", least_bytes=19)):
        name = reader.string("topic_name")
        topic_id = reader.uuid()
        partitions = []
        for _ in range(reader.compact_length("partitions", least_bytes=8)):
            index = reader.int32()
            code = reader.int16()
            message = reader.compact_string("error_message", nullable=True)
            reader.tagged_fields()
            partitions.append(sg.AlteredSharePartition(index, code, message))
        reader.tagged_fields()
        topics.append(sg.AlteredShareGroupOffsetsTopic(name, topic_id, tuple(partitions)))
    reader.tagged_fields()
    return sg.AlterShareGroupOffsetsResponse(
        error_code, error_message, tuple(topics), throttle_time_ms, version
    )


# -- ShareFetch --------------------------------------------------------------------------------


def _encode_fetch_request(r: sg.ShareFetchRequest, version: int) -> bytes:
    out = Writer()
    out.compact_string(r.group_id, "group_id")
    out.compact_string(r.member_id, "member_id")
    out.int32(r.share_session_epoch)
    out.int32(r.max_wait_ms)
    out.int32(r.min_bytes)
    out.int32(r.max_bytes)
    out.int32(r.max_records)
    out.int32(r.batch_size)
    if version >= 2:
        out.int8(r.share_acquire_mode)
        out.boolean(r.is_renew_ack)
    elif r.is_renew_ack:
        raise ProtocolCodecError("is_renew_ack needs ShareFetch v2")
    # v1 has no share_acquire_mode: Kafka drops it there (an ignorable field).
    out.compact_length(len(r.topics))
    for topic in r.topics:
        out.uuid(topic.topic_id)
        out.compact_length(len(topic.partitions))
        for partition in topic.partitions:
            out.int32(partition.partition_index)
            _write_batches(out, partition.acknowledgement_batches)
            out.no_tagged_fields()
        out.no_tagged_fields()
    write_topic_partitions(out, r.forgotten_topics_data)
    out.no_tagged_fields()
    return out.bytes()


def _decode_fetch_request(reader: Reader, version: int) -> sg.ShareFetchRequest:
    group_id = reader.compact_string("group_id", nullable=True)
    member_id = reader.compact_string("member_id", nullable=True)
    share_session_epoch = reader.int32()
    max_wait_ms = reader.int32()
    min_bytes = reader.int32()
    max_bytes = reader.int32()
    max_records = reader.int32()
    batch_size = reader.int32()
    acquire_mode = reader.int8() if version >= 2 else sg.ShareAcquireMode.BATCH_OPTIMIZED
    is_renew_ack = reader.boolean() if version >= 2 else False
    topics = []
    # A topic takes at least 18 bytes (its id, no partitions, no tags); a partition 6.
    for _ in range(reader.compact_length("topics", least_bytes=18)):
        topic_id = reader.uuid()
        partitions = []
        for _ in range(reader.compact_length("topics.partitions", least_bytes=6)):
            index = reader.int32()
            batches = _read_batches(reader)
            reader.tagged_fields()
            partitions.append(sg.ShareFetchPartition(index, batches))
        reader.tagged_fields()
        topics.append(sg.ShareFetchTopic(topic_id, tuple(partitions)))
    forgotten = read_topic_partitions(reader, "forgotten_topics_data")
    reader.tagged_fields()
    return sg.ShareFetchRequest(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=share_session_epoch,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_records=max_records,
        batch_size=batch_size,
        share_acquire_mode=acquire_mode,
        is_renew_ack=is_renew_ack,
        topics=tuple(topics),
        forgotten_topics_data=forgotten,
    )


def _encode_fetch_response(r: sg.ShareFetchResponse, version: int) -> bytes:
    out = Writer()
    out.int32(r.throttle_time_ms)
    out.int16(r.error_code)
    out.compact_string(r.error_message, "error_message")
    out.int32(r.acquisition_lock_timeout_ms)
    out.compact_length(len(r.responses))
    for topic in r.responses:
        out.uuid(topic.topic_id)
        out.compact_length(len(topic.partitions))
        for p in topic.partitions:
            out.int32(p.partition_index)
            out.int16(p.error_code)
            out.compact_string(p.error_message, "error_message")
            out.int16(p.acknowledge_error_code)
            out.compact_string(p.acknowledge_error_message, "acknowledge_error_message")
            _write_leader(out, p.current_leader)
            out.compact_bytes(p.records)
            out.compact_length(len(p.acquired_records))
            for acquired in p.acquired_records:
                out.int64(acquired.first_offset)
                out.int64(acquired.last_offset)
                out.int16(acquired.delivery_count)
                out.no_tagged_fields()
            out.no_tagged_fields()
        out.no_tagged_fields()
    _write_node_endpoints(out, r.node_endpoints)
    out.no_tagged_fields()
    return out.bytes()


def _decode_fetch_response(reader: Reader, version: int) -> sg.ShareFetchResponse:
    throttle_time_ms = reader.int32()
    error_code = reader.int16()
    error_message = reader.compact_string("error_message", nullable=True)
    lock_timeout_ms = reader.int32()
    responses = []
    for _ in range(reader.compact_length("responses", least_bytes=18)):
        topic_id = reader.uuid()
        partitions = []
        # A partition takes at least 22 bytes: index (4), two codes (2 + 2), two null
        # strings (1 + 1), a leader (9), empty records and acquired records (1 + 1), no
        # tags (1). (24 refused a list of empty partitions that fit: found by the fuzzer.)
        for _ in range(reader.compact_length("responses.partitions", least_bytes=22)):
            index = reader.int32()
            code = reader.int16()
            message = reader.compact_string("error_message", nullable=True)
            ack_code = reader.int16()
            ack_message = reader.compact_string("acknowledge_error_message", nullable=True)
            leader = _read_leader(reader)
            # Not nullable from v1 (Kafka's readers refuse a null there too).
            records = reader.compact_bytes("records")
            assert records is not None
            acquired = []
            # An acquired range takes 19 bytes: two offsets, a count, no tags.
            for _ in range(reader.compact_length("acquired_records", least_bytes=19)):
                first = reader.int64()
                last = reader.int64()
                delivery_count = reader.int16()
                reader.tagged_fields()
                acquired.append(sg.AcquiredRecords(first, last, delivery_count))
            reader.tagged_fields()
            partitions.append(
                sg.ShareFetchPartitionData(
                    partition_index=index,
                    error_code=code,
                    error_message=message,
                    acknowledge_error_code=ack_code,
                    acknowledge_error_message=ack_message,
                    current_leader=leader,
                    records=records,
                    acquired_records=tuple(acquired),
                )
            )
        reader.tagged_fields()
        responses.append(sg.ShareFetchTopicResponse(topic_id, tuple(partitions)))
    nodes = _read_node_endpoints(reader)
    reader.tagged_fields()
    return sg.ShareFetchResponse(
        error_code=error_code,
        error_message=error_message,
        acquisition_lock_timeout_ms=lock_timeout_ms,
        responses=tuple(responses),
        node_endpoints=nodes,
        throttle_time_ms=throttle_time_ms,
        version=version,
    )


# -- ShareAcknowledge --------------------------------------------------------------------------


def _encode_acknowledge_request(r: sg.ShareAcknowledgeRequest, version: int) -> bytes:
    out = Writer()
    out.compact_string(r.group_id, "group_id")
    out.compact_string(r.member_id, "member_id")
    out.int32(r.share_session_epoch)
    if version >= 2:
        out.boolean(r.is_renew_ack)
    elif r.is_renew_ack:
        raise ProtocolCodecError("is_renew_ack needs ShareAcknowledge v2")
    out.compact_length(len(r.topics))
    for topic in r.topics:
        out.uuid(topic.topic_id)
        out.compact_length(len(topic.partitions))
        for partition in topic.partitions:
            out.int32(partition.partition_index)
            _write_batches(out, partition.acknowledgement_batches)
            out.no_tagged_fields()
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_acknowledge_request(reader: Reader, version: int) -> sg.ShareAcknowledgeRequest:
    group_id = reader.compact_string("group_id", nullable=True)
    member_id = reader.compact_string("member_id", nullable=True)
    share_session_epoch = reader.int32()
    is_renew_ack = reader.boolean() if version >= 2 else False
    topics = []
    for _ in range(reader.compact_length("topics", least_bytes=18)):
        topic_id = reader.uuid()
        partitions = []
        for _ in range(reader.compact_length("topics.partitions", least_bytes=6)):
            index = reader.int32()
            batches = _read_batches(reader)
            reader.tagged_fields()
            partitions.append(sg.ShareAcknowledgePartition(index, batches))
        reader.tagged_fields()
        topics.append(sg.ShareAcknowledgeTopic(topic_id, tuple(partitions)))
    reader.tagged_fields()
    return sg.ShareAcknowledgeRequest(
        group_id, member_id, share_session_epoch, is_renew_ack, tuple(topics)
    )


def _encode_acknowledge_response(r: sg.ShareAcknowledgeResponse, version: int) -> bytes:
    out = Writer()
    out.int32(r.throttle_time_ms)
    out.int16(r.error_code)
    out.compact_string(r.error_message, "error_message")
    if version >= 2:
        out.int32(r.acquisition_lock_timeout_ms)
    # v1 has no acquisition_lock_timeout_ms: Kafka drops it there (an ignorable field).
    out.compact_length(len(r.responses))
    for topic in r.responses:
        out.uuid(topic.topic_id)
        out.compact_length(len(topic.partitions))
        for p in topic.partitions:
            out.int32(p.partition_index)
            out.int16(p.error_code)
            out.compact_string(p.error_message, "error_message")
            _write_leader(out, p.current_leader)
            out.no_tagged_fields()
        out.no_tagged_fields()
    _write_node_endpoints(out, r.node_endpoints)
    out.no_tagged_fields()
    return out.bytes()


def _decode_acknowledge_response(reader: Reader, version: int) -> sg.ShareAcknowledgeResponse:
    throttle_time_ms = reader.int32()
    error_code = reader.int16()
    error_message = reader.compact_string("error_message", nullable=True)
    lock_timeout_ms = reader.int32() if version >= 2 else 0
    responses = []
    for _ in range(reader.compact_length("responses", least_bytes=18)):
        topic_id = reader.uuid()
        partitions = []
        # A partition takes at least 17 bytes: index, code, a null string, a leader, no tags.
        for _ in range(reader.compact_length("responses.partitions", least_bytes=17)):
            index = reader.int32()
            code = reader.int16()
            message = reader.compact_string("error_message", nullable=True)
            leader = _read_leader(reader)
            reader.tagged_fields()
            partitions.append(sg.ShareAcknowledgePartitionData(index, code, message, leader))
        reader.tagged_fields()
        responses.append(sg.ShareAcknowledgeTopicResponse(topic_id, tuple(partitions)))
    nodes = _read_node_endpoints(reader)
    reader.tagged_fields()
    return sg.ShareAcknowledgeResponse(
        error_code=error_code,
        error_message=error_message,
        acquisition_lock_timeout_ms=lock_timeout_ms,
        responses=tuple(responses),
        node_endpoints=nodes,
        throttle_time_ms=throttle_time_ms,
        version=version,
    )


# -- records -----------------------------------------------------------------------------------


def decode_records(data: bytes, *, check_crcs: bool = False) -> tuple[sg.ShareRecord, ...]:
    """The records of a ShareFetch partition's ``records``, in offset order, without the
    control records of transactions. A batch cut short at the end (the broker may send one
    past ``max_bytes``) is left out, as Kafka's consumers leave it.

    ``check_crcs``: verify each batch's CRC first, as Kafka's ``check.crcs`` does (off by
    default: kafka-python computes CRC-32C in Python, which costs about a second a MB).

    Raises:
        ProtocolCodecError: a batch is malformed, fails its CRC, or is compressed with a
            codec this Python lacks.
    """
    return decode_batches(data, check_crcs=check_crcs)[0]


def decode_batches(
    data: bytes, *, check_crcs: bool = False
) -> tuple[tuple[sg.ShareRecord, ...], int]:
    """As :func:`decode_records`, and the last offset the whole batches read cover (control
    batches included; -1 if none): an offset past it was in no batch read whole, so it
    cannot be told to hold no record.

    Raises:
        ProtocolCodecError: as :func:`decode_records`.
    """
    fields, through = decode_fields(data, check_crcs)
    return tuple(sg.ShareRecord(*f) for f in fields), through


def acquired(partition: sg.ShareFetchPartitionData) -> tuple[tuple[sg.ShareRecord, int], ...]:
    """Each record of ``partition`` that this member acquired, with its delivery count (the
    batches may also hold records it did not acquire, which it must not process).

    Raises:
        ProtocolCodecError: as :func:`decode_records`.
    """
    return acquired_and_extent(partition)[0]


def acquired_and_extent(
    partition: sg.ShareFetchPartitionData,
) -> tuple[tuple[tuple[sg.ShareRecord, int], ...], int]:
    """As :func:`acquired`, and the last offset the whole batches read cover
    (:func:`decode_batches`).

    Raises:
        ProtocolCodecError: as :func:`decode_records`.
    """
    groups, through = acquired_groups(partition)
    return tuple((sg.ShareRecord(*f), count) for fields, count in groups for f in fields), through


def acquired_groups(
    partition: sg.ShareFetchPartitionData,
) -> tuple[list[tuple[list[RecordFields], int]], int]:
    """As :func:`acquired_and_extent`, the records as their fields (:data:`RecordFields`),
    one group per acquired range with the range's delivery count, in offset order (the
    ranges do not overlap): the share sessions build their own records from them, without
    one more object each.

    Raises:
        ProtocolCodecError: as :func:`decode_records`.
    """
    fields, through = decode_fields(partition.records)
    ranges = partition.acquired_records
    if len(ranges) == 1 and fields:  # the usual answer: one range for the partition
        (r,) = ranges
        # The batches come in offset order: the ends tell whether all are in the range.
        if r.first_offset <= fields[0][0] and fields[-1][0] <= r.last_offset:
            return [(fields, r.delivery_count)], through
    return [
        ([f for f in fields if r.first_offset <= f[0] <= r.last_offset], r.delivery_count)
        for r in sorted(ranges, key=lambda r: r.first_offset)
    ], through


# -- dispatch ----------------------------------------------------------------------------------


class _Api:
    """What the codec knows of one message type."""

    def __init__(
        self,
        name: str,
        api_key: int,
        versions: tuple[int, int],
        encode: Callable[[Any, int], bytes],
        decode: Callable[[Reader, int], Any],
    ) -> None:
        self.name = name
        self.api_key = api_key
        self.min_version, self.max_version = versions
        self.encode = encode
        self.decode = decode


def _apis() -> dict[type, _Api]:
    # The versions spoken: from SHARE_MIN_VERSION (v0 was Kafka 4.0's early access) to the
    # newest, except where v0 is the only version.
    table: list[tuple[type, type, int, int, tuple[Callable[..., Any], ...]]] = [
        (
            sg.ShareGroupHeartbeatRequest,
            sg.ShareGroupHeartbeatResponse,
            SHARE_GROUP_HEARTBEAT_KEY,
            sg.SHARE_GROUP_HEARTBEAT_MAX_VERSION,
            (
                _encode_heartbeat_request,
                _decode_heartbeat_request,
                encode_heartbeat_answer,
                _decode_heartbeat_response,
            ),
        ),
        (
            sg.ShareGroupDescribeRequest,
            sg.ShareGroupDescribeResponse,
            SHARE_GROUP_DESCRIBE_KEY,
            sg.SHARE_GROUP_DESCRIBE_MAX_VERSION,
            (
                _encode_describe_request,
                _decode_describe_request,
                _encode_describe_response,
                _decode_describe_response,
            ),
        ),
        (
            sg.ShareFetchRequest,
            sg.ShareFetchResponse,
            SHARE_FETCH_KEY,
            sg.SHARE_FETCH_MAX_VERSION,
            (
                _encode_fetch_request,
                _decode_fetch_request,
                _encode_fetch_response,
                _decode_fetch_response,
            ),
        ),
        (
            sg.ShareAcknowledgeRequest,
            sg.ShareAcknowledgeResponse,
            SHARE_ACKNOWLEDGE_KEY,
            sg.SHARE_ACKNOWLEDGE_MAX_VERSION,
            (
                _encode_acknowledge_request,
                _decode_acknowledge_request,
                _encode_acknowledge_response,
                _decode_acknowledge_response,
            ),
        ),
        (
            sg.DescribeShareGroupOffsetsRequest,
            sg.DescribeShareGroupOffsetsResponse,
            DESCRIBE_SHARE_GROUP_OFFSETS_KEY,
            sg.DESCRIBE_SHARE_GROUP_OFFSETS_MAX_VERSION,
            (
                _encode_offsets_request,
                _decode_offsets_request,
                _encode_offsets_response,
                _decode_offsets_response,
            ),
        ),
        (
            sg.AlterShareGroupOffsetsRequest,
            sg.AlterShareGroupOffsetsResponse,
            ALTER_SHARE_GROUP_OFFSETS_KEY,
            sg.ALTER_SHARE_GROUP_OFFSETS_VERSION,
            (
                _encode_alter_request,
                _decode_alter_request,
                _encode_alter_response,
                _decode_alter_response,
            ),
        ),
    ]
    apis = {}
    for request, response, key, newest, (enc_req, dec_req, enc_resp, dec_resp) in table:
        versions = (min(sg.SHARE_MIN_VERSION, newest), newest)
        apis[request] = _Api(request.__name__, key, versions, enc_req, dec_req)
        apis[response] = _Api(response.__name__, key, versions, enc_resp, dec_resp)
    return apis


_APIS: Final = _apis()
_REQUESTS: Final[dict[int, type[Request]]] = {
    SHARE_GROUP_HEARTBEAT_KEY: sg.ShareGroupHeartbeatRequest,
    SHARE_GROUP_DESCRIBE_KEY: sg.ShareGroupDescribeRequest,
    SHARE_FETCH_KEY: sg.ShareFetchRequest,
    SHARE_ACKNOWLEDGE_KEY: sg.ShareAcknowledgeRequest,
    DESCRIBE_SHARE_GROUP_OFFSETS_KEY: sg.DescribeShareGroupOffsetsRequest,
    ALTER_SHARE_GROUP_OFFSETS_KEY: sg.AlterShareGroupOffsetsRequest,
}
_RESPONSES: Final[dict[type[Request], type[Response]]] = {
    sg.ShareGroupHeartbeatRequest: sg.ShareGroupHeartbeatResponse,
    sg.ShareGroupDescribeRequest: sg.ShareGroupDescribeResponse,
    sg.ShareFetchRequest: sg.ShareFetchResponse,
    sg.ShareAcknowledgeRequest: sg.ShareAcknowledgeResponse,
    sg.DescribeShareGroupOffsetsRequest: sg.DescribeShareGroupOffsetsResponse,
    sg.AlterShareGroupOffsetsRequest: sg.AlterShareGroupOffsetsResponse,
}


def _known(kind: type) -> _Api:
    api = _APIS.get(kind)
    if api is None:
        raise TypeError(f"{kind.__name__} is not a share-group message")
    return api


def _api(kind: type, version: int) -> _Api:
    api = _known(kind)
    if not api.min_version <= version <= api.max_version:
        raise ProtocolCodecError(
            f"{api.name} has no version {version} ({api.min_version}-{api.max_version})"
        )
    return api


def api_key(kind: type[Message]) -> int:
    """The Kafka API key of a message type (76 to 79, 90, 91)."""
    return _known(kind).api_key


def min_version(kind: type[Message]) -> int:
    """The oldest version of a message type this codec speaks."""
    return _known(kind).min_version


def max_version(kind: type[Message]) -> int:
    """The newest version of a message type this codec speaks."""
    return _known(kind).max_version


def response_type(kind: type[Request]) -> type[Response]:
    """The response type of a request type."""
    return _RESPONSES[kind]


def encode(message: Message, version: int) -> bytes:
    """The body of ``message`` in ``version``.

    Raises:
        ProtocolCodecError: a value does not fit the wire (a number out of range, a string
            longer than 32767 bytes) or the version (``is_renew_ack`` before v2).
    """
    api = _api(type(message), version)
    try:
        return api.encode(message, version)
    except struct.error as e:
        raise ProtocolCodecError(f"{api.name} v{version}: a number out of range ({e})") from e


def decode(kind: type[M], data: bytes | bytearray | memoryview, version: int) -> M:
    """The message of type ``kind`` (version ``version``) that ``data`` holds, all of it.

    Raises:
        ProtocolCodecError: ``data`` is truncated, malformed, or longer than the message.
    """
    api = _api(kind, version)
    reader = Reader(data, f"{api.name} v{version}")
    message = api.decode(reader, version)
    reader.done()
    return cast(M, message)


def encode_request(
    request: Request, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v2 and the body: a request as it follows its size on the wire."""
    header = encode_request_header(api_key(type(request)), version, correlation_id, client_id)
    return header + encode(request, version)


def decode_request(data: bytes | bytearray | memoryview) -> tuple[int, str | None, Request]:
    """A whole request after its size: (correlation id, client id, request).

    Raises:
        ProtocolCodecError: not a request of these APIs, or a malformed one.
    """
    reader = Reader(data, "request header")
    key, version, correlation_id, client_id = decode_request_header(reader)
    kind = _REQUESTS.get(key)
    if kind is None:
        raise ProtocolCodecError(f"API key {key} is not a share-group request")
    body = memoryview(data)[reader.position :]
    return correlation_id, client_id, decode(kind, body, version)


def encode_response(response: Response, version: int, correlation_id: int) -> bytes:
    """Response header v1 and the body: a response as it follows its size on the wire."""
    return encode_response_header(correlation_id) + encode(response, version)


def decode_response(
    kind: type[M], data: bytes | bytearray | memoryview, version: int
) -> tuple[int, M]:
    """A whole response after its size: (correlation id, response).

    Raises:
        ProtocolCodecError: truncated or malformed.
    """
    reader = Reader(data, "response header")
    correlation_id = decode_response_header(reader)
    return correlation_id, decode(kind, memoryview(data)[reader.position :], version)
