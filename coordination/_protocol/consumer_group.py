"""The messages of Kafka's consumer group protocol (KIP-848): ConsumerGroupHeartbeat (API key
68) and ConsumerGroupDescribe (API key 69).

Internal, no compatibility guarantee. Field names are those of Kafka's message definitions
(``ConsumerGroupHeartbeatRequest.json`` and friends) in snake_case; topics are named by id
(``uuid.UUID``). ``consumer_group_codec`` encodes and decodes them (kafka-python has no
classes for these APIs).

Null means "unchanged" in a heartbeat: most request fields are sent in full only when they
change (and in the first heartbeat, and the first one after an error or a reconnect) and
are null (-1 for ``rebalance_timeout_ms``) otherwise; the broker keeps what it was told.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

CONSUMER_GROUP_HEARTBEAT_MAX_VERSION: Final = 1
"""v1 (Kafka 4.0) adds ``subscribed_topic_regex`` and has the member generate its own id
(KIP-1082); v0 is Kafka 3.7-3.9's early access (the codec speaks it, the Kafka transport
sends v1 only: a 3.9 broker lists v0 and refuses it where the protocol is not enabled)."""
CONSUMER_GROUP_DESCRIBE_MAX_VERSION: Final = 1
"""v1 (Kafka 4.0, KIP-1099) adds each member's ``member_type``; sent as v1 only, likewise."""

JOIN_EPOCH: Final = 0
"""``member_epoch`` of a heartbeat that joins the group (or rejoins after being fenced)."""
LEAVE_EPOCH: Final = -1
"""``member_epoch`` of a heartbeat that leaves the group."""
STATIC_LEAVE_EPOCH: Final = -2
"""``member_epoch`` of a static member leaving for now (it rejoins with its instance id)."""
UNKNOWN_AUTHORIZED_OPERATIONS: Final = -(2**31)
"""``authorized_operations`` when they were not asked for (Kafka's INT32_MIN)."""


@dataclass(frozen=True, slots=True)
class TopicIdPartitions:
    """Partitions of one topic, named by its id (Kafka's ``TopicPartitions`` struct of
    ConsumerGroupHeartbeat)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    """Join (``member_epoch`` 0), stay in (the current epoch) or leave (-1, or -2 for a
    static member) a consumer group, reporting what the member owns.

    ``None`` (and -1 for ``rebalance_timeout_ms``) means "unchanged since the last
    heartbeat"; a joining heartbeat sends everything.
    """

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    # v1+: matched by the broker (RE2J) against whole topic names.
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    # The partitions the member owns now (after revoking what it was told to).
    topic_partitions: tuple[TopicIdPartitions, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    """The member's id and epoch, when to heartbeat next, and (if it changed) its assignment.

    ``assignment`` is Kafka's nullable ``Assignment`` struct, flattened to its one field
    (``TopicPartitions``): None when the assignment did not change, else the partitions the
    member may use at once (every one it should own now, not a difference).
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
    version: int = CONSUMER_GROUP_HEARTBEAT_MAX_VERSION


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    """Describe consumer groups of the new protocol (Kafka's ConsumerGroupDescribe)."""

    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedTopicPartitions:
    """Partitions of one topic, by id and name (ConsumerGroupDescribe's ``TopicPartitions``)."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroupMember:
    """One member of a described consumer group.

    ``assignment`` and ``target_assignment`` are Kafka's ``Assignment`` structs flattened to
    their one field: what the member owns now, and what the assignor wants it to own.
    """

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]
    # v1+: 0 a classic member (a group being upgraded), 1 a consumer member, -1 unknown.
    member_type: int = -1


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    """One described consumer group, or why it could not be (``error_code``)."""

    error_code: int
    group_id: str
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[DescribedConsumerGroupMember, ...] = ()
    authorized_operations: int = UNKNOWN_AUTHORIZED_OPERATIONS


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResponse:
    """The described groups, one per requested id.

    ``version``: as in :class:`ConsumerGroupHeartbeatResponse` (-1: the broker offers no
    version; every group then carries UNSUPPORTED_VERSION).
    """

    groups: tuple[DescribedConsumerGroup, ...]
    throttle_time_ms: int = 0
    version: int = CONSUMER_GROUP_DESCRIBE_MAX_VERSION

    @property
    def error_code(self) -> int:
        """The first group's error code that is not 0, else 0 (Kafka's response has only
        per-group codes; every other response here has an ``error_code``)."""
        return next((g.error_code for g in self.groups if g.error_code), 0)
