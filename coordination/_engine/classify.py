"""What the engine does about each error code: one table, a row per code.

A row names the code, the error class raised for it (``errors.broker_error``
builds it from here, and the class says whether the code is retriable) and the
reaction of each request to it. A request that leaves a code out reacts as it
does to any code it does not list (``DEFAULTS``). docs/errors.md shows this
table; a unit test keeps the two the same (``markdown_table``).

The reactions follow the branches of Kafka's reference client
(``AbstractCoordinator``'s ``JoinGroupResponseHandler``,
``SyncGroupResponseHandler``, ``HeartbeatResponseHandler``,
``FindCoordinatorResponseHandler``; ``ConsumerCoordinator``'s
``OffsetCommitResponseHandler`` and ``OffsetFetchResponseHandler``). One
deliberate difference: for a code the membership requests do not list, Kafka
raises a generic exception to the caller of ``poll()``, who usually polls
again. This engine has no caller in the loop, so it logs the error and retries
with backoff instead of stopping the member; only the codes a person must act
on are fatal. Offset commits and fetches, and a member's DescribeGroups (a read of
its group as the coordinator stores it), do have a caller: they raise to it.

Share groups (KIP-932): ShareGroupHeartbeat reacts as ConsumerGroupHeartbeat does (Kafka's
``ShareHeartbeatRequestManager``). ShareFetch and ShareAcknowledge go to each partition's
leader, not the coordinator; a code in their columns may be the whole request's or one
partition's (a partition's leader moved: ``REFRESH_METADATA``; the share session is gone:
``NEW_SESSION``). An acknowledgement that fails is always reported to the caller, whatever
else its column says (a record whose acquisition lock ran out answers INVALID_RECORD_STATE:
it is never counted as acknowledged).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from .._protocol.error_codes import ErrorCode as E
from ..errors import (
    BrokerError,
    FencedInstanceError,
    GroupAuthorizationError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRegularExpressionError,
    InvalidSessionTimeoutError,
    MembershipLostError,
    RebalanceRequiredError,
    RetriableBrokerError,
    TopicAuthorizationError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
    _register_classes,
)


class Api(enum.Enum):
    """A request that can fail with an error code; the value is Kafka's name for it."""

    FIND_COORDINATOR = "FindCoordinator"
    JOIN_GROUP = "JoinGroup"
    SYNC_GROUP = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    LEAVE_GROUP = "LeaveGroup"
    OFFSET_COMMIT = "OffsetCommit"
    OFFSET_FETCH = "OffsetFetch"
    DESCRIBE_GROUPS = "DescribeGroups"
    CONSUMER_GROUP_HEARTBEAT = "ConsumerGroupHeartbeat"
    SHARE_GROUP_HEARTBEAT = "ShareGroupHeartbeat"
    SHARE_FETCH = "ShareFetch"
    SHARE_ACKNOWLEDGE = "ShareAcknowledge"


