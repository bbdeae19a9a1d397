"""Kafka protocol error codes that the group membership APIs (and the requests beside them,
share groups' fetches and acknowledgements among them) return.

Public as ``coordination.ErrorCode``. The numbers and names are Kafka's
(``org.apache.kafka.common.protocol.Errors``); the descriptions say what the
code means for a group member.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """A Kafka error code, as returned in a response's ``error_code`` field."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_REGULAR_EXPRESSION = 128
    SHARE_SESSION_LIMIT_REACHED = 133


DESCRIPTIONS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "the broker hit an unexpected error (for a SyncGroup this "
    "is often an assignment larger than the broker's message size limit)",
    ErrorCode.NONE: "no error",
    ErrorCode.OFFSET_OUT_OF_RANGE: "the requested offset is outside the partition's range",
    ErrorCode.CORRUPT_MESSAGE: "a record failed its CRC check or is otherwise corrupt",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "the topic or partition does not exist",
    ErrorCode.LEADER_NOT_AVAILABLE: "the partition has no leader at the moment (an election "
    "is under way)",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "this broker does not lead the partition (any more)",
    ErrorCode.KAFKA_STORAGE_ERROR: "the broker's log directory for the partition is offline",
    ErrorCode.FENCED_LEADER_EPOCH: "the request's leader epoch is older than the broker's",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "the request's leader epoch is newer than the broker's",
    ErrorCode.UNKNOWN_TOPIC_ID: "no topic has this id (deleted, or not yet known here)",
    ErrorCode.INCONSISTENT_TOPIC_ID: "the topic id does not match the partition's",
    ErrorCode.REQUEST_TIMED_OUT: "the broker timed the request out",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "the commit's metadata string is longer than the "
    "broker's offset.metadata.max.bytes",
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: "the offset commit is too large for the broker",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "the principal is not authorized for the topic",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "a transaction that commits offsets for the partition "
    "is still open",
    ErrorCode.NETWORK_EXCEPTION: "the broker lost a connection while serving the request",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "the coordinator is still loading the group",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "the group coordinator is not available",
    ErrorCode.NOT_COORDINATOR: "this broker is no longer the group's coordinator",
    ErrorCode.ILLEGAL_GENERATION: "the member's generation is not the group's current one",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "the member's protocol type or protocols do not "
    "match the group's",
    ErrorCode.INVALID_GROUP_ID: "the group id is empty or invalid",
    ErrorCode.UNKNOWN_MEMBER_ID: "the coordinator does not know this member id",
    ErrorCode.INVALID_SESSION_TIMEOUT: "the session timeout is outside the broker's "
    "group.min.session.timeout.ms..group.max.session.timeout.ms range",
    ErrorCode.REBALANCE_IN_PROGRESS: "the group is rebalancing",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "the principal is not authorized for the group",
    ErrorCode.UNSUPPORTED_VERSION: "the broker does not support the request or its version "
    "(static membership needs JoinGroup v5, Kafka 2.3 or newer; share groups, Kafka 4.2 "
    "with share.version enabled)",
    ErrorCode.TOPIC_ALREADY_EXISTS: "the topic already exists",
    ErrorCode.INVALID_REQUEST: "the broker rejected the request as malformed",
    ErrorCode.NON_EMPTY_GROUP: "the group is not empty",
    ErrorCode.GROUP_ID_NOT_FOUND: "the group does not exist",
    ErrorCode.MEMBER_ID_REQUIRED: "the broker assigned a member id; join again with it",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group already has group.max.size members",
    ErrorCode.FENCED_INSTANCE_ID: "another member joined with the same group_instance_id",
    ErrorCode.FENCED_MEMBER_EPOCH: "(consumer groups, KIP-848) the member's epoch is not the "
    "one the broker holds for it: it lost its partitions and must join again",
    ErrorCode.UNRELEASED_INSTANCE_ID: "(consumer groups) a member with this group_instance_id "
    "is still in the group; the new one is refused",
    ErrorCode.UNSUPPORTED_ASSIGNOR: "(consumer groups) the broker has no assignor of that name "
    "(its group.consumer.assignors)",
    ErrorCode.STALE_MEMBER_EPOCH: "(consumer groups) the request's member epoch is older than "
    "the member's current one",
    ErrorCode.INVALID_REGULAR_EXPRESSION: "(consumer groups) the broker cannot parse the "
    "subscription's regular expression (RE2J syntax)",
    ErrorCode.INVALID_RECORD_STATE: "(share groups) the record is not in a state that allows "
    "this acknowledgement: its acquisition lock ran out (it may be delivered elsewhere now), or "
    "it was acknowledged already",
    ErrorCode.SHARE_SESSION_NOT_FOUND: "(share groups) the broker has no share session for "
    "this member (it expired or the broker restarted); open a new one",
    ErrorCode.INVALID_SHARE_SESSION_EPOCH: "(share groups) the request's share session epoch "
    "is not the next one; open a new session",
    ErrorCode.FENCED_STATE_EPOCH: "(share groups) the share partition's state was written by "
    "a newer leader",
    ErrorCode.SHARE_SESSION_LIMIT_REACHED: "(share groups) the broker holds as many share "
    "sessions as it allows (group.share.max.share.sessions)",
}


def error_name(code: int) -> str:
    """Kafka's name for ``code``, or ``UNKNOWN_ERROR_CODE_<n>`` for codes not listed."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


def describe(code: int) -> str:
    """A short description of what ``code`` means for a group member."""
    try:
        return DESCRIPTIONS[ErrorCode(code)]
    except ValueError:
        return "an error code this library does not know"
