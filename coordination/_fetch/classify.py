"""What the lean fetcher does after each Fetch error code: a table, not scattered ``if``s.

Rows follow Kafka's consumer (``FetchCollector.handleInitializeErrors`` and
``AbstractFetch.handleFetchSuccess``): a partition error either looks the leader up again
(the partition leaves its fetch session and is retried after ``retry_backoff_ms``), resets
an out-of-range position, retries as it is, or stops the poll with a typed error.
"""

from __future__ import annotations

import enum
from typing import Final


class Outcome(enum.Enum):
    """One outcome per error code."""

    NONE = "none"
    """No error: take the records."""
    REFRESH = "refresh"
    """The leader moved, or the topic is not (yet, or any longer) known to this broker: look
    the partition's leader up again, drop it from the session, retry after a backoff."""
    RETRY = "retry"
    """Transient on the broker's side: retry the same fetch after a backoff."""
    OUT_OF_RANGE = "out_of_range"
    """The position is outside the log: reset it per ``auto_offset_reset`` (or fail)."""
    FATAL = "fatal"
    """Retrying cannot help (no permission, corrupt data, a bug): raise to the caller."""


# Kafka's codes (clients/.../common/protocol/Errors.java) that a Fetch partition returns.
UNKNOWN_SERVER_ERROR: Final = -1
OFFSET_OUT_OF_RANGE: Final = 1
CORRUPT_MESSAGE: Final = 2
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
LEADER_NOT_AVAILABLE: Final = 5
NOT_LEADER_OR_FOLLOWER: Final = 6
REQUEST_TIMED_OUT: Final = 7
REPLICA_NOT_AVAILABLE: Final = 9
NETWORK_EXCEPTION: Final = 13
TOPIC_AUTHORIZATION_FAILED: Final = 29
UNSUPPORTED_VERSION: Final = 35
KAFKA_STORAGE_ERROR: Final = 56
FETCH_SESSION_ID_NOT_FOUND: Final = 70
INVALID_FETCH_SESSION_EPOCH: Final = 71
FENCED_LEADER_EPOCH: Final = 74
UNKNOWN_LEADER_EPOCH: Final = 75
UNSUPPORTED_COMPRESSION_TYPE: Final = 76
OFFSET_NOT_AVAILABLE: Final = 78
UNKNOWN_TOPIC_ID: Final = 100
INCONSISTENT_TOPIC_ID: Final = 103
FETCH_SESSION_TOPIC_ID_ERROR: Final = 106
OFFSET_MOVED_TO_TIERED_STORAGE: Final = 109

PARTITION_OUTCOMES: Final[dict[int, Outcome]] = {
    0: Outcome.NONE,
    NOT_LEADER_OR_FOLLOWER: Outcome.REFRESH,
    LEADER_NOT_AVAILABLE: Outcome.REFRESH,
    REPLICA_NOT_AVAILABLE: Outcome.REFRESH,
    FENCED_LEADER_EPOCH: Outcome.REFRESH,
    KAFKA_STORAGE_ERROR: Outcome.REFRESH,
    OFFSET_NOT_AVAILABLE: Outcome.REFRESH,
    UNKNOWN_TOPIC_OR_PARTITION: Outcome.REFRESH,
    UNKNOWN_TOPIC_ID: Outcome.REFRESH,
    INCONSISTENT_TOPIC_ID: Outcome.REFRESH,
    # The broker has not caught up with the epoch this client sent: the same request later.
    UNKNOWN_LEADER_EPOCH: Outcome.RETRY,
    UNKNOWN_SERVER_ERROR: Outcome.RETRY,
    REQUEST_TIMED_OUT: Outcome.RETRY,
    NETWORK_EXCEPTION: Outcome.RETRY,
    OFFSET_OUT_OF_RANGE: Outcome.OUT_OF_RANGE,
    TOPIC_AUTHORIZATION_FAILED: Outcome.FATAL,
    CORRUPT_MESSAGE: Outcome.FATAL,
    UNSUPPORTED_COMPRESSION_TYPE: Outcome.FATAL,
    # A consumer reading from tiered storage gets its records from the leader anyway; the
    # code reaches a consumer only through a broker bug.
    OFFSET_MOVED_TO_TIERED_STORAGE: Outcome.FATAL,
}


def partition_outcome(code: int) -> Outcome:
    """What to do after a Fetch partition's ``code``; a code not listed is fatal (as Java's
    ``IllegalStateException("Unexpected error code ...")``)."""
    return PARTITION_OUTCOMES.get(code, Outcome.FATAL)


class SessionOutcome(enum.Enum):
    """What a FetchResponse's top-level error code does to its fetch session."""

    KEEP = "keep"
    """No error: the session goes on (its epoch advances)."""
    NEW_SESSION = "new_session"
    """The broker lost or refused the session: the next request opens a new one (full)."""
    NEW_SESSION_AND_REFRESH = "new_session_and_refresh"
    """As NEW_SESSION, and look the leaders and topic ids up again first."""
    FATAL = "fatal"


SESSION_OUTCOMES: Final[dict[int, SessionOutcome]] = {
    0: SessionOutcome.KEEP,
    FETCH_SESSION_ID_NOT_FOUND: SessionOutcome.NEW_SESSION,
    INVALID_FETCH_SESSION_EPOCH: SessionOutcome.NEW_SESSION,
    FETCH_SESSION_TOPIC_ID_ERROR: SessionOutcome.NEW_SESSION_AND_REFRESH,
    UNKNOWN_TOPIC_ID: SessionOutcome.NEW_SESSION_AND_REFRESH,
    INCONSISTENT_TOPIC_ID: SessionOutcome.NEW_SESSION_AND_REFRESH,
    NOT_LEADER_OR_FOLLOWER: SessionOutcome.NEW_SESSION_AND_REFRESH,
    UNKNOWN_SERVER_ERROR: SessionOutcome.NEW_SESSION,
    REQUEST_TIMED_OUT: SessionOutcome.NEW_SESSION,
    TOPIC_AUTHORIZATION_FAILED: SessionOutcome.FATAL,
    UNSUPPORTED_VERSION: SessionOutcome.FATAL,
}


def session_outcome(code: int) -> SessionOutcome:
    """What a FetchResponse's top-level ``code`` does; one not listed starts a new session
    after a backoff (Java's ``FetchSessionHandler.handleError`` resets the session on any)."""
    return SESSION_OUTCOMES.get(code, SessionOutcome.NEW_SESSION)