class Next(enum.Enum):
    """What to do after an error."""

    RETRY_NOW = "retry now"
    """(JoinGroup, SyncGroup) send the join again at once (the broker expects it)."""
    RETRY_WITH_MEMBER_ID = "retry with the given member id"
    """(JoinGroup) store the member id the response carries, join again at once (KIP-394)."""
    RETRY_BACKOFF = "retry after backoff"
    """Wait ``retry_backoff_ms`` (growing exponentially for the membership requests), then
    try again."""
    FIND_COORDINATOR = "find the coordinator"
    """Forget the coordinator, disconnect, find it again, then retry."""
    REJOIN = "rejoin"
    """(Heartbeat) leave the stable state and join again, if the generation is unchanged."""
    REJOIN_IF_STABLE = "rejoin if stable"
    """(Heartbeat) the group is rebalancing: the session is alive (it counts as a successful
    heartbeat); a STABLE member rejoins, one that is joining carries on."""
    FENCED_COMMIT = "fenced commit"
    """(OffsetCommit) nothing was committed: raise ``CommitFailedError``, reset as the
    reaction says and rejoin, as a heartbeat with the same answer would (unless the
    generation has moved on already)."""
    FENCED_FETCH = "fenced fetch"
    """(OffsetFetch of a KIP-848 member) the epoch the fetch carried is not current: the
    member hears it as from a heartbeat. With no reset (a stale epoch: a newer one exists)
    the fetch is sent again, after the backoff, with the member's epoch then; with a reset
    (fenced or unknown: the partitions may be another's) the code's error is raised."""
    RAISE = "raise"
    """(OffsetCommit, OffsetFetch) raise the code's error class to the caller; the member
    carries on."""
    IGNORE = "ignore"
    """(LeaveGroup) log and carry on: the member is leaving anyway, its session expires."""
    REFRESH_METADATA = "refresh metadata"
    """(ShareFetch, ShareAcknowledge) the partition's leader is elsewhere or unknown: look it
    up again before the next request to it (its share session there is dropped)."""
    NEW_SESSION = "new share session"
    """(ShareFetch, ShareAcknowledge) the leader has no share session of this epoch: open a
    new one (epoch 0) at the next request to it, after the backoff."""
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


@dataclass(frozen=True, slots=True)
class Policy:
    """One error code: the class raised for it and each request's reaction (None: the
    request does not list the code and reacts as to any other, see ``DEFAULTS``)."""

    code: E
    error: type[BrokerError] = BrokerError
    find_coordinator: Reaction | None = None
    join_group: Reaction | None = None
    sync_group: Reaction | None = None
    heartbeat: Reaction | None = None
    leave_group: Reaction | None = None
    offset_commit: Reaction | None = None
    offset_fetch: Reaction | None = None
    describe_groups: Reaction | None = None
    consumer_group_heartbeat: Reaction | None = None
    share_group_heartbeat: Reaction | None = None
    share_fetch: Reaction | None = None
    share_acknowledge: Reaction | None = None

    @property
    def name(self) -> str:
        return self.code.name

    @property
    def retriable(self) -> bool:
        return self.error.retriable

    def listed(self, api: Api) -> Reaction | None:
        """This code's own reaction for ``api``; None if ``api`` does not list it."""
        return _LISTED[api](self)


# The field of a Policy that holds each request's reaction. Built once: a Policy is asked
# at every failed request, and enum members are slow to look up on Python 3.11.
_LISTED: Final[dict[Api, Callable[[Policy], Reaction | None]]] = {
    Api.FIND_COORDINATOR: attrgetter("find_coordinator"),
    Api.JOIN_GROUP: attrgetter("join_group"),
    Api.SYNC_GROUP: attrgetter("sync_group"),
    Api.HEARTBEAT: attrgetter("heartbeat"),
    Api.LEAVE_GROUP: attrgetter("leave_group"),
    Api.OFFSET_COMMIT: attrgetter("offset_commit"),
    Api.OFFSET_FETCH: attrgetter("offset_fetch"),
    Api.DESCRIBE_GROUPS: attrgetter("describe_groups"),
    Api.CONSUMER_GROUP_HEARTBEAT: attrgetter("consumer_group_heartbeat"),
    Api.SHARE_GROUP_HEARTBEAT: attrgetter("share_group_heartbeat"),
    Api.SHARE_FETCH: attrgetter("share_fetch"),
    Api.SHARE_ACKNOWLEDGE: attrgetter("share_acknowledge"),
}


BACKOFF: Final = Reaction(Next.RETRY_BACKOFF)
REDISCOVER: Final = Reaction(Next.FIND_COORDINATOR)
RETRY_NOW: Final = Reaction(Next.RETRY_NOW)
FATAL: Final = Reaction(Next.FATAL)
FATAL_RESET: Final = Reaction(Next.FATAL, Reset.MEMBER)
RAISE: Final = Reaction(Next.RAISE)
IGNORE: Final = Reaction(Next.IGNORE)
REJOIN_KEEP_ID: Final = Reaction(Next.REJOIN, Reset.GENERATION)
REFRESH: Final = Reaction(Next.REFRESH_METADATA)
NEW_SESSION: Final = Reaction(Next.NEW_SESSION)

