"""The messages of Kafka's share groups (KIP-932, "queues for Kafka"): ShareGroupHeartbeat (API
key 76), ShareGroupDescribe (77), ShareFetch (78), ShareAcknowledge (79), and the admin's
DescribeShareGroupOffsets (90) and AlterShareGroupOffsets (91).

Internal, no compatibility guarantee. Field names are those of Kafka's message definitions
(``ShareFetchRequest.json`` and friends) in snake_case; topics are named by id
(``uuid.UUID``). ``share_group_codec`` encodes and decodes them (kafka-python has no classes
for these APIs). Version 0 of each was Kafka 4.0's early access and was removed in 4.1: v1
is the first stable version, and the oldest spoken here.

A share group's member heartbeats to the group coordinator (membership and the broker's
assignment, as in KIP-848 but with no assignor choice), and fetches from and acknowledges to
each partition's leader, in a share session per broker (``share_session_epoch``).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Final

from .consumer_group import DescribedTopicPartitions, TopicIdPartitions

SHARE_MIN_VERSION: Final = 1
"""The oldest version of every share-group API spoken here (v0: Kafka 4.0's early access,
which Kafka 4.1 removed)."""
SHARE_GROUP_HEARTBEAT_MAX_VERSION: Final = 1
SHARE_GROUP_DESCRIBE_MAX_VERSION: Final = 1
SHARE_FETCH_MAX_VERSION: Final = 2
"""v2 (Kafka 4.2, KIP-1206 and KIP-1222) adds ``share_acquire_mode``, ``is_renew_ack`` and
the RENEW acknowledgement."""
SHARE_ACKNOWLEDGE_MAX_VERSION: Final = 2
DESCRIBE_SHARE_GROUP_OFFSETS_MAX_VERSION: Final = 1
"""v1 (KIP-1226) adds each share-partition's ``lag``."""
ALTER_SHARE_GROUP_OFFSETS_VERSION: Final = 0
"""AlterShareGroupOffsets' only version (its v0 is not early access: spoken here)."""
"""v2 (Kafka 4.2, KIP-1222) adds ``is_renew_ack`` (request) and
``acquisition_lock_timeout_ms`` (response)."""

JOIN_EPOCH: Final = 0
"""``member_epoch`` of a heartbeat that joins the group."""
LEAVE_EPOCH: Final = -1
"""``member_epoch`` of a heartbeat that leaves the group."""
OPEN_SESSION_EPOCH: Final = 0
"""``share_session_epoch`` that opens a share session (then 1, 2, ... for the next requests)."""
CLOSE_SESSION_EPOCH: Final = -1
"""``share_session_epoch`` that closes the share session (releasing what it acquired)."""
NO_LIMIT_BYTES: Final = 0x7FFFFFFF
"""``max_bytes`` of a ShareFetch that sets no limit (Kafka's default)."""
UNKNOWN_AUTHORIZED_OPERATIONS: Final = -(2**31)
"""``authorized_operations`` when they were not asked for (Kafka's INT32_MIN)."""


class AcknowledgeType(enum.IntEnum):
    """What an acknowledgement does with each record of its batch (``acknowledge_types``)."""

    GAP = 0
    """No record at this offset (compacted away, or a transaction marker): nothing to do."""
    ACCEPT = 1
    """Processed: the record is done for this group."""
    RELEASE = 2
    """Not processed: the record is available again, for any member (delivery count + 1)."""
    REJECT = 3
    """Unprocessable: the record is archived and never delivered again."""
    RENEW = 4
    """Still working on it: the acquisition lock starts again (v2+, KIP-1222)."""


