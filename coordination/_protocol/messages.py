"""The group membership requests and responses, independent of any Kafka client.

Internal, no compatibility guarantee. Field names follow Kafka's message
schemas (``JoinGroupRequest.json`` and friends) in snake_case. A transport
negotiates the version with the broker and fills ``version`` in the response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

# The newest version of each API the engine speaks (Kafka 3.2+ brokers offer all of them).
MAX_VERSIONS: Final = {
    "FindCoordinator": 6,
    "JoinGroup": 9,
    "SyncGroup": 5,
    "Heartbeat": 4,
    "LeaveGroup": 5,
    # v10 names topics by id; v9 is the newest that names them, as these messages do.
    "OffsetCommit": 9,
    # v8 batches groups; v7 (one group, require_stable) is all a member needs.
    "OffsetFetch": 7,
    # v5 is the newest without KIP-1043's per-group error message, which nothing here reads.
    "DescribeGroups": 5,
}
# Kafka truncates KIP-800 reasons to this many characters (JoinGroupRequest.maybeTruncateReason).
MAX_REASON_LENGTH: Final = 255


def truncate_reason(reason: str) -> str:
    """Cut ``reason`` to the length the broker stores."""
    return reason if len(reason) <= MAX_REASON_LENGTH else reason[: MAX_REASON_LENGTH - 3] + "..."


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str | None = None
    version: int = MAX_VERSIONS["FindCoordinator"]


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
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
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
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
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    version: int = MAX_VERSIONS["SyncGroup"]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: int
    version: int = MAX_VERSIONS["Heartbeat"]


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: int
    # Per-member error (LeaveGroup v3+); equal to error_code for older versions.
    member_error_code: int = 0
    version: int = MAX_VERSIONS["LeaveGroup"]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    # (topic, partition, committed offset, metadata), sorted.
    offsets: tuple[tuple[str, int, int, str | None], ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    # (topic, partition, error code); the broker reports group-level errors per partition.
    partitions: tuple[tuple[str, int, int], ...]
    version: int = MAX_VERSIONS["OffsetCommit"]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...]
    require_stable: bool = True


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: int
    # (topic, partition, committed offset or -1, metadata, error code).
    partitions: tuple[tuple[str, int, int, str | None, int], ...]
    version: int = MAX_VERSIONS["OffsetFetch"]


@dataclass(frozen=True, slots=True)
class DescribeGroupRequest:
    group_id: str


@dataclass(frozen=True, slots=True)
class DescribedMember:
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
)