# What each request does about a code it does not list (see the module docstring).
DEFAULTS: Final[dict[Api, Reaction]] = {
    Api.FIND_COORDINATOR: BACKOFF,
    Api.JOIN_GROUP: BACKOFF,
    Api.SYNC_GROUP: BACKOFF,
    Api.HEARTBEAT: BACKOFF,
    # Best effort: errors are logged and ignored.
    Api.LEAVE_GROUP: IGNORE,
    Api.OFFSET_COMMIT: RAISE,
    Api.OFFSET_FETCH: RAISE,
    Api.DESCRIBE_GROUPS: RAISE,
    Api.CONSUMER_GROUP_HEARTBEAT: BACKOFF,
    Api.SHARE_GROUP_HEARTBEAT: BACKOFF,
    Api.SHARE_FETCH: BACKOFF,
    # The acknowledgements failed: the caller learns it for each of their records.
    Api.SHARE_ACKNOWLEDGE: RAISE,
}

# The reactions each request's handler implements; a unit test holds the table to them.
HANDLED: Final[dict[Api, frozenset[Next]]] = {
    Api.FIND_COORDINATOR: frozenset({Next.RETRY_BACKOFF, Next.FATAL}),
    Api.JOIN_GROUP: frozenset(
        {
            Next.RETRY_NOW,
            Next.RETRY_WITH_MEMBER_ID,
            Next.RETRY_BACKOFF,
            Next.FIND_COORDINATOR,
            Next.FATAL,
        }
    ),
    Api.SYNC_GROUP: frozenset(
        {Next.RETRY_NOW, Next.RETRY_BACKOFF, Next.FIND_COORDINATOR, Next.FATAL}
    ),
    Api.HEARTBEAT: frozenset(
        {
            Next.RETRY_BACKOFF,
            Next.FIND_COORDINATOR,
            Next.REJOIN,
            Next.REJOIN_IF_STABLE,
            Next.FATAL,
        }
    ),
    # The coordinator moved or is loading: leave at the group's coordinator, while the close
    # allows (a departure on the wake-up channel may already have told the others).
    Api.LEAVE_GROUP: frozenset({Next.IGNORE, Next.FIND_COORDINATOR, Next.RETRY_BACKOFF}),
    Api.OFFSET_COMMIT: frozenset(
        {Next.FENCED_COMMIT, Next.FIND_COORDINATOR, Next.RETRY_BACKOFF, Next.RAISE}
    ),
    Api.OFFSET_FETCH: frozenset(
        {Next.FENCED_FETCH, Next.FIND_COORDINATOR, Next.RETRY_BACKOFF, Next.RAISE}
    ),
    Api.DESCRIBE_GROUPS: frozenset({Next.FIND_COORDINATOR, Next.RETRY_BACKOFF, Next.RAISE}),
    # KIP-848 (consumer_group.py): REJOIN loses the partitions and joins again at epoch 0.
    Api.CONSUMER_GROUP_HEARTBEAT: frozenset(
        {Next.RETRY_BACKOFF, Next.FIND_COORDINATOR, Next.REJOIN, Next.FATAL}
    ),
    # KIP-932 (share_group.py): REJOIN joins again at epoch 0 with the same member id.
    Api.SHARE_GROUP_HEARTBEAT: frozenset(
        {Next.RETRY_BACKOFF, Next.FIND_COORDINATOR, Next.REJOIN, Next.FATAL}
    ),
    # share_sessions.py: the fetch's own error, or one partition's.
    Api.SHARE_FETCH: frozenset(
        {Next.RETRY_BACKOFF, Next.REFRESH_METADATA, Next.NEW_SESSION, Next.FATAL}
    ),
    Api.SHARE_ACKNOWLEDGE: frozenset(
        {Next.RAISE, Next.REFRESH_METADATA, Next.NEW_SESSION, Next.FATAL}
    ),
}

