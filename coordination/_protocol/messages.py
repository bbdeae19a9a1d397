"""The group membership requests and responses, independent of any Kafka client.

Internal, no compatibility guarantee. Field names follow Kafka's message
schemas (``JoinGroupRequest.json`` and friends) in snake_case. A transport
negotiates the version with the broker and fills ``version`` in the response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from .consumer_group import (
    CONSUMER_GROUP_DESCRIBE_MAX_VERSION,
    CONSUMER_GROUP_HEARTBEAT_MAX_VERSION,
)

# The consumer group protocol's messages (KIP-848) live in consumer_group.py, its codec in
# consumer_group_codec.py (kafka-python has no classes for them); they are requests and
# responses like these.
from .consumer_group import ConsumerGroupDescribeRequest as ConsumerGroupDescribeRequest
from .consumer_group import ConsumerGroupDescribeResponse as ConsumerGroupDescribeResponse
from .consumer_group import ConsumerGroupHeartbeatRequest as ConsumerGroupHeartbeatRequest
from .consumer_group import ConsumerGroupHeartbeatResponse as ConsumerGroupHeartbeatResponse

# Share groups' messages (KIP-932): share_group.py, their codec share_group_codec.py.
from .share_group import (
    ALTER_SHARE_GROUP_OFFSETS_VERSION,
    DESCRIBE_SHARE_GROUP_OFFSETS_MAX_VERSION,
    SHARE_ACKNOWLEDGE_MAX_VERSION,
    SHARE_FETCH_MAX_VERSION,
    SHARE_GROUP_DESCRIBE_MAX_VERSION,
    SHARE_GROUP_HEARTBEAT_MAX_VERSION,
)
from .share_group import AlterShareGroupOffsetsRequest as AlterShareGroupOffsetsRequest
from .share_group import AlterShareGroupOffsetsResponse as AlterShareGroupOffsetsResponse
from .share_group import (
    DescribeShareGroupOffsetsRequest as DescribeShareGroupOffsetsRequest,
)
from .share_group import (
    DescribeShareGroupOffsetsResponse as DescribeShareGroupOffsetsResponse,
)
from .share_group import ShareAcknowledgeRequest as ShareAcknowledgeRequest
from .share_group import ShareAcknowledgeResponse as ShareAcknowledgeResponse
from .share_group import ShareFetchRequest as ShareFetchRequest
from .share_group import ShareFetchResponse as ShareFetchResponse
from .share_group import ShareGroupDescribeRequest as ShareGroupDescribeRequest
from .share_group import ShareGroupDescribeResponse as ShareGroupDescribeResponse
from .share_group import ShareGroupHeartbeatRequest as ShareGroupHeartbeatRequest
from .share_group import ShareGroupHeartbeatResponse as ShareGroupHeartbeatResponse

# The newest version of each API the engine speaks (Kafka 3.2+ brokers offer all of them).
MAX_VERSIONS: Final = {
    "FindCoordinator": 6,
    "JoinGroup": 9,
    "SyncGroup": 5,
    "Heartbeat": 4,
    "LeaveGroup": 5,
    # v10 names topics by id; v9 is the newest that names them, as these messages do.
    "OffsetCommit": 9,
    # v8 batches groups; v7 (one group, require_stable) is all a classic member needs. A
    # KIP-848 member's fetch is v9 (member id and epoch): OFFSET_FETCH_MEMBER_VERSION.
    "OffsetFetch": 7,
    # v5 is the newest without KIP-1043's per-group error message, which nothing here reads.
    "DescribeGroups": 5,
    # The consumer group protocol (KIP-848): Kafka 4.0+ only (consumer_group.py).
    "ConsumerGroupHeartbeat": CONSUMER_GROUP_HEARTBEAT_MAX_VERSION,
    "ConsumerGroupDescribe": CONSUMER_GROUP_DESCRIBE_MAX_VERSION,
    # Share groups (KIP-932): Kafka 4.1+ (v1), with share.version enabled (share_group.py).
    "ShareGroupHeartbeat": SHARE_GROUP_HEARTBEAT_MAX_VERSION,
    "ShareGroupDescribe": SHARE_GROUP_DESCRIBE_MAX_VERSION,
    "ShareFetch": SHARE_FETCH_MAX_VERSION,
    "ShareAcknowledge": SHARE_ACKNOWLEDGE_MAX_VERSION,
    "DescribeShareGroupOffsets": DESCRIBE_SHARE_GROUP_OFFSETS_MAX_VERSION,
    "AlterShareGroupOffsets": ALTER_SHARE_GROUP_OFFSETS_VERSION,
}
# OffsetFetch with the member's id and epoch (KIP-848; Kafka 4.0+, like the protocol itself).
OFFSET_FETCH_MEMBER_VERSION: Final = 9
# Kafka truncates KIP-800 reasons to this many characters (JoinGroupRequest.maybeTruncateReason).
MAX_REASON_LENGTH: Final = 255


def truncate_reason(reason: str) -> str:
    """Cut ``reason`` to the length the broker stores."""
    return reason if len(reason) <= MAX_REASON_LENGTH else reason[: MAX_REASON_LENGTH - 3] + "..."


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    """Which broker coordinates the group ``key`` (Kafka's FindCoordinator)."""

    key: str


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    """The group's coordinator (``node_id``, ``host``, ``port``), or why none."""

    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str | None = None
    version: int = MAX_VERSIONS["FindCoordinator"]


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """Join the group, offering ``protocols`` (name, metadata) most preferred first."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    reason: str | None


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    """One member as the leader sees it in a JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """The new generation, its chosen protocol and leader; the leader also gets ``members``."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupResponseMember, ...] = ()
    version: int = MAX_VERSIONS["JoinGroup"]


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    """Ask for this member's assignment; the leader sends everyone's in ``assignments``."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    """This member's assignment in the generation."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    version: int = MAX_VERSIONS["SyncGroup"]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """Keep this member's session alive in ``generation_id``."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """Whether the generation still holds (``REBALANCE_IN_PROGRESS`` if not)."""

    error_code: int
    version: int = MAX_VERSIONS["Heartbeat"]


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """Leave the group now rather than at the end of the session."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    """Whether the broker accepted the departure."""

    error_code: int
    # Per-member error (LeaveGroup v3+); equal to error_code for older versions.
    member_error_code: int = 0
    version: int = MAX_VERSIONS["LeaveGroup"]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """Commit offsets for the group, fenced by the member's generation."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    # (topic, partition, committed offset, metadata), sorted.
    offsets: tuple[tuple[str, int, int, str | None], ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    """Each partition's outcome of an offset commit."""

    # (topic, partition, error code); the broker reports group-level errors per partition.
    partitions: tuple[tuple[str, int, int], ...]
    version: int = MAX_VERSIONS["OffsetCommit"]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """The group's committed offsets for ``partitions``.

    A member of a KIP-848 consumer group gives its id and epoch (``member_epoch`` >= 0):
    the broker answers STALE_MEMBER_EPOCH or UNKNOWN_MEMBER_ID when they are not current,
    so that a member never starts a partition from offsets read under a past assignment.
    """

    group_id: str
    partitions: tuple[tuple[str, int], ...]
    require_stable: bool = True
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    """The committed offsets, per partition."""

    error_code: int
    # (topic, partition, committed offset or -1, metadata, error code).
    partitions: tuple[tuple[str, int, int, str | None, int], ...]
    version: int = MAX_VERSIONS["OffsetFetch"]


@dataclass(frozen=True, slots=True)
class DescribeGroupRequest:
    """The group's state, protocol and members (Kafka's DescribeGroups, one group)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class DescribedMember:
    """One member of a described group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    # Empty unless the group is Stable.
    metadata: bytes
    # Unless the group is Stable, the member's last assignment (Kafka 4) or empty (3.x).
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribeGroupResponse:
    """The group's state, protocol and members."""

    error_code: int
    state: str = ""
    protocol_type: str = ""
    # The selected protocol; "" unless the group is Stable.
    protocol: str = ""
    members: tuple[DescribedMember, ...] = ()
    version: int = MAX_VERSIONS["DescribeGroups"]


Request = (
    FindCoordinatorRequest
    | JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | DescribeGroupRequest
    | ConsumerGroupHeartbeatRequest
    | ConsumerGroupDescribeRequest
    | ShareGroupHeartbeatRequest
    | ShareGroupDescribeRequest
    | ShareFetchRequest
    | ShareAcknowledgeRequest
    | DescribeShareGroupOffsetsRequest
    | AlterShareGroupOffsetsRequest
)
Response = (
    FindCoordinatorResponse
    | JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | DescribeGroupResponse
    | ConsumerGroupHeartbeatResponse
    | ConsumerGroupDescribeResponse
    | ShareGroupHeartbeatResponse
    | ShareGroupDescribeResponse
    | ShareFetchResponse
    | ShareAcknowledgeResponse
    | DescribeShareGroupOffsetsResponse
    | AlterShareGroupOffsetsResponse
)
