"""Kafka protocol error codes that the group membership APIs (and the requests beside them) return.

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
    UNKNOWN_TOPIC_OR_PARTITION = 3
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
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


DESCRIPTIONS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "the broker hit an unexpected error (for a SyncGroup this "
    "is often an assignment larger than the broker's message size limit)",
    ErrorCode.NONE: "no error",
    ErrorCode.OFFSET_OUT_OF_RANGE: "the requested offset is outside the partition's range",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "the topic or partition does not exist",
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
    ErrorCode.UNSUPPORTED_VERSION: "the broker does not support the request version "
    "(static membership needs JoinGroup v5, Kafka 2.3 or newer)",
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