POLICIES: Final[tuple[Policy, ...]] = (
    # The coordinator moved, is starting, or is busy.
    Policy(
        E.COORDINATOR_NOT_AVAILABLE,
        RetriableBrokerError,
        # On a fresh cluster while __consumer_offsets is being created: ask again.
        find_coordinator=BACKOFF,
        join_group=REDISCOVER,
        sync_group=REDISCOVER,
        heartbeat=REDISCOVER,
        leave_group=REDISCOVER,
        offset_commit=REDISCOVER,
        offset_fetch=REDISCOVER,
        describe_groups=REDISCOVER,
        consumer_group_heartbeat=REDISCOVER,
        share_group_heartbeat=REDISCOVER,
    ),
    Policy(
        E.NOT_COORDINATOR,
        RetriableBrokerError,
        find_coordinator=BACKOFF,
        join_group=REDISCOVER,
        sync_group=REDISCOVER,
        heartbeat=REDISCOVER,
        leave_group=REDISCOVER,
        offset_commit=REDISCOVER,
        offset_fetch=REDISCOVER,
        describe_groups=REDISCOVER,
        consumer_group_heartbeat=REDISCOVER,
        share_group_heartbeat=REDISCOVER,
    ),
    Policy(
        E.COORDINATOR_LOAD_IN_PROGRESS,
        RetriableBrokerError,
        join_group=BACKOFF,
        sync_group=BACKOFF,
        heartbeat=BACKOFF,
        leave_group=BACKOFF,
        offset_commit=BACKOFF,
        offset_fetch=BACKOFF,
        describe_groups=BACKOFF,
        consumer_group_heartbeat=BACKOFF,
        share_group_heartbeat=BACKOFF,
    ),
    Policy(
        E.REQUEST_TIMED_OUT,
        RetriableBrokerError,
        offset_commit=BACKOFF,
        offset_fetch=BACKOFF,
        describe_groups=BACKOFF,
    ),
    Policy(
        E.NETWORK_EXCEPTION,
        RetriableBrokerError,
        offset_commit=BACKOFF,
        offset_fetch=BACKOFF,
        describe_groups=BACKOFF,
    ),
    # OffsetFetch (require_stable): a transaction holding offsets for the partition is open.
    Policy(
        E.UNSTABLE_OFFSET_COMMIT, RetriableBrokerError, offset_commit=BACKOFF, offset_fetch=BACKOFF
    ),
    # The group is rebalancing, or this member's place in it is gone.
    Policy(
        E.MEMBER_ID_REQUIRED,
        RebalanceRequiredError,
        join_group=Reaction(Next.RETRY_WITH_MEMBER_ID),
    ),
    Policy(
        E.REBALANCE_IN_PROGRESS,
        RebalanceRequiredError,
        # JoinGroup: "could indicate a replication timeout on the broker": just join again.
        join_group=RETRY_NOW,
        sync_group=RETRY_NOW,
        heartbeat=Reaction(Next.REJOIN_IF_STABLE),
        offset_commit=Reaction(Next.FENCED_COMMIT),
    ),
    Policy(
        E.ILLEGAL_GENERATION,
        MembershipLostError,
        join_group=Reaction(Next.RETRY_NOW, Reset.GENERATION),
        sync_group=Reaction(Next.RETRY_NOW, Reset.GENERATION),
        heartbeat=Reaction(Next.REJOIN, Reset.GENERATION),
        offset_commit=Reaction(Next.FENCED_COMMIT, Reset.GENERATION),
    ),
    Policy(
        E.UNKNOWN_MEMBER_ID,
        MembershipLostError,
        join_group=Reaction(Next.RETRY_NOW, Reset.MEMBER),
        sync_group=Reaction(Next.RETRY_NOW, Reset.MEMBER),
        heartbeat=Reaction(Next.REJOIN, Reset.MEMBER),
        offset_commit=Reaction(Next.FENCED_COMMIT, Reset.MEMBER),
        # KIP-848: the member keeps its id and joins again at epoch 0 (as Kafka's do).
        consumer_group_heartbeat=Reaction(Next.REJOIN, Reset.GENERATION),
        offset_fetch=Reaction(Next.FENCED_FETCH, Reset.GENERATION),
        share_group_heartbeat=REJOIN_KEEP_ID,
    ),
    # Fatal to the member: a person must act.
    Policy(
        E.FENCED_INSTANCE_ID,
        FencedInstanceError,
        join_group=FATAL_RESET,
        sync_group=FATAL_RESET,
        heartbeat=FATAL_RESET,
        # Like Kafka, a commit resets nothing: the member asks to rejoin, and the
        # JoinGroup's answer (FENCED_INSTANCE_ID, fatal) stops it.
        offset_commit=Reaction(Next.FENCED_COMMIT),
    ),
    Policy(
        E.GROUP_AUTHORIZATION_FAILED,
        GroupAuthorizationError,
        find_coordinator=FATAL,
        join_group=FATAL,
        sync_group=FATAL,
        heartbeat=FATAL,
        consumer_group_heartbeat=FATAL,
        share_group_heartbeat=FATAL,
        share_fetch=FATAL,
        share_acknowledge=FATAL,
    ),
    Policy(
        E.INCONSISTENT_GROUP_PROTOCOL,
        InconsistentGroupProtocolError,
        join_group=FATAL,
        sync_group=FATAL,
    ),
    Policy(E.INVALID_SESSION_TIMEOUT, InvalidSessionTimeoutError, join_group=FATAL),
    Policy(E.INVALID_GROUP_ID, InvalidGroupIdError, join_group=FATAL),
    Policy(
        E.GROUP_MAX_SIZE_REACHED,
        GroupMaxSizeReachedError,
        join_group=FATAL,
        consumer_group_heartbeat=FATAL,
        share_group_heartbeat=FATAL,
    ),
    Policy(
        E.UNSUPPORTED_VERSION,
        UnsupportedVersionError,
        join_group=FATAL,
        consumer_group_heartbeat=FATAL,
        # A broker without share groups (before 4.1, or share.version off).
        share_group_heartbeat=FATAL,
        share_fetch=FATAL,
        share_acknowledge=FATAL,
    ),
    # FindCoordinator: a malformed request will not get better (Kafka throws it too).
    Policy(
        E.INVALID_REQUEST,
        find_coordinator=FATAL,
        consumer_group_heartbeat=FATAL,
        share_group_heartbeat=FATAL,
    ),
    # KIP-848 consumer groups. A fenced epoch: the partitions may be another's already.
    Policy(
        E.FENCED_MEMBER_EPOCH,
        MembershipLostError,
        consumer_group_heartbeat=Reaction(Next.REJOIN, Reset.GENERATION),
        offset_commit=Reaction(Next.FENCED_COMMIT, Reset.GENERATION),
        offset_fetch=Reaction(Next.FENCED_FETCH, Reset.GENERATION),
        share_group_heartbeat=REJOIN_KEEP_ID,
    ),
    # A commit made with an epoch the member has since moved past: nothing was committed;
    # the member is still in the group (a heartbeat brings the current epoch).
    Policy(
        E.STALE_MEMBER_EPOCH,
        RebalanceRequiredError,
        consumer_group_heartbeat=Reaction(Next.REJOIN, Reset.GENERATION),
        offset_commit=Reaction(Next.FENCED_COMMIT),
        offset_fetch=Reaction(Next.FENCED_FETCH),
    ),
    Policy(E.UNRELEASED_INSTANCE_ID, UnreleasedInstanceIdError, consumer_group_heartbeat=FATAL),
    Policy(E.UNSUPPORTED_ASSIGNOR, UnsupportedAssignorError, consumer_group_heartbeat=FATAL),
    Policy(
        E.INVALID_REGULAR_EXPRESSION,
        InvalidRegularExpressionError,
        consumer_group_heartbeat=FATAL,
    ),
    # Share groups (KIP-932): a partition's leader moved or is unknown here.
    Policy(
        E.NOT_LEADER_OR_FOLLOWER,
        RetriableBrokerError,
        share_fetch=REFRESH,
        share_acknowledge=REFRESH,
    ),
    Policy(
        E.LEADER_NOT_AVAILABLE, RetriableBrokerError, share_fetch=REFRESH, share_acknowledge=REFRESH
    ),
    Policy(
        E.FENCED_LEADER_EPOCH, RetriableBrokerError, share_fetch=REFRESH, share_acknowledge=REFRESH
    ),
    Policy(
        E.UNKNOWN_LEADER_EPOCH, RetriableBrokerError, share_fetch=REFRESH, share_acknowledge=REFRESH
    ),
    Policy(
        E.UNKNOWN_TOPIC_OR_PARTITION,
        RetriableBrokerError,
        share_fetch=REFRESH,
        share_acknowledge=REFRESH,
    ),
    Policy(
        E.UNKNOWN_TOPIC_ID, RetriableBrokerError, share_fetch=REFRESH, share_acknowledge=REFRESH
    ),
    Policy(
        E.INCONSISTENT_TOPIC_ID,
        RetriableBrokerError,
        share_fetch=REFRESH,
        share_acknowledge=REFRESH,
    ),
    Policy(
        E.KAFKA_STORAGE_ERROR, RetriableBrokerError, share_fetch=REFRESH, share_acknowledge=REFRESH
    ),
    Policy(
        E.FENCED_STATE_EPOCH, RetriableBrokerError, share_fetch=REFRESH, share_acknowledge=REFRESH
    ),
    # The leader lost this member's share session (it expired, the broker restarted), or
    # holds too many to open one.
    Policy(
        E.SHARE_SESSION_NOT_FOUND,
        RetriableBrokerError,
        share_fetch=NEW_SESSION,
        share_acknowledge=NEW_SESSION,
    ),
    Policy(
        E.INVALID_SHARE_SESSION_EPOCH,
        RetriableBrokerError,
        share_fetch=NEW_SESSION,
        share_acknowledge=NEW_SESSION,
    ),
    Policy(
        E.SHARE_SESSION_LIMIT_REACHED,
        RetriableBrokerError,
        share_fetch=NEW_SESSION,
        share_acknowledge=NEW_SESSION,
    ),
    # An acknowledgement of a record this member no longer holds (its lock ran out): the
    # caller learns it (AcquisitionLockExpiredError in recipes.queues).
    Policy(E.INVALID_RECORD_STATE, share_acknowledge=RAISE),
    Policy(
        E.TOPIC_AUTHORIZATION_FAILED,
        TopicAuthorizationError,
        share_group_heartbeat=FATAL,
        share_fetch=FATAL,
        share_acknowledge=FATAL,
    ),
    # Known codes with no reaction of their own: every request reacts as to any other code.
    Policy(E.UNKNOWN_SERVER_ERROR),
    Policy(E.OFFSET_OUT_OF_RANGE),
    Policy(E.CORRUPT_MESSAGE),
    Policy(E.OFFSET_METADATA_TOO_LARGE),
    Policy(E.INVALID_COMMIT_OFFSET_SIZE),
    Policy(E.NON_EMPTY_GROUP),
    Policy(E.GROUP_ID_NOT_FOUND),
    Policy(E.TOPIC_ALREADY_EXISTS),
)

