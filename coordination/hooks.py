"""Hooks: what a member tells monitoring as it happens (rebalances, failed heartbeats,
leadership, tasks, commits, leases, a share consumer's records).

Give any recipe or :class:`~coordination.Coordinator` ``hooks=[...]``: objects of a
:class:`CoordinationHooks` subclass that override the methods they care about. Each
method gets one frozen event, whose fields may grow in later versions (read them by
name). The exporters in :mod:`coordination.exporters` are hooks of this kind.

Example:
    class Alerts(CoordinationHooks):
        def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
            print(f"{event.group_id}: heartbeat failed: {event.error}")

    election = LeaderElection("orders-leader", hooks=[Alerts()], bootstrap_servers="kafka:9092")

Threads and failures:
    A hook runs on the thread where the event happened (the membership thread, the
    heartbeat thread, a recipe's callback thread), after the member's locks are released.
    Keep it short: a slow hook delays what follows it (a heartbeat, the next rebalance).
    An exception a hook raises is logged (with its traceback the first time for each
    method of each hook) and the member carries on: monitoring never breaks coordination.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import ConfigurationError

__all__ = [
    "AcknowledgementFailed",
    "CommitFailed",
    "CoordinationHooks",
    "Deposed",
    "Elected",
    "HeartbeatFailed",
    "LeaseAtRisk",
    "RebalanceFailed",
    "RebalanceFinished",
    "RebalanceStarted",
    "RecordsAcknowledged",
    "RecordsAcquired",
    "RecordsUnpolled",
    "ShareLagRead",
    "TaskOverran",
    "TaskStarted",
    "TaskStopped",
]

log = logging.getLogger("coordination.hooks")

_Event = TypeVar("_Event")


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceStarted:
    """The member began to (re)join its group: its first JoinGroup of a rebalance."""

    group_id: str
    member_id: str
    """The member id it joins with ("" on a first join)."""
    reason: str
    """Why (the KIP-800 reason it sends): a first join, a metadata change, a failed heartbeat."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceFinished:
    """The member is stable in a new generation (its SyncGroup succeeded)."""

    group_id: str
    member_id: str
    generation: int
    is_leader: bool
    """Whether this member computed the assignment (the group leader, not an elected leader)."""
    reason: str
    """Why the rebalance began (as in :class:`RebalanceStarted`)."""
    duration_s: float
    """From the first JoinGroup to the successful SyncGroup, failed attempts included."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceFailed:
    """A JoinGroup or SyncGroup attempt failed; the member retries (or stops, if fatal)."""

    group_id: str
    member_id: str
    error: str
    """What failed, e.g. "JoinGroup returned COORDINATOR_NOT_AVAILABLE"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatFailed:
    """A heartbeat got an error or no answer (a rebalance under way is not a failure)."""

    group_id: str
    member_id: str
    generation: int
    error: str
    """The broker's error name (e.g. "UNKNOWN_MEMBER_ID") or "no response: ..."."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseAtRisk:
    """The member's lease (how long the broker surely still counts it) fell to the recipe's
    margin: the recipe now gives up what it holds (steps down, stops tasks) to stay safe."""

    group_id: str
    member_id: str
    remaining_s: float
    """Seconds left of the lease above the floor (<= 0)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Elected:
    """This member became the elected leader."""

    group_id: str
    member_id: str
    identity: str
    token: int
    """The leadership's fencing token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deposed:
    """This member stopped being the elected leader."""

    group_id: str
    member_id: str
    identity: str
    token: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStarted:
    """This worker's ``start_task`` returned for a task."""

    group_id: str
    member_id: str
    task: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStopped:
    """This worker's ``stop_task`` returned (or raised) for a task: it no longer runs here."""

    group_id: str
    member_id: str
    task: str
    duration_s: float
    """How long ``stop_task`` took."""
    error: str | None = None
    """What ``stop_task`` raised, None if it returned."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOverran:
    """A ``stop_task`` call passed ``stop_timeout_ms`` and still runs."""

    group_id: str
    member_id: str
    task: str
    timeout_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitFailed:
    """An offset commit was refused or got no answer."""

    group_id: str
    member_id: str
    error: str
    partitions: int
    """How many partitions the commit was for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordsAcquired:
    """A share consumer's poll acquired records (share groups): held under their
    acquisition lock until acknowledged."""

    group_id: str
    member_id: str
    count: int
    redelivered: int
    """Of those, records delivered before (delivery count above 1)."""
    fetched_at: float
    """When the ShareFetch that acquired them was sent, by the consumer's clock
    (``member.clock.monotonic()``): the broker acquired them after it, and their locks
    run from about then (earlier than the poll, when fetching ahead)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordsUnpolled:
    """Records of one partition a share consumer acquired but no poll handed out (share
    groups): each was a delivery (its delivery count spent) that the application never saw.
    The broker delivers them again, or archives them once they reached the delivery limit.
    (Kafka 4.1 gave back the delivery of records released by a share session's close,
    KAFKA-17541; Kafka 4.2 and later count it, KAFKA-19972.) Told once per partition and
    reason."""

    group_id: str
    member_id: str
    topic: str
    partition: int
    offsets: tuple[int, ...]
    delivery_counts: tuple[int, ...]
    """The delivery count of each record of ``offsets``, in the same order."""
    reason: str
    """``"lock_expired"`` (the lock ran out before a poll could hand them out: fetched ahead
    during long work between polls, or an answer read late), ``"closed"`` (fetched ahead,
    released by ``close()``) or ``"undecodable"`` (their batches could not be decoded: the
    offsets and delivery counts are the answer's acquired ranges; released at once)."""
    fetched_at: float
    """When the ShareFetch that acquired them was sent, as in :class:`RecordsAcquired`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordsAcknowledged:
    """A share consumer's acknowledgements of one type took effect on one partition (share
    groups). A RENEW is a lock renewal: the records stay held."""

    group_id: str
    member_id: str
    topic: str
    partition: int
    ack_type: str
    """``"ACCEPT"``, ``"RELEASE"``, ``"REJECT"`` or ``"RENEW"``."""
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgementFailed:
    """A share consumer's acknowledgements of records of one partition did not take effect
    (share groups): the records are not acknowledged (``recipes.queues.AcknowledgementError``)."""

    group_id: str
    member_id: str
    topic: str
    partition: int
    count: int
    reason: str
    """``"lock_expired"`` (the acquisition lock had run out), ``"uncertain"`` (no answer:
    the broker may have applied them) or ``"refused"`` (another error)."""
    error: str
    """The broker's error name (e.g. "INVALID_RECORD_STATE") or "no response"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareLagRead:
    """A share consumer read the lag of its assignment's share-partitions from the group's
    coordinator (share groups: ``lag()``, or a poll every ``lag_refresh_ms``)."""

    group_id: str
    member_id: str
    lag: dict[tuple[str, int], int]
    """``{(topic, partition): lag}``: the records not done yet (acquired ones included)
    of each share-partition Kafka gave a lag for."""


