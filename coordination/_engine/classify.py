"""What the engine does about each error code, per request: one table, not scattered ifs.

Each row follows the branch of Kafka's reference client
(``AbstractCoordinator``'s ``JoinGroupResponseHandler``,
``SyncGroupResponseHandler``, ``HeartbeatResponseHandler``,
``FindCoordinatorResponseHandler``). One deliberate difference: for a code
the table does not list, Kafka raises a generic exception to the caller of
``poll()``, who usually polls again. This engine has no caller in the loop, so
it logs the error and retries with backoff instead of stopping the member;
only the codes a person must act on are fatal.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from .._protocol.error_codes import ErrorCode as E


class Next(enum.Enum):
    """What to do after an error."""

    RETRY_NOW = "retry now"
    """Send the join again at once (the broker expects it)."""
    RETRY_BACKOFF = "retry after backoff"
    """Wait ``retry_backoff_ms`` (growing exponentially), then try again."""
    FIND_COORDINATOR = "find the coordinator"
    """Forget the coordinator, disconnect, find it again, then retry."""
    REJOIN = "rejoin"
    """(Heartbeat) leave the stable state and join again."""
    FATAL = "fatal"
    """Stop the member and raise a typed error to the user."""


class Reset(enum.Enum):
    """What membership state to drop with it."""

    NOTHING = "nothing"
    GENERATION = "generation"
    """Forget the generation, keep the member id (ILLEGAL_GENERATION, KAFKA-13419)."""
    MEMBER = "generation and member id"
    """Forget both (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID)."""


@dataclass(frozen=True, slots=True)
class Reaction:
    next: Next
    reset: Reset = Reset.NOTHING


_BACKOFF: Final = Reaction(Next.RETRY_BACKOFF)
_REDISCOVER: Final = Reaction(Next.FIND_COORDINATOR)
_FATAL: Final = Reaction(Next.FATAL)
_FATAL_RESET: Final = Reaction(Next.FATAL, Reset.MEMBER)

FIND_COORDINATOR: Final[dict[int, Reaction]] = {
    E.GROUP_AUTHORIZATION_FAILED: _FATAL,
    E.INVALID_REQUEST: _FATAL,
    # COORDINATOR_NOT_AVAILABLE (e.g. __consumer_offsets being created on a fresh cluster),
    # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and anything else: back off and ask again.
}
FIND_COORDINATOR_DEFAULT: Final = _BACKOFF

JOIN_GROUP: Final[dict[int, Reaction]] = {
    E.COORDINATOR_LOAD_IN_PROGRESS: _BACKOFF,
    E.UNKNOWN_MEMBER_ID: Reaction(Next.RETRY_NOW, Reset.MEMBER),
    E.ILLEGAL_GENERATION: Reaction(Next.RETRY_NOW, Reset.GENERATION),
    E.COORDINATOR_NOT_AVAILABLE: _REDISCOVER,
    E.NOT_COORDINATOR: _REDISCOVER,
    E.FENCED_INSTANCE_ID: _FATAL_RESET,
    E.INCONSISTENT_GROUP_PROTOCOL: _FATAL,
    E.INVALID_SESSION_TIMEOUT: _FATAL,
    E.INVALID_GROUP_ID: _FATAL,
    E.GROUP_AUTHORIZATION_FAILED: _FATAL,
    E.GROUP_MAX_SIZE_REACHED: _FATAL,
    E.UNSUPPORTED_VERSION: _FATAL,
    # KIP-394: the engine stores the member id from the response, then rejoins at once.
    E.MEMBER_ID_REQUIRED: Reaction(Next.RETRY_NOW),
    # "could indicate a replication timeout on the broker": just join again.
    E.REBALANCE_IN_PROGRESS: Reaction(Next.RETRY_NOW),
}

SYNC_GROUP: Final[dict[int, Reaction]] = {
    E.GROUP_AUTHORIZATION_FAILED: _FATAL,
    E.REBALANCE_IN_PROGRESS: Reaction(Next.RETRY_NOW),
    E.FENCED_INSTANCE_ID: _FATAL_RESET,
    E.UNKNOWN_MEMBER_ID: Reaction(Next.RETRY_NOW, Reset.MEMBER),
    E.ILLEGAL_GENERATION: Reaction(Next.RETRY_NOW, Reset.GENERATION),
    E.COORDINATOR_NOT_AVAILABLE: _REDISCOVER,
    E.NOT_COORDINATOR: _REDISCOVER,
    E.COORDINATOR_LOAD_IN_PROGRESS: _BACKOFF,
    E.INCONSISTENT_GROUP_PROTOCOL: _FATAL,
}

HEARTBEAT: Final[dict[int, Reaction]] = {
    E.COORDINATOR_NOT_AVAILABLE: _REDISCOVER,
    E.NOT_COORDINATOR: _REDISCOVER,
    E.COORDINATOR_LOAD_IN_PROGRESS: _BACKOFF,
    # Counts as a successful heartbeat; rejoin only if this member thought it was stable.
    E.REBALANCE_IN_PROGRESS: Reaction(Next.REJOIN),
    E.ILLEGAL_GENERATION: Reaction(Next.REJOIN, Reset.GENERATION),
    E.UNKNOWN_MEMBER_ID: Reaction(Next.REJOIN, Reset.MEMBER),
    E.FENCED_INSTANCE_ID: _FATAL_RESET,
    E.GROUP_AUTHORIZATION_FAILED: _FATAL,
}

# Codes not in a table: log and retry with backoff (see the module docstring).
UNLISTED: Final = _BACKOFF


def join_group(code: int) -> Reaction:
    return JOIN_GROUP.get(code, UNLISTED)


def sync_group(code: int) -> Reaction:
    return SYNC_GROUP.get(code, UNLISTED)


def heartbeat(code: int) -> Reaction:
    return HEARTBEAT.get(code, UNLISTED)


def find_coordinator(code: int) -> Reaction:
    return FIND_COORDINATOR.get(code, FIND_COORDINATOR_DEFAULT)