BY_CODE: Final[dict[int, Policy]] = {p.code: p for p in POLICIES}
_register_classes({p.code: p.error for p in POLICIES})  # what broker_error() raises


def reaction(api: Api, code: int) -> Reaction:
    """What ``api`` does when it fails with ``code``."""
    policy = BY_CODE.get(code)
    listed = policy.listed(api) if policy is not None else None
    return listed if listed is not None else DEFAULTS[api]


def error_class(code: int) -> type[BrokerError]:
    """The class raised for ``code`` (``BrokerError`` for codes not in the table)."""
    policy = BY_CODE.get(code)
    return policy.error if policy is not None else BrokerError


# Per request, the codes it lists; older names, kept for the engine and its tests.
def _column(api: Api) -> dict[int, Reaction]:
    return {p.code: r for p in POLICIES if (r := p.listed(api)) is not None}


FIND_COORDINATOR: Final = _column(Api.FIND_COORDINATOR)
JOIN_GROUP: Final = _column(Api.JOIN_GROUP)
SYNC_GROUP: Final = _column(Api.SYNC_GROUP)
HEARTBEAT: Final = _column(Api.HEARTBEAT)
FIND_COORDINATOR_DEFAULT: Final = DEFAULTS[Api.FIND_COORDINATOR]
UNLISTED: Final = DEFAULTS[Api.JOIN_GROUP]