class CoordinationHooks:
    """Override the methods for the events you want; the others do nothing.

    See the module's docstring for the threads they run on and what an exception does.
    """

    def on_rebalance_started(self, event: RebalanceStarted) -> None:
        """The member began a rebalance."""

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        """The member is stable in a new generation."""

    def on_rebalance_failed(self, event: RebalanceFailed) -> None:
        """A join or sync attempt failed."""

    def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
        """A heartbeat failed."""

    def on_lease_at_risk(self, event: LeaseAtRisk) -> None:
        """The member's lease ran down to its margin."""

    def on_elected(self, event: Elected) -> None:
        """This member became the elected leader (leader election)."""

    def on_deposed(self, event: Deposed) -> None:
        """This member stopped leading (leader election)."""

    def on_task_started(self, event: TaskStarted) -> None:
        """A task started on this worker (task distribution)."""

    def on_task_stopped(self, event: TaskStopped) -> None:
        """A task stopped on this worker (task distribution)."""

    def on_task_overran(self, event: TaskOverran) -> None:
        """A task's stop overran its timeout (task distribution)."""

    def on_commit_failed(self, event: CommitFailed) -> None:
        """An offset commit failed (consumer partitioning)."""

    def on_records_acquired(self, event: RecordsAcquired) -> None:
        """A poll acquired records (share consumer)."""

    def on_records_unpolled(self, event: RecordsUnpolled) -> None:
        """Records were acquired that no poll handed out (share consumer)."""

    def on_records_acknowledged(self, event: RecordsAcknowledged) -> None:
        """Acknowledgements took effect (share consumer)."""

    def on_acknowledgement_failed(self, event: AcknowledgementFailed) -> None:
        """Acknowledgements did not take effect (share consumer)."""

    def on_share_lag_read(self, event: ShareLagRead) -> None:
        """The share-partitions' lag was read (share consumer)."""


