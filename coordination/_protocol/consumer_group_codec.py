"""Encoding and decoding of the consumer group protocol's messages (``consumer_group``).

Internal, no compatibility guarantee. Written from Kafka's message definitions: every
version of both APIs is flexible (compact strings and arrays, a tagged field section after
each struct); a nullable struct (the heartbeat's ``Assignment``) is preceded by a byte, -1
for null and 1 otherwise. :func:`encode` and :func:`decode` handle the message bodies,
:func:`encode_request` and :func:`decode_response` the whole frame after its size (header and
body). Decoders raise only :class:`~coordination.errors.ProtocolCodecError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar, cast, overload

from ..errors import ProtocolCodecError
from . import consumer_group as cg
from .wire import (
    Reader,
    Writer,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)

CONSUMER_GROUP_HEARTBEAT_KEY: Final = 68
CONSUMER_GROUP_DESCRIBE_KEY: Final = 69

Message = (
    cg.ConsumerGroupHeartbeatRequest
    | cg.ConsumerGroupHeartbeatResponse
    | cg.ConsumerGroupDescribeRequest
    | cg.ConsumerGroupDescribeResponse
)
M = TypeVar("M", bound=Message)


# -- ConsumerGroupHeartbeat -----------------------------------------------------------------


def write_topic_partitions(out: Writer, value: tuple[cg.TopicIdPartitions, ...] | None) -> None:
    """Partitions by topic id (also the share-group APIs' struct); None as a null array."""
    out.compact_length(None if value is None else len(value))
    for topic in value or ():
        out.uuid(topic.topic_id)
        out.compact_length(len(topic.partitions))
        for partition in topic.partitions:
            out.int32(partition)
        out.no_tagged_fields()


@overload
def read_topic_partitions(reader: Reader, field: str) -> tuple[cg.TopicIdPartitions, ...]: ...
@overload
def read_topic_partitions(
    reader: Reader, field: str, *, nullable: bool
) -> tuple[cg.TopicIdPartitions, ...] | None: ...
def read_topic_partitions(
    reader: Reader, field: str, *, nullable: bool = False
) -> tuple[cg.TopicIdPartitions, ...] | None:
    """Partitions by topic id (also the share-group APIs' struct)."""
    # Each topic takes at least 18 bytes: its id, an empty array and no tags.
    count = reader.compact_length(field, nullable=nullable, least_bytes=18)
    if count < 0:
        return None
    topics = []
    for _ in range(count):
        topic_id = reader.uuid()
        partitions = reader.int32_array(f"{field}.partitions")
        reader.tagged_fields()
        topics.append(cg.TopicIdPartitions(topic_id, partitions))
    return tuple(topics)


def _encode_heartbeat_request(r: cg.ConsumerGroupHeartbeatRequest, version: int) -> bytes:
    out = Writer()
    out.compact_string(r.group_id, "group_id")
    out.compact_string(r.member_id, "member_id")
    out.int32(r.member_epoch)
    out.compact_string(r.instance_id, "instance_id")
    out.compact_string(r.rack_id, "rack_id")
    out.int32(r.rebalance_timeout_ms)
    names = r.subscribed_topic_names
    out.compact_length(None if names is None else len(names))
    for name in names or ():
        out.compact_string(name, "subscribed_topic_names")
    if version >= 1:
        out.compact_string(r.subscribed_topic_regex, "subscribed_topic_regex")
    elif r.subscribed_topic_regex is not None:
        raise ProtocolCodecError("subscribed_topic_regex needs ConsumerGroupHeartbeat v1")
    out.compact_string(r.server_assignor, "server_assignor")
    write_topic_partitions(out, r.topic_partitions)
    out.no_tagged_fields()
    return out.bytes()


def _decode_heartbeat_request(reader: Reader, version: int) -> cg.ConsumerGroupHeartbeatRequest:
    group_id = reader.string("group_id")
    member_id = reader.string("member_id")
    member_epoch = reader.int32()
    instance_id = reader.compact_string("instance_id", nullable=True)
    rack_id = reader.compact_string("rack_id", nullable=True)
    rebalance_timeout_ms = reader.int32()
    names = reader.string_array("subscribed_topic_names", nullable=True)
    regex = reader.compact_string("subscribed_topic_regex", nullable=True) if version else None
    server_assignor = reader.compact_string("server_assignor", nullable=True)
    owned = read_topic_partitions(reader, "topic_partitions", nullable=True)
    reader.tagged_fields()
    return cg.ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=member_epoch,
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        server_assignor=server_assignor,
        topic_partitions=owned,
    )