def join_group(code: int) -> Reaction:
    return reaction(Api.JOIN_GROUP, code)


def sync_group(code: int) -> Reaction:
    return reaction(Api.SYNC_GROUP, code)


def heartbeat(code: int) -> Reaction:
    return reaction(Api.HEARTBEAT, code)


def find_coordinator(code: int) -> Reaction:
    return reaction(Api.FIND_COORDINATOR, code)


# ---------------------------------------------------------------------- the table in docs

_NEXT_TEXT: Final[dict[Next, str]] = {
    Next.RETRY_NOW: "join again at once",
    Next.RETRY_WITH_MEMBER_ID: "store the given member id, join again at once",
    Next.RETRY_BACKOFF: "backoff",
    Next.FIND_COORDINATOR: "find coordinator",
    Next.REJOIN: "rejoin",
    Next.REJOIN_IF_STABLE: "rejoin if STABLE; counts as a live session",
    Next.FENCED_COMMIT: "`CommitFailedError`, rejoin",
    Next.FENCED_FETCH: "tell the member; retry with its new epoch, or raise if reset",
    Next.RAISE: "raise the error",
    Next.IGNORE: "logged, ignored",
    Next.REFRESH_METADATA: "find the partition's leader again",
    Next.NEW_SESSION: "new share session, after backoff",
    Next.FATAL: "fatal",
}
_RESET_TEXT: Final[dict[Reset, str]] = {
    Reset.NOTHING: "",
    Reset.GENERATION: "reset generation; ",
    Reset.MEMBER: "reset generation and member id; ",
}


def _cell(reaction: Reaction | None) -> str:
    if reaction is None:
        return ""
    return _RESET_TEXT[reaction.reset] + _NEXT_TEXT[reaction.next]


def _line(cells: list[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def markdown_table() -> str:
    """The table as docs/errors.md shows it (a blank cell: as for any other code)."""
    header = ["Code", "Error class", "Retriable", *(api.value for api in Api)]
    lines = [_line(header), "|" + "---|" * len(header)]
    for p in POLICIES:
        cells = [
            f"{p.name} ({p.code.value})",
            f"`{p.error.__name__}`",
            "yes" if p.retriable else "",
            *(_cell(p.listed(api)) for api in Api),
        ]
        lines.append(_line(cells))
    others = ["any other code", "`BrokerError`", "", *(_cell(DEFAULTS[api]) for api in Api)]
    lines.append(_line(others))
    return "\n".join(lines) + "\n"