class ShareAcquireMode(enum.IntEnum):
    """How a ShareFetch (v2+, KIP-1206) bounds what it acquires."""

    BATCH_OPTIMIZED = 0
    """Whole record batches, so ``max_records`` may be exceeded (v1's only behaviour)."""
    RECORD_LIMIT = 1
    """At most ``max_records`` records, splitting batches if need be."""


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    """A partition's current leader, as a broker that is not its leader names it."""

    leader_id: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """Where a broker named in ``LeaderIdAndEpoch`` listens (Kafka's ``NodeEndpoints``)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


# -- ShareGroupHeartbeat ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatRequest:
    """Join (``member_epoch`` 0), stay in (the current epoch) or leave (-1) a share group.

    The member makes its own id (a UUID, kept for the life of the process). ``None`` means
    "unchanged since the last heartbeat"; a joining heartbeat sends the subscription.
    """

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponse:
    """The member's epoch, when to heartbeat next, and (if it changed) its assignment.

    ``assignment`` is Kafka's nullable ``Assignment`` struct, flattened to its one field:
    None when unchanged, else every partition the member may fetch from (several members
    of a share group may be assigned the same partition).
    ``version``: the one the broker spoke; -1 for an answer the transport made up because
    the broker offers no version of the API (``error_code`` UNSUPPORTED_VERSION).
    """

    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicIdPartitions, ...] | None = None
    throttle_time_ms: int = 0
    version: int = SHARE_GROUP_HEARTBEAT_MAX_VERSION


# -- ShareGroupDescribe ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeRequest:
    """Describe share groups (Kafka's ShareGroupDescribe)."""

    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedShareGroupMember:
    """One member of a described share group; ``assignment`` is Kafka's ``Assignment``
    struct flattened to its one field."""

    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[DescribedTopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    """One described share group, or why it could not be (``error_code``)."""

    error_code: int
    group_id: str
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[DescribedShareGroupMember, ...] = ()
    authorized_operations: int = UNKNOWN_AUTHORIZED_OPERATIONS


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeResponse:
    """The described groups, one per requested id (``version`` as in
    :class:`ShareGroupHeartbeatResponse`)."""

    groups: tuple[DescribedShareGroup, ...]
    throttle_time_ms: int = 0
    version: int = SHARE_GROUP_DESCRIBE_MAX_VERSION

    @property
    def error_code(self) -> int:
        """The first group's error code that is not 0, else 0 (the response has only
        per-group codes)."""
        return next((g.error_code for g in self.groups if g.error_code), 0)


# -- DescribeShareGroupOffsets ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareGroupOffsetsRequestGroup:
    """One group whose share-partitions to describe; ``topics`` (name, partitions) or None
    for every share-partition the group has state for."""

    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None


@dataclass(frozen=True, slots=True)
class DescribeShareGroupOffsetsRequest:
    """The share-partition state of share groups (Kafka's DescribeShareGroupOffsets), asked
    of each group's coordinator."""

    groups: tuple[ShareGroupOffsetsRequestGroup, ...]


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """One share-partition: where the group's delivery window starts, and its lag.

    ``start_offset``: the first offset not yet acknowledged for good (records before it are
    accepted, rejected or archived); -1 if the group has never fetched from the partition.
    ``lag``: records from the start offset to the partition's end that are not yet done
    (v1+; -1 when unknown, and from v0).
    """

    partition_index: int
    start_offset: int
    leader_epoch: int
    lag: int = -1
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupOffsetsTopic:
    """The described share-partitions of one topic."""

    topic_name: str
    topic_id: uuid.UUID
    partitions: tuple[SharePartitionOffset, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroupOffsets:
    """One group's share-partitions, or why they could not be described (``error_code``)."""

    group_id: str
    topics: tuple[ShareGroupOffsetsTopic, ...] = ()
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeShareGroupOffsetsResponse:
    """The described groups (``version`` as in :class:`ShareGroupHeartbeatResponse`)."""

    groups: tuple[DescribedShareGroupOffsets, ...]
    throttle_time_ms: int = 0
    version: int = DESCRIBE_SHARE_GROUP_OFFSETS_MAX_VERSION

    @property
    def error_code(self) -> int:
        """The first group's error code that is not 0, else 0."""
        return next((g.error_code for g in self.groups if g.error_code), 0)


# -- AlterShareGroupOffsets ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterShareGroupOffsetsRequest:
    """Set the start offset of share-partitions of an empty share group (Kafka's
    AlterShareGroupOffsets, to the group's coordinator); ``topics``: (topic name,
    ((partition, start offset), ...)) pairs."""

    group_id: str
    topics: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


@dataclass(frozen=True, slots=True)
class AlteredSharePartition:
    """One share-partition's outcome."""

    partition_index: int
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlteredShareGroupOffsetsTopic:
    """The outcomes for one topic's share-partitions."""

    topic_name: str
    topic_id: uuid.UUID
    partitions: tuple[AlteredSharePartition, ...]


@dataclass(frozen=True, slots=True)
class AlterShareGroupOffsetsResponse:
    """The request's outcome (``error_code``: the whole request's, e.g. NON_EMPTY_GROUP), and
    each share-partition's; ``version`` as in :class:`ShareGroupHeartbeatResponse`."""

    error_code: int
    error_message: str | None = None
    responses: tuple[AlteredShareGroupOffsetsTopic, ...] = ()
    throttle_time_ms: int = 0
    version: int = ALTER_SHARE_GROUP_OFFSETS_VERSION


# -- acknowledgements, shared by ShareFetch and ShareAcknowledge ------------------------------


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """Acknowledgements of the offsets ``first_offset``..``last_offset`` (inclusive).

    ``acknowledge_types`` (:class:`AcknowledgeType` values) holds one type for the whole
    range, or one per offset (``last_offset - first_offset + 1`` of them).
    """

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


# -- ShareFetch ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareFetchPartition:
    """A partition to fetch from (Kafka's ``FetchPartition``), and what to acknowledge in it."""

    partition_index: int
    acknowledgement_batches: tuple[AcknowledgementBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareFetchTopic:
    """The partitions of one topic to fetch from (Kafka's ``FetchTopic``)."""

    topic_id: uuid.UUID
    partitions: tuple[ShareFetchPartition, ...]


@dataclass(frozen=True, slots=True)
class ShareFetchRequest:
    """Acquire records of a share session's partitions, acknowledging earlier ones on the way.

    ``share_session_epoch``: 0 opens the session (``topics`` then lists every partition to
    fetch from), -1 closes it; otherwise it is the previous request's plus one, and
    ``topics`` and ``forgotten_topics_data`` are the changes to the session's partitions
    (plus any partition with acknowledgements). ``max_records`` and ``batch_size`` are
    record counts (500 here by default, the Java consumer's ``max.poll.records``; Kafka's
    schema has no default). v2+: ``share_acquire_mode`` (:class:`ShareAcquireMode`; dropped at v1,
    an ignorable field) and ``is_renew_ack`` (set when a batch holds a RENEW; v1 cannot
    carry it).
    """

    group_id: str | None
    member_id: str | None
    share_session_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int = NO_LIMIT_BYTES
    max_records: int = 500
    batch_size: int = 500
    share_acquire_mode: int = ShareAcquireMode.BATCH_OPTIMIZED
    is_renew_ack: bool = False
    topics: tuple[ShareFetchTopic, ...] = ()
    forgotten_topics_data: tuple[TopicIdPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """Offsets ``first_offset``..``last_offset`` (inclusive), now held by this member under
    the acquisition lock; ``delivery_count`` is 1 on the first delivery."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareFetchPartitionData:
    """One partition's answer (Kafka's ``PartitionData``).

    ``records``: the record batches, raw (``share_group_codec.decode_records`` reads them);
    they may hold records that were not acquired: only ``acquired_records`` were.
    ``acknowledge_error_code``: the outcome of the acknowledgements this request carried.
    """

    partition_index: int
    error_code: int = 0
    error_message: str | None = None
    acknowledge_error_code: int = 0
    acknowledge_error_message: str | None = None
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    records: bytes = b""
    acquired_records: tuple[AcquiredRecords, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareFetchTopicResponse:
    """The answers for one topic's partitions."""

    topic_id: uuid.UUID
    partitions: tuple[ShareFetchPartitionData, ...]


@dataclass(frozen=True, slots=True)
class ShareFetchResponse:
    """What a ShareFetch acquired, per partition, and how long the locks last.

    ``node_endpoints``: the brokers named as leaders of partitions that answered
    NOT_LEADER_OR_FOLLOWER. ``version`` as in :class:`ShareGroupHeartbeatResponse`.
    """

    error_code: int
    error_message: str | None = None
    acquisition_lock_timeout_ms: int = 0
    responses: tuple[ShareFetchTopicResponse, ...] = ()
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    throttle_time_ms: int = 0
    version: int = SHARE_FETCH_MAX_VERSION


# -- ShareAcknowledge ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShareAcknowledgePartition:
    """The acknowledgements for one partition (Kafka's ``AcknowledgePartition``)."""

    partition_index: int
    acknowledgement_batches: tuple[AcknowledgementBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeTopic:
    """The acknowledgements for one topic's partitions (Kafka's ``AcknowledgeTopic``)."""

    topic_id: uuid.UUID
    partitions: tuple[ShareAcknowledgePartition, ...]


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeRequest:
    """Acknowledge acquired records without fetching more, in the share session
    (``share_session_epoch`` as in :class:`ShareFetchRequest`; -1 acknowledges and closes
    it). ``is_renew_ack``: v2+, set when a batch holds a RENEW."""

    group_id: str | None
    member_id: str | None
    share_session_epoch: int
    is_renew_ack: bool = False
    topics: tuple[ShareAcknowledgeTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareAcknowledgePartitionData:
    """One partition's outcome (Kafka's ``PartitionData``)."""

    partition_index: int
    error_code: int = 0
    error_message: str | None = None
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeTopicResponse:
    """The outcomes for one topic's partitions."""

    topic_id: uuid.UUID
    partitions: tuple[ShareAcknowledgePartitionData, ...]


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeResponse:
    """The outcome of each partition's acknowledgements.

    ``acquisition_lock_timeout_ms``: v2+ (the lock a RENEW restarted; 0 before v2).
    ``version`` as in :class:`ShareGroupHeartbeatResponse`.
    """

    error_code: int
    error_message: str | None = None
    acquisition_lock_timeout_ms: int = 0
    responses: tuple[ShareAcknowledgeTopicResponse, ...] = ()
    node_endpoints: tuple[NodeEndpoint, ...] = ()
    throttle_time_ms: int = 0
    version: int = SHARE_ACKNOWLEDGE_MAX_VERSION


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One record of a ShareFetch's ``records``, as ``decode_records`` reads it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
