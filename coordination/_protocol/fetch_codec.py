"""Fetch (API key 1) requests and responses, versions 12 to 18, for a consumer.

Internal, no compatibility guarantee. Written from Kafka's ``FetchRequest.json`` and
``FetchResponse.json``: every version here is flexible (KIP-482); topics are named up to
v12 and identified by topic id from v13 (KIP-516); the request's ``ReplicaId`` leaves the
body in v15 for a tagged ``ReplicaState``, which a consumer leaves out, as it leaves out
every tagged field only a follower sends (``ClusterId``, ``ReplicaDirectoryId``,
``HighWatermark``); a response partition's tagged fields are ``DivergingEpoch`` (0),
``CurrentLeader`` (1) and ``SnapshotId`` (2), and from v16 the response ends with a tagged
``NodeEndpoints`` (0). A request is encoded with its header, a response decoded from the
bytes after the frame's size; :func:`decode_response` raises only
:class:`~coordination.errors.ProtocolCodecError`.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Final

from .wire import Reader, Writer, decode_response_header, encode_request_header

FETCH_KEY: Final = 1
MIN_VERSION: Final = 12
MAX_VERSION: Final = 18
# Kafka's IsolationLevel values.
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
# A consumer's FetchRequest partition: partition, current leader epoch, fetch offset, last
# fetched epoch, log start offset (-1: a follower's field), partition max bytes.
_PARTITION: Final = struct.Struct(">iiqiqi")
# The topic id of a topic whose id is unknown (v12 requests name topics instead).
NO_TOPIC_ID: Final = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition a FetchRequest reads (Kafka's ``FetchPartition``)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    """-1: not checked by the broker (no KIP-320 fencing)."""
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchTopic:
    """A topic of a FetchRequest: its name (v12) or id (v13+) and its partitions."""

    topic: str
    topic_id: uuid.UUID
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    """Partitions an incremental FetchRequest removes from its session."""

    topic: str
    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A consumer's FetchRequest (``ReplicaId`` -1)."""

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    """0 with epoch 0: open a session; 0 with epoch -1: no session (a full fetch)."""
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten: tuple[ForgottenTopic, ...] = ()
    rack_id: str = ""


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """``DivergingEpoch`` (KIP-320 truncation detection; only with ``last_fetched_epoch``)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionData:
    """One partition of a FetchResponse (Kafka's ``PartitionData``)."""

    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    preferred_read_replica: int = -1
    records: bytes | None = None
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch | None = None
    """Set with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH when the broker knows the
    new leader (KIP-951)."""


@dataclass(frozen=True, slots=True)
class FetchTopicResponse:
    """A topic of a FetchResponse: its name (v12; None from v13) or id (v13+; None in v12)."""

    topic: str | None
    topic_id: uuid.UUID | None
    partitions: tuple[FetchPartitionData, ...]


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class FetchResponse:
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: tuple[FetchTopicResponse, ...]
    node_endpoints: tuple[NodeEndpoint, ...] = field(default=())


def encode_request(
    request: FetchRequest, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The request with its header (v2), without the frame's size.

    Raises:
        ValueError: ``version`` is not one of 12 to 18.
    """
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here ({MIN_VERSION}-{MAX_VERSION})")
    out = Writer()
    if version <= 14:
        out.int32(-1)  # ReplicaId: a consumer
    out.int32(request.max_wait_ms)
    out.int32(request.min_bytes)
    out.int32(request.max_bytes)
    out.int8(request.isolation_level)
    out.int32(request.session_id)
    out.int32(request.session_epoch)
    out.compact_length(len(request.topics))
    by_id = version >= 13
    for topic in request.topics:
        if by_id:
            out.uuid(topic.topic_id)
        else:
            out.compact_string(topic.topic, "topic")
        out.compact_length(len(topic.partitions))
        for p in topic.partitions:
            out.raw(
                _PARTITION.pack(
                    p.partition,
                    p.current_leader_epoch,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    -1,
                    p.partition_max_bytes,
                )
            )
            out.no_tagged_fields()
        out.no_tagged_fields()
    out.compact_length(len(request.forgotten))
    for forgotten in request.forgotten:
        if by_id:
            out.uuid(forgotten.topic_id)
        else:
            out.compact_string(forgotten.topic, "topic")
        out.compact_length(len(forgotten.partitions))
        for index in forgotten.partitions:
            out.int32(index)
        out.no_tagged_fields()
    out.compact_string(request.rack_id, "rack_id")
    out.no_tagged_fields()
    return encode_request_header(FETCH_KEY, version, correlation_id, client_id) + out.bytes()


def decode_response(
    payload: bytes | bytearray | memoryview, version: int
) -> tuple[int, FetchResponse]:
    """(correlation id, response) from the bytes after the frame's size (header v1 first).

    Raises:
        ProtocolCodecError: the bytes are not a FetchResponse of ``version``.
    """
    reader = Reader(payload, f"FetchResponse v{version}")
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise reader.fail(f"Fetch v{version} is not decoded here ({MIN_VERSION}-{MAX_VERSION})")
    correlation_id = decode_response_header(reader)
    throttle_time_ms = reader.int32()
    error_code = reader.int16()
    session_id = reader.int32()
    # A topic takes at least 3 bytes (v12: a name's length, two empty sections), 18 from v13.
    count = reader.compact_length("responses", least_bytes=3 if version < 13 else 18)
    topics = tuple(_read_topic(reader, version) for _ in range(count))
    endpoints: tuple[NodeEndpoint, ...] = ()
    for _ in range(_tag_count(reader)):
        tag = reader.uvarint()
        value = reader.raw(reader.uvarint())
        if tag == 0 and version >= 16:
            endpoints = _read_endpoints(Reader(value, "FetchResponse NodeEndpoints"))
    reader.done()
    return correlation_id, FetchResponse(
        throttle_time_ms, error_code, session_id, topics, endpoints
    )


def _tag_count(reader: Reader) -> int:
    count = reader.uvarint()
    if count * 2 > reader.remaining():
        raise reader.fail(f"{count} tagged fields announced, more than the bytes left hold")
    return count


def _read_topic(reader: Reader, version: int) -> FetchTopicResponse:
    name: str | None = None
    topic_id: uuid.UUID | None = None
    if version >= 13:
        topic_id = reader.uuid()
    else:
        name = reader.string("topic")
    # A partition takes at least 37 bytes (its fixed fields, two lengths, a tag count).
    count = reader.compact_length("partitions", least_bytes=37)
    partitions = tuple(_read_partition(reader) for _ in range(count))
    reader.tagged_fields()
    return FetchTopicResponse(name, topic_id, partitions)


def _read_partition(reader: Reader) -> FetchPartitionData:
    index = reader.int32()
    error_code = reader.int16()
    high_watermark = reader.int64()
    last_stable_offset = reader.int64()
    log_start_offset = reader.int64()
    aborted: tuple[AbortedTransaction, ...] | None = None
    count = reader.compact_length("aborted_transactions", nullable=True, least_bytes=17)
    if count >= 0:
        found = []
        for _ in range(count):
            found.append(AbortedTransaction(reader.int64(), reader.int64()))
            reader.tagged_fields()
        aborted = tuple(found)
    preferred = reader.int32()
    records = reader.compact_bytes("records", nullable=True)
    diverging: EpochEndOffset | None = None
    leader: LeaderIdAndEpoch | None = None
    for _ in range(_tag_count(reader)):
        tag = reader.uvarint()
        value = Reader(reader.raw(reader.uvarint()), "FetchResponse partition tagged field")
        if tag == 0:
            diverging = EpochEndOffset(value.int32(), value.int64())
            value.tagged_fields()
            value.done()
        elif tag == 1:
            leader = LeaderIdAndEpoch(value.int32(), value.int32())
            value.tagged_fields()
            value.done()
        # SnapshotId (2) is for followers; an unknown tag is ignorable by definition.
    return FetchPartitionData(
        index,
        error_code,
        high_watermark,
        last_stable_offset,
        log_start_offset,
        aborted,
        preferred,
        records,
        diverging,
        leader,
    )


def _read_endpoints(reader: Reader) -> tuple[NodeEndpoint, ...]:
    count = reader.compact_length("node_endpoints", least_bytes=10)
    endpoints = []
    for _ in range(count):
        node_id = reader.int32()
        host = reader.string("host")
        port = reader.int32()
        rack = reader.compact_string("rack", nullable=True)
        reader.tagged_fields()
        endpoints.append(NodeEndpoint(node_id, host, port, rack))
    reader.done()  # the tagged field's value is the array alone
    return tuple(endpoints)