class HookCaller:
    """Calls every hook's method for an event, and keeps a failing hook from harming the
    member (internal: the engine and the recipes hold one each).

    One typed method per event (``rebalance_started``, ``lease_at_risk``, ...), so that a
    misspelt event, or the wrong event for a method, is a type error. Each takes the event,
    or a function that builds it: that runs only when some hook listens, so a member
    without hooks builds nothing. Call them without holding the member's lock."""

    def __init__(self, hooks: Sequence[CoordinationHooks]) -> None:
        self._hooks = tuple(hooks)
        self._lock = threading.Lock()
        self._failed: set[tuple[int, str]] = set()  # (hook, method) that raised before

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def rebalance_started(self, event: RebalanceStarted | Callable[[], RebalanceStarted]) -> None:
        self._dispatch(CoordinationHooks.on_rebalance_started, event)

    def rebalance_finished(
        self, event: RebalanceFinished | Callable[[], RebalanceFinished]
    ) -> None:
        self._dispatch(CoordinationHooks.on_rebalance_finished, event)

    def rebalance_failed(self, event: RebalanceFailed | Callable[[], RebalanceFailed]) -> None:
        self._dispatch(CoordinationHooks.on_rebalance_failed, event)

    def heartbeat_failed(self, event: HeartbeatFailed | Callable[[], HeartbeatFailed]) -> None:
        self._dispatch(CoordinationHooks.on_heartbeat_failed, event)

    def lease_at_risk(self, event: LeaseAtRisk | Callable[[], LeaseAtRisk]) -> None:
        self._dispatch(CoordinationHooks.on_lease_at_risk, event)

    def elected(self, event: Elected | Callable[[], Elected]) -> None:
        self._dispatch(CoordinationHooks.on_elected, event)

    def deposed(self, event: Deposed | Callable[[], Deposed]) -> None:
        self._dispatch(CoordinationHooks.on_deposed, event)

    def task_started(self, event: TaskStarted | Callable[[], TaskStarted]) -> None:
        self._dispatch(CoordinationHooks.on_task_started, event)

    def task_stopped(self, event: TaskStopped | Callable[[], TaskStopped]) -> None:
        self._dispatch(CoordinationHooks.on_task_stopped, event)

    def task_overran(self, event: TaskOverran | Callable[[], TaskOverran]) -> None:
        self._dispatch(CoordinationHooks.on_task_overran, event)

    def commit_failed(self, event: CommitFailed | Callable[[], CommitFailed]) -> None:
        self._dispatch(CoordinationHooks.on_commit_failed, event)

    def records_acquired(self, event: RecordsAcquired | Callable[[], RecordsAcquired]) -> None:
        self._dispatch(CoordinationHooks.on_records_acquired, event)

    def records_unpolled(self, event: RecordsUnpolled | Callable[[], RecordsUnpolled]) -> None:
        self._dispatch(CoordinationHooks.on_records_unpolled, event)

    def records_acknowledged(
        self, event: RecordsAcknowledged | Callable[[], RecordsAcknowledged]
    ) -> None:
        self._dispatch(CoordinationHooks.on_records_acknowledged, event)

    def acknowledgement_failed(
        self, event: AcknowledgementFailed | Callable[[], AcknowledgementFailed]
    ) -> None:
        self._dispatch(CoordinationHooks.on_acknowledgement_failed, event)

    def share_lag_read(self, event: ShareLagRead | Callable[[], ShareLagRead]) -> None:
        self._dispatch(CoordinationHooks.on_share_lag_read, event)

    def _dispatch(
        self,
        method: Callable[[CoordinationHooks, _Event], None],
        event: _Event | Callable[[], _Event],
    ) -> None:
        """Call each hook's override of ``method`` (named through the base class, so that
        mypy checks the name and the event's type)."""
        if self._hooks:
            self.emit(method.__name__, event() if callable(event) else event)

    def emit(self, method: str, event: Any) -> None:
        """Call each hook's ``method`` with ``event`` (the typed methods above go through
        this; prefer them)."""
        for hook in self._hooks:
            try:
                getattr(hook, method)(event)
            except Exception:
                key = (id(hook), method)
                with self._lock:
                    first = key not in self._failed
                    self._failed.add(key)
                log.log(
                    logging.ERROR if first else logging.DEBUG,
                    "hook %s.%s raised; the member carries on",
                    type(hook).__name__,
                    method,
                    exc_info=first,
                )


def check_hooks(hooks: Any) -> tuple[CoordinationHooks, ...]:
    """``hooks`` as a tuple (None: no hooks), or a ConfigurationError naming what is wrong."""

    if hooks is None:  # every recipe and face takes it, as the async task face always did
        return ()
    if isinstance(hooks, CoordinationHooks):
        raise ConfigurationError("hooks must be a list of CoordinationHooks, e.g. hooks=[h]")
    try:
        given = tuple(hooks)
    except TypeError:
        raise ConfigurationError(
            f"hooks must be a list of CoordinationHooks, got {hooks!r}"
        ) from None
    for hook in given:
        if not isinstance(hook, CoordinationHooks):
            raise ConfigurationError(
                f"hooks must be CoordinationHooks (subclass coordination.hooks."
                f"CoordinationHooks), got {type(hook).__name__}"
            )
    return given