class HeartbeatAnswer(Protocol):
    """The fields of a ConsumerGroupHeartbeat or ShareGroupHeartbeat answer: the two are
    the same on the wire."""

    @property
    def throttle_time_ms(self) -> int: ...
    @property
    def error_code(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def member_id(self) -> str | None: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def heartbeat_interval_ms(self) -> int: ...
    @property
    def assignment(self) -> tuple[cg.TopicIdPartitions, ...] | None: ...


_Answer = TypeVar("_Answer", bound=HeartbeatAnswer)


def encode_heartbeat_answer(r: HeartbeatAnswer, version: int) -> bytes:
    out = Writer()
    out.int32(r.throttle_time_ms)
    out.int16(r.error_code)
    out.compact_string(r.error_message, "error_message")
    out.compact_string(r.member_id, "member_id")
    out.int32(r.member_epoch)
    out.int32(r.heartbeat_interval_ms)
    if r.assignment is None:
        out.int8(-1)
    else:
        out.int8(1)
        write_topic_partitions(out, r.assignment)
        out.no_tagged_fields()  # the Assignment struct's
    out.no_tagged_fields()
    return out.bytes()


def decode_heartbeat_answer(
    reader: Reader, version: int, answer_type: Callable[..., _Answer]
) -> _Answer:
    throttle_time_ms = reader.int32()
    error_code = reader.int16()
    error_message = reader.compact_string("error_message", nullable=True)
    member_id = reader.compact_string("member_id", nullable=True)
    member_epoch = reader.int32()
    heartbeat_interval_ms = reader.int32()
    assignment = None
    if reader.int8() >= 0:
        assignment = read_topic_partitions(reader, "assignment.topic_partitions")
        reader.tagged_fields()
    reader.tagged_fields()
    return answer_type(
        error_code=error_code,
        error_message=error_message,
        member_id=member_id,
        member_epoch=member_epoch,
        heartbeat_interval_ms=heartbeat_interval_ms,
        assignment=assignment,
        throttle_time_ms=throttle_time_ms,
        version=version,
    )


def _decode_heartbeat_response(reader: Reader, version: int) -> cg.ConsumerGroupHeartbeatResponse:
    return decode_heartbeat_answer(reader, version, cg.ConsumerGroupHeartbeatResponse)


# -- ConsumerGroupDescribe ------------------------------------------------------------------


def _encode_describe_request(r: cg.ConsumerGroupDescribeRequest, version: int) -> bytes:
    out = Writer()
    out.compact_length(len(r.group_ids))
    for group_id in r.group_ids:
        out.compact_string(group_id, "group_ids")
    out.boolean(r.include_authorized_operations)
    out.no_tagged_fields()
    return out.bytes()


def _decode_describe_request(reader: Reader, version: int) -> cg.ConsumerGroupDescribeRequest:
    group_ids = reader.string_array("group_ids")
    include = reader.boolean()
    reader.tagged_fields()
    assert group_ids is not None
    return cg.ConsumerGroupDescribeRequest(group_ids, include)


def write_described_assignment(out: Writer, value: tuple[cg.DescribedTopicPartitions, ...]) -> None:
    out.compact_length(len(value))
    for topic in value:
        out.uuid(topic.topic_id)
        out.compact_string(topic.topic_name, "topic_name")
        out.compact_length(len(topic.partitions))
        for partition in topic.partitions:
            out.int32(partition)
        out.no_tagged_fields()
    out.no_tagged_fields()  # the Assignment struct's


def read_described_assignment(
    reader: Reader, field: str
) -> tuple[cg.DescribedTopicPartitions, ...]:
    # Each topic takes at least 19 bytes: its id, an empty name and array, and no tags.
    count = reader.compact_length(field, least_bytes=19)
    topics = []
    for _ in range(count):
        topic_id = reader.uuid()
        name = reader.string(f"{field}.topic_name")
        partitions = reader.int32_array(f"{field}.partitions")
        reader.tagged_fields()
        topics.append(cg.DescribedTopicPartitions(topic_id, name, partitions))
    reader.tagged_fields()
    return tuple(topics)


def _encode_describe_response(r: cg.ConsumerGroupDescribeResponse, version: int) -> bytes:
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
            out.compact_string(member.instance_id, "instance_id")
            out.compact_string(member.rack_id, "rack_id")
            out.int32(member.member_epoch)
            out.compact_string(member.client_id, "client_id")
            out.compact_string(member.client_host, "client_host")
            out.compact_length(len(member.subscribed_topic_names))
            for name in member.subscribed_topic_names:
                out.compact_string(name, "subscribed_topic_names")
            out.compact_string(member.subscribed_topic_regex, "subscribed_topic_regex")
            write_described_assignment(out, member.assignment)
            write_described_assignment(out, member.target_assignment)
            if version >= 1:
                out.int8(member.member_type)
            # v0 has no member_type; Kafka drops it there (an ignorable field).
            out.no_tagged_fields()
        out.int32(group.authorized_operations)
        out.no_tagged_fields()
    out.no_tagged_fields()
    return out.bytes()


def _decode_describe_response(reader: Reader, version: int) -> cg.ConsumerGroupDescribeResponse:
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
        # A member takes at least 16 bytes: nine fields of a byte or more, an epoch.
        for _ in range(reader.compact_length("members", least_bytes=16)):
            member_id = reader.string("member_id")
            instance_id = reader.compact_string("instance_id", nullable=True)
            rack_id = reader.compact_string("rack_id", nullable=True)
            member_epoch = reader.int32()
            client_id = reader.string("client_id")
            client_host = reader.string("client_host")
            names = reader.string_array("subscribed_topic_names")
            assert names is not None
            regex = reader.compact_string("subscribed_topic_regex", nullable=True)
            assignment = read_described_assignment(reader, "assignment")
            target = read_described_assignment(reader, "target_assignment")
            member_type = reader.int8() if version >= 1 else -1
            reader.tagged_fields()
            members.append(
                cg.DescribedConsumerGroupMember(
                    member_id=member_id,
                    instance_id=instance_id,
                    rack_id=rack_id,
                    member_epoch=member_epoch,
                    client_id=client_id,
                    client_host=client_host,
                    subscribed_topic_names=names,
                    subscribed_topic_regex=regex,
                    assignment=assignment,
                    target_assignment=target,
                    member_type=member_type,
                )
            )
        authorized_operations = reader.int32()
        reader.tagged_fields()
        groups.append(
            cg.DescribedConsumerGroup(
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
    return cg.ConsumerGroupDescribeResponse(tuple(groups), throttle_time_ms, version)


# -- dispatch -------------------------------------------------------------------------------


class _Api:
    """What the codec knows of one message type."""

    def __init__(
        self,
        name: str,
        api_key: int,
        max_version: int,
        encode: Callable[[Any, int], bytes],
        decode: Callable[[Reader, int], Any],
    ) -> None:
        self.name = name
        self.api_key = api_key
        self.max_version = max_version
        self.encode = encode
        self.decode = decode


_APIS: Final[dict[type, _Api]] = {
    cg.ConsumerGroupHeartbeatRequest: _Api(
        "ConsumerGroupHeartbeatRequest",
        CONSUMER_GROUP_HEARTBEAT_KEY,
        cg.CONSUMER_GROUP_HEARTBEAT_MAX_VERSION,
        _encode_heartbeat_request,
        _decode_heartbeat_request,
    ),
    cg.ConsumerGroupHeartbeatResponse: _Api(
        "ConsumerGroupHeartbeatResponse",
        CONSUMER_GROUP_HEARTBEAT_KEY,
        cg.CONSUMER_GROUP_HEARTBEAT_MAX_VERSION,
        encode_heartbeat_answer,
        _decode_heartbeat_response,
    ),
    cg.ConsumerGroupDescribeRequest: _Api(
        "ConsumerGroupDescribeRequest",
        CONSUMER_GROUP_DESCRIBE_KEY,
        cg.CONSUMER_GROUP_DESCRIBE_MAX_VERSION,
        _encode_describe_request,
        _decode_describe_request,
    ),
    cg.ConsumerGroupDescribeResponse: _Api(
        "ConsumerGroupDescribeResponse",
        CONSUMER_GROUP_DESCRIBE_KEY,
        cg.CONSUMER_GROUP_DESCRIBE_MAX_VERSION,
        _encode_describe_response,
        _decode_describe_response,
    ),
}


def _api(kind: type, version: int) -> _Api:
    api = _APIS.get(kind)
    if api is None:
        raise TypeError(f"{kind.__name__} is not a consumer group protocol message")
    if not 0 <= version <= api.max_version:
        raise ProtocolCodecError(f"{api.name} has no version {version} (0-{api.max_version})")
    return api


def api_key(kind: type[Message]) -> int:
    """The Kafka API key of a message type (68 or 69)."""
    return _api(kind, 0).api_key


def max_version(kind: type[Message]) -> int:
    """The newest version of a message type this codec speaks."""
    return _api(kind, 0).max_version


def encode(message: Message, version: int) -> bytes:
    """The body of ``message`` in ``version``.

    Raises:
        ProtocolCodecError: a value does not fit the wire (a number out of range, a string
            longer than 32767 bytes) or the version (a topic regex before v1).
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
    request: cg.ConsumerGroupHeartbeatRequest | cg.ConsumerGroupDescribeRequest,
    version: int,
    correlation_id: int,
    client_id: str | None,
) -> bytes:
    """Request header v2 and the body: a request as it follows its size on the wire."""
    header = encode_request_header(api_key(type(request)), version, correlation_id, client_id)
    return header + encode(request, version)


def decode_request(
    data: bytes | bytearray | memoryview,
) -> tuple[int, str | None, cg.ConsumerGroupHeartbeatRequest | cg.ConsumerGroupDescribeRequest]:
    """A whole request after its size: (correlation id, client id, request).

    Raises:
        ProtocolCodecError: not a request of these APIs, or a malformed one.
    """
    reader = Reader(data, "request header")
    key, version, correlation_id, client_id = decode_request_header(reader)
    kinds: dict[int, type[cg.ConsumerGroupHeartbeatRequest | cg.ConsumerGroupDescribeRequest]] = {
        CONSUMER_GROUP_HEARTBEAT_KEY: cg.ConsumerGroupHeartbeatRequest,
        CONSUMER_GROUP_DESCRIBE_KEY: cg.ConsumerGroupDescribeRequest,
    }
    kind = kinds.get(key)
    if kind is None:
        raise ProtocolCodecError(f"API key {key} is not a consumer group protocol request")
    body = memoryview(data)[reader.position :]
    return correlation_id, client_id, decode(kind, body, version)


def encode_response(
    response: cg.ConsumerGroupHeartbeatResponse | cg.ConsumerGroupDescribeResponse,
    version: int,
    correlation_id: int,
) -> bytes:
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
