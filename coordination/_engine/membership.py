"""The membership engine: finds the coordinator, joins, syncs, heartbeats, leaves.

The protocol, in Kafka's four phases:

1. Find the coordinator: FindCoordinator to any broker names the broker that
   coordinates the group; it may move later (NOT_COORDINATOR, disconnects).
2. Join: JoinGroup with this member's protocols. A new dynamic member first
   gets MEMBER_ID_REQUIRED and an id, and joins again with it (KIP-394). The
   broker parks the request until every member has joined (or the rebalance
   timeout passes), starts a new generation, picks a protocol and a leader,
   and sends the leader every member's metadata.
3. Sync: the leader runs ``perform_assignment`` and sends the result in its
   SyncGroup; every member's SyncGroup returns its own assignment.
4. Stable: heartbeats keep the session alive; a heartbeat answered with
   REBALANCE_IN_PROGRESS means phase 2 again.

Threads. The *membership thread* runs phases 1-3 and every user callback but
``on_leave_prepare`` (which runs on the thread that calls ``close``). The
*heartbeat thread* sends heartbeats in COMPLETING_REBALANCE and STABLE, so a
slow callback never costs the member its session. Both send through the
transport concurrently; kafka-python's network thread multiplexes them.

A note on locking: all membership state (state, generation, coordinator,
rejoin reason) is guarded by ``_lock``; requests are sent without holding it.
A request remembers the generation it was sent in, and its response only acts
if the generation is still the same (Kafka's ``sentGeneration``): a late
heartbeat error must not reset a generation that was joined meanwhile. User
callbacks run under ``_callback_lock`` so they never overlap.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, cast

from .._config import CoordinatorConfig
from .._logging import MemberLogAdapter
from .._metrics import MemberMetrics, RebalanceRecord
from .._protocol import messages as msg
from .._protocol.error_codes import ErrorCode, error_name
from .._transport.base import CoordinatorNode, FollowUp, Transport, TransportError, Wakeups
from .._types import NO_GENERATION, Generation, Member, MemberState, ProtocolMetadata
from ..errors import (
    AssignmentError,
    BrokerError,
    ConnectionFailedError,
    CoordinationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
    FatalBrokerError,
    InconsistentGroupProtocolError,
    broker_error,
)
from ..hooks import (
    HeartbeatFailed,
    HookCaller,
    RebalanceFailed,
    RebalanceFinished,
    RebalanceStarted,
)
from . import classify
from .backoff import ExponentialBackoff
from .classify import Api, Next, Reaction, Reset
from .clock import SYSTEM_CLOCK, Clock, Thread
from .heartbeat import HeartbeatTimers

log = logging.getLogger("coordination.member")

# JoinGroup waits this much longer than the rebalance timeout (Kafka's JOIN_GROUP_TIMEOUT_LAPSE).
_JOIN_TIMEOUT_LAPSE_S = 5.0
# How often idle engine threads look at their stop flag even if nobody wakes them.
_IDLE_WAIT_S = 1.0
# What the broker stores per member besides metadata and assignment (client id, host, timeouts).
_MEMBER_OVERHEAD = 128
# How often a lasting failure to reach the cluster is logged at WARNING.
_UNREACHABLE_WARN_EVERY_S = 30.0
# How often a static member waiting out its takeover fence looks for a new rebalance.
_FENCE_POLL_S = 0.1
# When a woken member heartbeats, after the wake-up: at once, then in case the announced
# change had not reached the coordinator yet.
_WAKE_HEARTBEATS_S = (0.0, 0.01, 0.05, 0.25)
# The same, for a member whose sibling in this process asks for both (see wake()): only in
# case the sibling's answer never comes (it closed, or its heartbeat failed).
_SIBLING_ASKS_WAKE_HEARTBEATS_S = (0.1, 0.3)
# How long a leaving member waits for its wake-up to be written before closing.
_LEAVE_WAKEUP_WAIT_S = 1.0
# Completed rebalances a member remembers for metrics() and describe's timeline.
_TIMELINE_LENGTH = 20


class Callbacks(Protocol):
    """What the engine calls; ``coordination.Coordinator`` implements it."""

    rejoin_changes_metadata: bool

    def protocol_type(self) -> str: ...
    def metadata(self) -> Sequence[ProtocolMetadata]: ...
    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]: ...
    def on_join_prepare(self, generation: int, member_id: str) -> None: ...
    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None: ...
    def on_leave_prepare(self) -> None: ...


class _Stopped(Exception):
    """The engine is closing; unwind the membership thread."""


@dataclass(frozen=True, slots=True)
class _Joined:
    """A completed join and sync whose assignment still has to reach on_join_complete."""

    generation: Generation
    assignment: bytes
    is_leader: bool


@dataclass(frozen=True, slots=True)
class _Failed:
    """A join or sync attempt that failed, and what to do about it."""

    reaction: Reaction
    reason: str
    sent: Generation
    error: CoordinationError | None = None


@dataclass(slots=True)
class _Counters:
    rebalance_total: int = 0
    failed_rebalance_total: int = 0
    join_total: int = 0
    sync_total: int = 0
    heartbeat_total: int = 0
    coordinator_discoveries: int = 0
    rebalance_latency_sum_s: float = 0.0
    rebalance_latency_max_s: float = 0.0
    last_rebalance_latency_s: float | None = None
    last_rebalance_at: float | None = None
    rebalance_started_at: float | None = None
    last_heartbeat_at: float | None = None
    rejoin_reasons: list[str] = field(default_factory=list)
    wakeups: int = 0
    # The rebalance under way: why it began, when (wall clock), and its failed attempts.
    rebalance_reason: str = ""
    rebalance_started_wall: float = 0.0
    rebalance_failures: int = 0
    recent_rebalances: deque[RebalanceRecord] = field(
        default_factory=lambda: deque(maxlen=_TIMELINE_LENGTH)
    )


class _RetryLog:
    """The level a retried problem is logged at: INFO while it is routine (a retriable
    answer: a coordinator loading the group, busy, or moving, as Kafka's clients log them),
    WARNING once it has lasted ``_UNREACHABLE_WARN_EVERY_S`` (then at most that often) and
    for anything else (an answer the engine does not expect, a user callback that failed),
    which needs a person."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._warned_at: float | None = None

    def level(self, now: float, routine: bool) -> int:
        if self._since is None:
            self._since = now
        if not routine:
            return logging.WARNING
        if now - self._since < _UNREACHABLE_WARN_EVERY_S:
            return logging.INFO
        if self._warned_at is None or now - self._warned_at >= _UNREACHABLE_WARN_EVERY_S:
            self._warned_at = now
            return logging.WARNING
        return logging.INFO

    def clear(self) -> None:
        """The problem is over (the member is stable, a heartbeat was answered)."""
        self._since = self._warned_at = None


def _routine(error: CoordinationError | None) -> bool:
    """Whether retrying ``error`` is routine: a broker answer its class calls retriable."""
    return isinstance(error, BrokerError) and error.retriable


class GroupMembership:
    """One member of one group: Kafka's ``AbstractCoordinator`` without the consumer."""

    def __init__(
        self,
        callbacks: Callbacks,
        config: CoordinatorConfig,
        transport: Transport,
        clock: Clock | None = None,
        wakeups: Wakeups | None = None,
    ) -> None:
        self._callbacks = callbacks
        self._config = config
        self._generation: Generation = NO_GENERATION  # before the logger, which reads it
        self._log = MemberLogAdapter(log, config.group_id, self.peek_generation)
        self._hooks = HookCaller(config.hooks)
        self._transport = transport
        self._wakeups = wakeups
        self._clock: Clock = clock or SYSTEM_CLOCK
        self._protocol_type = ""  # asked at start(), once the subclass is fully built
        self._lock = self._clock.rlock()
        self._changed = self._clock.condition(self._lock)
        self._callback_lock = self._clock.rlock()
        self._stop = self._clock.event()

        self._state = MemberState.UNJOINED
        self._generation = NO_GENERATION
        self._leader_id: str | None = None
        self._coordinator: CoordinatorNode | None = None
        # None when no rejoin is needed; otherwise why one is (sent as the KIP-800 reason).
        self._rejoin_reason: str | None = "the member is joining the group for the first time"
        self._rejoin_requests = 0  # bumped by every request_rejoin, to not lose one mid-join
        self._needs_join_prepare = True
        self._pending: _Joined | None = None
        self._fatal: CoordinationError | None = None
        self._last_error: str | None = None
        self._closing = False
        # Set (under _callback_lock) once on_leave_prepare has run: LeaveGroup is sent only
        # after it, and no join callback runs after it.
        self._leave_prepared = False
        # A static member that got a new member id may have replaced an earlier process with
        # the same group_instance_id (KIP-345: at once, not after a session). That process may
        # act on its assignment until its own lease ends, so this member's assignments take
        # effect no earlier than this (engine clock); None when there is nothing to wait for.
        self._takeover_fence_until: float | None = None
        # While perform_assignment runs: when it overruns the rebalance timeout (engine clock).
        self._assignment_overdue_at: float | None = None
        # Whether the transport was asked to prepare later requests (once, after the first
        # join: see _warm_up_once).
        self._warmed_up = False
        # When FindCoordinator began failing to get any answer, and when that was last logged.
        self._unreachable_since: float | None = None
        self._unreachable_warned_at: float | None = None
        # The generation and the send time of the last request whose success proved that the
        # broker counted this member (a JoinGroup or Heartbeat): the broker's session
        # and join timers started no earlier than that, so it cannot have removed the member
        # before that time plus min(session timeout, rebalance timeout).
        self._confirmed: tuple[Generation, float] | None = None
        # How long after a confirmation the broker cannot have removed the member.
        self._lease_s = min(config.session_timeout_ms, config.rebalance_timeout_ms) / 1000
        # The generation this member held when it sent its first JoinGroup since it was last
        # stable, and when it sent it (see _confirm_join_locked).
        self._joins_since_stable: tuple[int, float] | None = None
        # Whether a JoinGroup of this rebalance got no answer (it may have joined a phase).
        self._join_answer_lost = False
        # The newest generation this member id was answered (a new member id starts over).
        self._highest_generation = -1
        # This member's own id that it gave up to prove its place again (see
        # _renew_lease_locked): a dynamic member leaves it before the next JoinGroup.
        self._stale_member_id: str | None = None
        # Heartbeats another member's wake-up asked for (engine clock), soonest first.
        self._wake_at: list[float] = []
        # Whether the group told this member that a rebalance is under way since it was last
        # stable: its JoinGroup then follows the others, and wakes nobody.
        self._rebalance_told = False

        now = self._clock.monotonic()
        self._timers = HeartbeatTimers(
            interval_s=config.heartbeat_interval_ms / 1000,
            session_timeout_s=config.session_timeout_ms / 1000,
            now=now,
        )
        self._retry_backoff = ExponentialBackoff(
            config.retry_backoff_ms / 1000,
            config.retry_backoff_max_ms / 1000,
            rng=self._clock.random(),
        )
        self._find_backoff = ExponentialBackoff(
            config.retry_backoff_ms / 1000,
            config.retry_backoff_max_ms / 1000,
            rng=self._clock.random(),
        )
        self._counters = _Counters()
        self._threads: list[Thread] = []
        # How retries of a rebalance, and of heartbeats, are logged (see _RetryLog).
        self._join_retries = _RetryLog()
        self._heartbeat_retries = _RetryLog()

    # ------------------------------------------------------------------ public view

    @property
    def state(self) -> MemberState:
        with self._lock:
            return self._state

    @property
    def generation(self) -> Generation:
        with self._lock:
            return self._generation

    def emit(self, method: str, event: Callable[[], object]) -> None:
        """Tell the hooks (if any) of an event; ``event`` makes it, only when someone
        listens. Call it without holding the member's lock."""
        if self._hooks:
            self._hooks.emit(method, event())

    def peek_generation(self) -> Generation:
        """The current generation, read without the lock (for log records)."""
        return self._generation

    def generation_if_stable(self) -> Generation | None:
        with self._lock:
            return self._generation if self._state is MemberState.STABLE else None

    @property
    def leader_id(self) -> str | None:
        with self._lock:
            return self._leader_id

    @property
    def coordinator(self) -> CoordinatorNode | None:
        with self._lock:
            return self._coordinator

    @property
    def fatal_error(self) -> CoordinationError | None:
        with self._lock:
            return self._fatal

    @property
    def config(self) -> CoordinatorConfig:
        return self._config

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def transport(self) -> Transport:
        return self._transport

    def find_coordinator(self, deadline: float) -> bool:
        """Find the coordinator from any thread (e.g. for an offset request made in a
        callback, while the membership thread cannot look). False if the deadline passed.

        Raises:
            CoordinatorStateError: the member is closing.
        """
        try:
            return self.ensure_coordinator_ready(deadline)
        except _Stopped:
            raise CoordinatorStateError(f"{self._who()}: the member is closed") from None

    def forget_coordinator(self, reason: str) -> None:
        """Drop the coordinator (it moved or failed); the membership thread finds it again."""
        self._mark_coordinator_unknown(reason)

    def pause(self, seconds: float) -> None:
        """Sleep on the engine's clock (tests' manual clocks advance instead)."""
        self._clock.sleep(seconds, self._clock.event())

    def react_to_fenced_request(self, sent: Generation, reset: Reset, api: str, code: int) -> None:
        """A request of ``sent`` was refused for its generation: reset and rejoin, once."""
        with self._lock:
            if self._generation != sent or self._state is MemberState.CLOSED:
                return  # already handled (e.g. by a heartbeat with the same answer)
            if reset is not Reset.NOTHING:
                self._reset_locked(reset)
            self._request_rejoin_locked(f"{api} returned {error_name(code)}")
            self._changed.notify_all()

    def membership_lease(self) -> float:
        """Seconds during which the broker cannot have removed this member; 0.0 if none."""
        with self._lock:
            # A member rejoining (PREPARING_REBALANCE) keeps its generation and its place in
            # the group until the broker answers; a reset or leave changes the generation.
            gone = self._state in (MemberState.UNJOINED, MemberState.CLOSED)
            if gone or self._confirmed is None or self._confirmed[0] != self._generation:
                return 0.0
            confirmed_at = self._confirmed[1]
        return max(0.0, confirmed_at + self._lease_s - self._clock.monotonic())

    def _confirm_join_locked(
        self, generation: Generation, sent_at: float, *, kept_static_follower: bool = False
    ) -> bool:
        """A JoinGroup sent at ``sent_at`` answered ``generation``: what that proves about the
        member's session at the broker, which its lease may not outlast. Returns whether the
        broker restarted the session (False: it runs on as it was).

        - The generation the member held when it began joining: nothing. A follower that
          rejoins a stable group unchanged gets it back at once, its session timer left as it
          was; the lease keeps what it had.
        - A newer generation than any this member saw: a join phase completed while this
          JoinGroup waited in it (or a static member took its instance's place), and the
          broker restarted the member's session then, after ``sent_at`` (not necessarily
          before the answer was read: the process may have been paused meanwhile, so only
          the send time is a safe start). If an earlier JoinGroup of this rebalance lost its
          answer, the phase may have been that one's, so the lease counts from the first
          JoinGroup of the rebalance instead.
        - An older one: a new coordinator loaded the group as it was stored (a rebalance was
          lost in the move). When it restarted the session is unknown: no lease; the member
          rejoins as a new one at its first heartbeat (see _renew_lease_locked).

        ``kept_static_follower``: a static member rejoined with its member id and was answered
        as a follower. A newer generation then proves nothing either: a join phase that
        completes without a static member's JoinGroup keeps it in the group (a dynamic one is
        removed), so its JoinGroup may have reached a Stable group of that generation, which
        answers a follower at once and leaves its session timer as it was. The lease then
        needs the heartbeat before the SyncGroup (see _proving_heartbeat).
        """
        started = self._joins_since_stable
        held = started[0] if started is not None else self._generation.generation_id
        gid = generation.generation_id
        self._highest_generation, highest = (
            max(self._highest_generation, gid),
            self._highest_generation,
        )
        if kept_static_follower and gid > held:
            return False
        if gid == held:
            confirmed = self._confirmed
            if confirmed is not None and confirmed[0].generation_id == gid:
                self._confirmed = (generation, confirmed[1])
            return False
        if gid > highest:
            # After a lost answer, the phase may have been that JoinGroup's: count from the first.
            counted_from = started[1] if started is not None and self._join_answer_lost else sent_at
            self._confirmed = (generation, counted_from)
        return True

    def _missed_generations_locked(self, answered: int) -> str | None:
        """Why the assignment this static member holds may belong to another member now, if
        the JoinGroup answered a generation past the next one (None otherwise).

        A join phase that completes without a static member's JoinGroup keeps the member
        with the metadata of its previous join (a dynamic one is removed, and learns it
        from UNKNOWN_MEMBER_ID). That generation was assigned from what the member claimed
        before its last assignment, so what it was handed since (a static restart's
        assignment, a late ``on_join_complete``) may have gone to another member, who may
        hold it now with a lease of its own. The member reports its assignment lost
        (``on_join_prepare(-1, ...)``) and joins again without it. A static member whose
        JoinGroup answer was lost looks the same and pays the same (once).
        """
        held = self._generation.generation_id
        if not self._config.is_static or held < 0 or answered <= held + 1:
            return None
        return (
            f"JoinGroup answered generation {answered}, this member held {held}: a generation "
            "completed without its JoinGroup, and what it holds may have been assigned to "
            "another member"
        )

    def _renew_lease_locked(self, sent: Generation, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was answered NONE: renew the lease if it still held
        when the heartbeat left.

        A coordinator that is loading the group answers every heartbeat NONE without looking
        (Kafka does, 3.x and 4.x), even that of a member it removed before it moved, and a
        member cannot tell such an answer from a real one. A NONE is safe to believe only for
        a member whose lease still held when it sent the heartbeat: the broker could not have
        removed it, and a coordinator that loads the group gives its members new sessions.
        A member whose lease ran out has no proof of its place: it rejoins as a new member
        (a static one takes its instance's place again), which costs a rebalance, and this
        happens only after the heartbeats went unanswered for a whole lease.
        """
        confirmed = self._confirmed
        if (
            confirmed is not None
            and confirmed[0] == sent
            and confirmed[1] + self._lease_s > sent_at
        ):
            self._confirmed = (sent, max(sent_at, confirmed[1]))
        elif self._state is MemberState.STABLE:
            # Prove the place again with a join phase, which restarts the session: leave (a
            # dynamic member's old id would hold up the next phase until its session ends)
            # and join as a new member; a static one takes its instance's place again, and
            # waits out its takeover fence like any static member with a new member id.
            self._stale_member_id = sent.member_id
            self._reset_locked(Reset.MEMBER)
            self._request_rejoin_locked(
                "the membership lease ran out before a heartbeat was answered (an answer "
                "then may come from a coordinator still loading the group); rejoining"
            )

    def metrics(self) -> MemberMetrics:
        now = self._clock.monotonic()
        with self._lock:
            c = self._counters
            return MemberMetrics(
                rebalance_total=c.rebalance_total,
                failed_rebalance_total=c.failed_rebalance_total,
                join_total=c.join_total,
                sync_total=c.sync_total,
                heartbeat_total=c.heartbeat_total,
                coordinator_discoveries=c.coordinator_discoveries,
                last_rebalance_latency_s=c.last_rebalance_latency_s,
                rebalance_latency_avg_s=(
                    c.rebalance_latency_sum_s / c.rebalance_total if c.rebalance_total else None
                ),
                rebalance_latency_max_s=c.rebalance_latency_max_s if c.rebalance_total else None,
                last_rebalance_age_s=(
                    now - c.last_rebalance_at if c.last_rebalance_at is not None else None
                ),
                last_heartbeat_age_s=(
                    now - c.last_heartbeat_at if c.last_heartbeat_at is not None else None
                ),
                rejoin_reasons=tuple(c.rejoin_reasons),
                recent_rebalances=tuple(c.recent_rebalances),
                wakeups_received=c.wakeups,
            )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the membership and heartbeat threads (idempotent)."""
        with self._lock:
            if self._closing:
                raise CoordinatorStateError(f"{self._who()}: the member is closed")
            if self._threads:
                return
            self.resolve_protocol_type()
            group = self._config.group_id
            self._threads = [
                self._clock.thread(self._run_membership, f"coordination-member|{group}"),
                self._clock.thread(self._run_heartbeats, f"coordination-heartbeat|{group}"),
            ]
            for thread in self._threads:
                thread.start()
            if self._wakeups is not None:
                self._wakeups.start(self.wake, self.sibling_found_rebalance)

    def wake(
        self,
        reason: str,
        left_generation: int | None = None,
        *,
        probed: set[int] | None = None,
    ) -> None:
        """Another member announced a change of the group: heartbeat now to learn whether a
        rebalance began. The announcement may overtake the change itself (it travels on
        another connection), so three more follow within 250 ms unless one finds it.

        ``left_generation``: the announcement is a departure from that generation, made
        after the broker accepted the member's LeaveGroup. The broker rebalances whenever a
        member leaves, so a member still in that generation rejoins at once: asking by a
        heartbeat would only cost a round trip. Any other generation proves nothing.

        ``probed``: the generations that members sharing this wake-up (the same group, in
        this process) already ask the broker about. A member of one of them leaves the
        asking to that sibling, whose answer reaches it through ``sibling_found_rebalance``,
        and asks itself only later, in case that answer never comes. Fifty members of a group
        in one process so send one heartbeat per wake-up, not fifty.
        """
        now = self._clock.monotonic()
        with self._lock:
            if self._state is not MemberState.STABLE:
                return  # joining already, or not a member: nothing to learn
            self._log.debug("%s: woken: %s", self._who(), reason)
            self._counters.wakeups += 1
            generation = self._generation.generation_id
            if left_generation is not None and left_generation == generation:
                self._rejoin_told_locked(f"{reason}; the group is rebalancing")
                return
            delays: tuple[float, ...] = _WAKE_HEARTBEATS_S
            if probed is not None:
                if generation in probed:
                    delays = _SIBLING_ASKS_WAKE_HEARTBEATS_S
                probed.add(generation)
            self._wake_at = [now + delay for delay in delays]
            self._changed.notify_all()

    def sibling_found_rebalance(self, generation_id: int) -> None:
        """A member sharing this one's wake-up listener (the same group, in this process)
        had a heartbeat of ``generation_id`` answered REBALANCE_IN_PROGRESS: the broker is
        rebalancing away from it, so this member rejoins now if still in it, without asking."""
        with self._lock:
            if self._state is not MemberState.STABLE:
                return
            if self._generation.generation_id != generation_id:
                return  # another generation: that answer says nothing of this one
            self._rejoin_told_locked("a member in this process found the group rebalancing")

    def _rejoin_told_locked(self, reason: str) -> None:
        """Rejoin a rebalance known to be under way: nothing is left to ask by heartbeat, and
        the JoinGroup answers the rebalance, so it wakes nobody."""
        self._wake_at.clear()
        self._rebalance_told = True
        self._request_rejoin_locked(reason)

    def resolve_protocol_type(self) -> None:
        """Ask the subclass for its protocol type (once it is fully constructed)."""
        protocol_type = self._callbacks.protocol_type()
        if not isinstance(protocol_type, str) or not protocol_type:
            raise CoordinatorStateError(
                f"protocol_type() must return a non-empty str, got {protocol_type!r}"
            )
        self._protocol_type = protocol_type

    def wait_stable(self, timeout_s: float | None) -> None:
        """Block until the member is stable and ``on_join_complete`` has run."""
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        with self._lock:
            while True:
                if self._fatal is not None:
                    raise self._fatal
                if self._closing:
                    raise CoordinatorStateError(f"{self._who()}: the member is closed")
                if (
                    self._state is MemberState.STABLE
                    and self._rejoin_reason is None
                    and self._pending is None
                ):
                    return
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    if self._coordinator is None and self._unreachable_since is not None:
                        raise CoordinationTimeoutError(
                            f"{self._who()}: not stable after {timeout_s}s: the bootstrap "
                            f"servers {self._config.connection.get('bootstrap_servers')} could "
                            f"not be reached ({self._last_error}); the member keeps trying"
                        )
                    raise CoordinationTimeoutError(
                        f"{self._who()}: not stable after {timeout_s}s (state "
                        f"{self._state.value}, coordinator {self._coordinator or 'unknown'}, "
                        f"last problem: {self._last_error or 'none'})"
                    )
                self._changed.wait(_IDLE_WAIT_S if remaining is None else min(remaining, 1.0))

    def request_rejoin(self, reason: str) -> None:
        """Ask for a new rebalance; ``reason`` is logged and sent to the broker."""
        with self._lock:
            self._rejoin_requests += 1
            self._request_rejoin_locked(reason)

    def close(self, timeout_s: float, *, leave_group: bool = True) -> None:
        """Leave the group (dynamic members), stop the threads, release the connections."""
        if self._clock.current_thread() in self._threads:
            raise CoordinatorStateError(
                f"{self._who()}: close() was called from a callback, on the engine's own thread; "
                "it would wait for itself. Call close() from another thread."
            )
        deadline = self._clock.monotonic() + timeout_s
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._stop.set()
            self._changed.notify_all()
        try:
            if self._callback_lock.acquire(timeout=max(0.0, timeout_s / 2)):
                try:
                    self._run_leave_prepare()
                finally:
                    self._callback_lock.release()
            else:
                # The member's work may still be running: leaving now would let the broker
                # give it to another member at once. The membership thread runs
                # on_leave_prepare when the callback returns; the broker removes this member
                # after its session instead.
                self._log.warning(
                    "%s: a callback is still running after %.1fs; not leaving the group while "
                    "the member's work may run (on_leave_prepare runs when the callback "
                    "returns; the broker removes the member after session_timeout_ms)",
                    self._who(),
                    timeout_s / 2,
                )
            if self._fatal is None and self._leave_prepared and leave_group:
                self._maybe_leave_group("the member is closing", deadline)
        finally:
            self._transport.close()
            if self._wakeups is not None:
                self._wakeups.close(max(0.0, deadline - self._clock.monotonic()))
            for thread in self._threads:
                thread.join(max(0.0, deadline - self._clock.monotonic()))
            with self._lock:
                self._state = MemberState.CLOSED
                self._generation = NO_GENERATION
                self._changed.notify_all()
            alive = [t.name for t in self._threads if t.is_alive()]
            if alive:
                self._log.warning("%s: threads still running after close: %s", self._who(), alive)

    def _run_leave_prepare(self) -> None:
        """Run on_leave_prepare once; the caller holds ``_callback_lock``."""
        if not self._leave_prepared:
            self._invoke("on_leave_prepare", self._callbacks.on_leave_prepare)
            self._leave_prepared = True

    # ------------------------------------------------------------------ threads

    def _run_membership(self) -> None:
        try:
            self._membership_loop()
        finally:
            # close() could not run on_leave_prepare while a callback ran on this thread:
            # run it now, so the member's work stops even though close() has returned.
            with self._lock:
                closing = self._closing
            if closing:
                with self._callback_lock:
                    self._run_leave_prepare()

    def _membership_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.ensure_coordinator_ready(deadline=None)
                self.join_group_if_needed(deadline=None)
                self._warm_up_once()
                with self._lock:
                    if self._coordinator is not None and not self._work_pending_locked():
                        self._changed.wait(_IDLE_WAIT_S)
            except _Stopped:
                break
            except CoordinationError as e:
                if self._fatal is not None:  # this or another thread stopped the member
                    break
                self._note_problem(f"unexpected error: {e}")
                self._log.exception("%s: error in the membership thread; retrying", self._who())
            except Exception:
                # The member must keep working whatever happens (a leader elector that
                # died on an escaped exception left its cluster leaderless for good).
                self._log.exception(
                    "%s: unexpected error in the membership thread; retrying", self._who()
                )
            else:
                continue
            try:
                self._sleep(self._retry_backoff.next_delay())
            except _Stopped:
                break

    def _warm_up_once(self) -> None:
        """Once the first join is done, let the transport prepare the requests this member
        has not sent yet (a leader's first commit, its LeaveGroup), so that preparing them
        does not hold up a later rebalance or handoff, when every millisecond counts."""
        if self._warmed_up:
            return
        with self._lock:
            stable = self._state is MemberState.STABLE and self._pending is None
            coordinator = self._coordinator
        if stable and coordinator is not None:
            self._warmed_up = True
            self._transport.warm_up(coordinator)

    def _run_heartbeats(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self.heartbeat_once()
            except _Stopped:
                break
            except CoordinationError:
                if self._fatal is not None:  # this or another thread stopped the member
                    break
                self._log.exception("%s: error in the heartbeat thread", self._who())
                delay = self._config.retry_backoff_ms / 1000
            except Exception:
                self._log.exception("%s: unexpected error in the heartbeat thread", self._who())
                delay = self._config.retry_backoff_ms / 1000
            with self._lock:
                if self._stop.is_set() or self._fatal is not None:
                    break
                self._changed.wait(_IDLE_WAIT_S if delay is None else min(delay, _IDLE_WAIT_S))

    # ------------------------------------------------------------------ phase 1: coordinator

    def ensure_coordinator_ready(self, deadline: float | None) -> bool:
        """Find the coordinator, backing off between attempts. False if the deadline passed."""
        while True:
            self._check_running()
            with self._lock:
                if self._coordinator is not None:
                    return True
            if deadline is not None and self._clock.monotonic() >= deadline:
                return False
            if self._lookup_coordinator():
                return True
            self._sleep(self._find_backoff.next_delay(), deadline)

    def _lookup_coordinator(self) -> bool:
        request = msg.FindCoordinatorRequest(key=self._config.group_id)
        try:
            response = self._transport.send(
                request,
                msg.FindCoordinatorResponse,
                coordinator=None,
                timeout_s=self._config.request_timeout_ms / 1000,
            )
        except TransportError as e:
            if e.fatal:
                self._fail(e.stop_error(self._who()))
            self._note_problem(f"FindCoordinator failed: {e}")
            self._log_unreachable(e)
            return False
        code = response.error_code
        if code == ErrorCode.NONE:
            node = CoordinatorNode(response.node_id, response.host, response.port)
            if self._unreachable_since is not None:
                # WARNING only to end a warning that it could not be reached.
                warned = self._unreachable_warned_at is not None
                self._log.log(
                    logging.WARNING if warned else logging.INFO,
                    "%s: the cluster answers again",
                    self._who(),
                )
                self._unreachable_since = self._unreachable_warned_at = None
            with self._lock:
                self._coordinator = node
                self._timers.reset(self._clock.monotonic())
                self._counters.coordinator_discoveries += 1
                self._find_backoff.reset()
                self._changed.notify_all()
            self._log.info("%s: coordinator is %s", self._who(), node)
            return True
        reaction = classify.reaction(Api.FIND_COORDINATOR, code)
        error = broker_error(code, group_id=self._config.group_id, api="FindCoordinator")
        if reaction.next is Next.FATAL:
            self._fail(error)
        self._note_problem(str(error))
        self._log.info("%s: FindCoordinator returned %s; will retry", self._who(), error_name(code))
        return False

    def _log_unreachable(self, e: TransportError) -> None:
        """The first failure at INFO (a broker restart is routine); WARNING once it lasts."""
        now = self._clock.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            self._log.info("%s: FindCoordinator failed (%s); will retry", self._who(), e)
            return
        last = self._unreachable_warned_at
        if last is None or now - last >= _UNREACHABLE_WARN_EVERY_S:
            self._unreachable_warned_at = now
            self._log.warning(
                "%s: the cluster has been unreachable for %.0fs (bootstrap_servers %s): %s; "
                "still retrying",
                self._who(),
                now - self._unreachable_since,
                self._config.connection.get("bootstrap_servers"),
                e,
            )

    def _mark_coordinator_unknown(self, reason: str) -> None:
        with self._lock:
            node = self._coordinator
            if node is None:
                return
            self._coordinator = None
            self._note_problem(reason)
            self._changed.notify_all()
        self._log.info("%s: forgetting coordinator %s: %s", self._who(), node, reason)
        if not self._stop.is_set():
            # Closing: close() owns the connection now (its LeaveGroup may be on it, after it
            # dropped a parked JoinGroup), and closes the transport when done.
            self._transport.disconnect(node)

    # ------------------------------------------------------------------ phases 2-3: join, sync

    def join_group_if_needed(self, deadline: float | None) -> bool:
        """Rejoin until stable with ``on_join_complete`` done. False if the deadline passed."""
        while True:
            self._check_running()
            with self._lock:
                pending = self._pending
                if pending is None and self._rejoin_reason is None:
                    return True
            if pending is not None:
                if self._complete_join(pending):
                    continue
                if not self._sleep(self._retry_backoff.next_delay(), deadline):
                    return False
                continue
            if not self.ensure_coordinator_ready(deadline):
                return False
            with self._lock:
                needs_prepare = self._needs_join_prepare
                self._needs_join_prepare = False
                prepared = self._generation
            if needs_prepare:
                self._invoke_serialized(
                    "on_join_prepare",
                    self._callbacks.on_join_prepare,
                    prepared.generation_id,
                    prepared.member_id,
                )
                self._check_running()
            outcome = self._rebalance_once(prepared)
            if outcome is None:
                continue  # the generation changed since on_join_prepare saw it: prepare again
            if isinstance(outcome, _Joined):
                with self._lock:
                    self._pending = outcome
                continue
            self._handle_failure(outcome, deadline)
            if deadline is not None and self._clock.monotonic() >= deadline:
                return False

    def _rebalance_once(self, prepared: Generation) -> _Joined | _Failed | None:
        """One JoinGroup and, if it succeeds, one SyncGroup.

        ``prepared`` is the generation the subclass last saw in ``on_join_prepare``. If the
        heartbeat thread (or a fenced commit) reset the generation since, return None without
        joining: the subclass must first learn, in ``on_join_prepare(-1)``, that what it owned
        is lost, or it would claim it again with a stale generation.
        """
        cfg = self._config
        now = self._clock.monotonic()
        with self._lock:
            if self._generation != prepared or self._needs_join_prepare:
                self._needs_join_prepare = True
                return None
            self._state = MemberState.PREPARING_REBALANCE
            sent = self._generation
            coordinator = self._coordinator
            reason = self._rejoin_reason or "rejoining the group"
            requests_at_start = self._rejoin_requests
            c = self._counters
            starting = c.rebalance_started_at is None
            if starting:
                c.rebalance_started_at = now
                c.rebalance_started_wall = time.time()
                c.rebalance_reason = reason
                c.rebalance_failures = 0
        if starting and self._hooks:
            self._hooks.emit(
                "on_rebalance_started",
                RebalanceStarted(group_id=cfg.group_id, member_id=sent.member_id, reason=reason),
            )
        if coordinator is None:
            return _Failed(Reaction(Next.FIND_COORDINATOR), "coordinator unknown", sent)
        with self._lock:
            stale, self._stale_member_id = self._stale_member_id, None
        if stale and not cfg.is_static:
            self._leave_stale_member(stale, coordinator)
        protocols = self._protocols()
        if isinstance(protocols, _Failed):
            return protocols
        self._log.info("%s: joining (%s)", self._who(), reason)
        join = msg.JoinGroupRequest(
            group_id=cfg.group_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms,
            member_id=sent.member_id,
            group_instance_id=cfg.group_instance_id,
            protocol_type=self._protocol_type,
            protocols=tuple((p.name, p.metadata) for p in protocols),
            reason=msg.truncate_reason(reason),
        )
        long_timeout_s = max(
            cfg.request_timeout_ms / 1000, cfg.rebalance_timeout_ms / 1000 + _JOIN_TIMEOUT_LAPSE_S
        )
        join_sent_at = self._clock.monotonic()
        with self._lock:
            if self._joins_since_stable is None:
                self._joins_since_stable = (sent.generation_id, join_sent_at)
            # A join that may start a rebalance wakes the others; one that answers a
            # rebalance under way does not (every member would wake every other).
            announce = (
                self._wakeups is not None
                and not self._rebalance_told
                and (bool(sent.member_id) or cfg.is_static)
            )
        if announce:
            assert self._wakeups is not None
            self._wakeups.announce(sent.member_id or str(cfg.group_instance_id), "join")
        try:
            joined = self._transport.send(
                join, msg.JoinGroupResponse, coordinator=coordinator, timeout_s=long_timeout_s
            )
        except TransportError as e:
            with self._lock:
                self._join_answer_lost = True
            return self._transport_failed(e, "JoinGroup", sent)
        with self._lock:
            self._counters.join_total += 1
        if joined.error_code != ErrorCode.NONE:
            failed = self._broker_failed(joined.error_code, Api.JOIN_GROUP, sent)
            if failed.reaction.next is Next.RETRY_WITH_MEMBER_ID:
                with self._lock:
                    self._generation = Generation(-1, joined.member_id, None)
                    self._rejoin_reason = (
                        f"need to re-join with the given member-id: {joined.member_id}"
                    )
            return failed
        if joined.protocol_type is not None and joined.protocol_type != self._protocol_type:
            return self._inconsistent(
                f"JoinGroup answered protocol type {joined.protocol_type!r}, "
                f"this member's is {self._protocol_type!r}",
                sent,
            )
        if joined.protocol_name is None:
            return self._inconsistent("JoinGroup answered no protocol name", sent)

        with self._lock:
            if self._state is not MemberState.PREPARING_REBALANCE:
                return _Failed(Reaction(Next.RETRY_NOW), "the join was abandoned", sent)
            missed = self._missed_generations_locked(joined.generation_id)
            if missed:
                # The rejoin may be answered this generation again, without a new session
                # (the broker restarted it when the phase completed): no lease from it.
                self._highest_generation = max(self._highest_generation, joined.generation_id)
                return _Failed(Reaction(Next.RETRY_NOW, Reset.GENERATION), missed, sent)
            generation = Generation(joined.generation_id, joined.member_id, joined.protocol_name)
            self._generation = generation
            session_restarted = self._confirm_join_locked(
                generation,
                join_sent_at,
                kept_static_follower=(
                    cfg.is_static and bool(sent.member_id) and joined.leader != joined.member_id
                ),
            )
            if cfg.is_static and not sent.member_id:
                # A new member id for this instance id: see _await_takeover_fence. Also when
                # the member gave up its own id to prove its place again: the id it replaced
                # may be a restarted process's, which took the place while this one was cut
                # off and acts under a lease of its own.
                fence_s = self._lease_s  # the longest an earlier process's lease can last
                self._takeover_fence_until = self._clock.monotonic() + fence_s
                self._log.info(
                    "%s: static member with a new member id; its assignments take effect in "
                    "%.1fs, once any earlier process with group_instance_id %r has stopped",
                    self._who(),
                    fence_s,
                    cfg.group_instance_id,
                )
            self._leader_id = joined.leader or None
            self._state = MemberState.COMPLETING_REBALANCE
            # Heartbeats start here: the sync phase can take up to the rebalance timeout.
            if session_restarted:
                self._timers.reset(self._clock.monotonic())
            else:
                # The broker's session timer runs on from the last heartbeat answered: the
                # next heartbeat stays due when it was (at once if that time has passed), or
                # a member whose lease ran low would wait a whole interval more to renew it.
                self._timers.keep_session()
            self._changed.notify_all()
        is_leader = joined.leader != "" and joined.leader == joined.member_id
        self._log.info(
            "%s: joined generation %d with protocol %r as %s",
            self._who(),
            generation.generation_id,
            generation.protocol,
            "leader" if is_leader else "follower",
        )

        assignments: tuple[tuple[str, bytes], ...] = ()
        if is_leader and joined.skip_assignment:
            # KIP-814: a static leader came back to a stable group; the broker keeps the
            # current assignment, so the leader must not compute a new one.
            self._log.info(
                "%s: static leader rejoined a stable group; skipping assignment", self._who()
            )
        elif is_leader:
            planned = self._assign(generation, joined.members)
            if isinstance(planned, _Failed):
                return planned
            assignments = planned

        with self._lock:
            tried = self._lease_runs_low_locked(generation)
        proved_at = self._proving_heartbeat(generation, coordinator) if tried else None
        if isinstance(proved_at, _Failed):
            return proved_at
        sync = msg.SyncGroupRequest(
            group_id=cfg.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=cfg.group_instance_id,
            protocol_type=self._protocol_type,
            protocol_name=generation.protocol,
            assignments=assignments,
        )
        try:
            # A follower's SyncGroup waits for the leader's, up to the rebalance timeout.
            synced = self._transport.send(
                sync, msg.SyncGroupResponse, coordinator=coordinator, timeout_s=long_timeout_s
            )
        except TransportError as e:
            return self._transport_failed(e, "SyncGroup", generation)
        with self._lock:
            self._counters.sync_total += 1
        if synced.error_code != ErrorCode.NONE:
            return self._broker_failed(synced.error_code, Api.SYNC_GROUP, generation)
        if synced.protocol_type is not None and synced.protocol_type != self._protocol_type:
            return self._inconsistent(
                f"SyncGroup answered protocol type {synced.protocol_type!r}", generation
            )
        if synced.protocol_name is not None and synced.protocol_name != generation.protocol:
            return self._inconsistent(
                f"SyncGroup answered protocol {synced.protocol_name!r}, JoinGroup "
                f"{generation.protocol!r}",
                generation,
            )
        with self._lock:
            self._credit_heartbeat_locked(generation, proved_at)
            # A SyncGroup that waited long for the leader's can leave the lease as spent as a
            # long join does: prove a session again, with a heartbeat and the SyncGroup
            # repeated (a Stable group answers it at once, with the same assignment; the
            # leader's repeat carries none). Not after a heartbeat just refused.
            prove = (
                (not tried or proved_at is not None)
                and self._generation == generation
                and self._lease_runs_low_locked(generation)
            )
        if prove:
            proved_at = self._proving_heartbeat(generation, coordinator)
            if isinstance(proved_at, _Failed):
                return proved_at
            # Repeated whatever the heartbeat's answer: the SyncGroup tells whether the
            # assignment still holds (a refused heartbeat credits nothing).
            try:
                resynced = self._transport.send(
                    dataclasses.replace(sync, assignments=()),
                    msg.SyncGroupResponse,
                    coordinator=coordinator,
                    timeout_s=cfg.request_timeout_ms / 1000,
                )
            except TransportError as e:
                return self._transport_failed(e, "SyncGroup", generation)
            if resynced.error_code != ErrorCode.NONE:
                return self._broker_failed(resynced.error_code, Api.SYNC_GROUP, generation)
            with self._lock:
                self._credit_heartbeat_locked(generation, proved_at)

        with self._lock:
            completing = self._state is MemberState.COMPLETING_REBALANCE
            now_s = self._clock.monotonic()
            if self._generation != generation or not completing:
                # The heartbeat thread reset the generation while SyncGroup was in flight.
                return _Failed(
                    Reaction(Next.RETRY_NOW),
                    "the generation was reset while the sync was in flight",
                    generation,
                )
            self._state = MemberState.STABLE
            held = self._joins_since_stable
            if self._rebalance_told and held is not None and held[0] == generation.generation_id:
                # Told of a rebalance the broker had not begun when it answered: a departure
                # announced ahead of its LeaveGroup (see _maybe_leave_group) overtook it. Ask
                # by heartbeat until the rebalance shows.
                self._wake_at = [now_s + d for d in _WAKE_HEARTBEATS_S]
            self._rebalance_told = False
            self._joins_since_stable = None
            self._join_answer_lost = False
            if self._rejoin_requests == requests_at_start:
                self._rejoin_reason = None
            now = self._clock.monotonic()
            c = self._counters
            started = c.rebalance_started_at if c.rebalance_started_at is not None else now
            latency = now - started
            c.rebalance_total += 1
            c.rebalance_latency_sum_s += latency
            c.rebalance_latency_max_s = max(c.rebalance_latency_max_s, latency)
            c.last_rebalance_latency_s = latency
            c.last_rebalance_at = now
            c.rebalance_started_at = None
            c.recent_rebalances.append(
                RebalanceRecord(
                    started_at=c.rebalance_started_wall or time.time() - latency,
                    reason=c.rebalance_reason,
                    duration_s=latency,
                    generation=generation.generation_id,
                    member_id=generation.member_id,
                    is_leader=is_leader,
                    failed_attempts=c.rebalance_failures,
                    group_instance_id=cfg.group_instance_id,
                    client_id=cfg.client_id,
                )
            )
            self._retry_backoff.reset()
            self._join_retries.clear()
            self._last_error = None
            self._changed.notify_all()
        self._log.info(
            "%s: stable in generation %d after %.3fs (%d bytes assigned)",
            self._who(),
            generation.generation_id,
            latency,
            len(synced.assignment),
        )
        if self._hooks:
            self._hooks.emit(
                "on_rebalance_finished",
                RebalanceFinished(
                    group_id=cfg.group_id,
                    member_id=generation.member_id,
                    generation=generation.generation_id,
                    is_leader=is_leader,
                    reason=c.rebalance_reason,
                    duration_s=latency,
                ),
            )
        return _Joined(generation, synced.assignment, is_leader)

    def _protocols(self) -> Sequence[ProtocolMetadata] | _Failed:
        ok, protocols = self._invoke_serialized("metadata", self._callbacks.metadata)
        problem = None
        if not ok:
            problem = "metadata() raised"
        elif not protocols:
            problem = "metadata() returned no protocols"
        else:
            names = [getattr(p, "name", None) for p in protocols]
            if len(set(names)) != len(names):
                problem = f"metadata() returned duplicate protocol names {names}"
            elif not all(
                isinstance(p, ProtocolMetadata) and p.name and isinstance(p.metadata, bytes)
                for p in protocols
            ):
                problem = "metadata() must return ProtocolMetadata(name, bytes) items"
        if problem is not None:
            self._note_problem(problem)
            self._log.error("%s: %s; will retry", self._who(), problem)
            return _Failed(Reaction(Next.RETRY_BACKOFF), problem, self.generation)
        assert protocols is not None
        return cast(Sequence[ProtocolMetadata], protocols)

    def _assign(
        self, generation: Generation, raw_members: Sequence[msg.JoinGroupResponseMember]
    ) -> tuple[tuple[str, bytes], ...] | _Failed:
        members = [Member(x.member_id, x.group_instance_id, x.metadata) for x in raw_members]
        assert generation.protocol is not None
        budget_s = self._config.rebalance_timeout_ms / 1000
        started = self._clock.monotonic()
        with self._lock:
            # Watched by the heartbeat thread (see _warn_if_assignment_overdue_locked).
            self._assignment_overdue_at = started + budget_s
        try:
            ok, plan = self._invoke_serialized(
                "perform_assignment",
                self._callbacks.perform_assignment,
                generation.member_id,
                generation.protocol,
                members,
            )
        finally:
            with self._lock:
                self._assignment_overdue_at = None
        elapsed = self._clock.monotonic() - started
        if elapsed > budget_s / 2:
            self._log.warning(
                "%s: perform_assignment took %.1fs of a %.1fs rebalance timeout",
                self._who(),
                elapsed,
                budget_s,
            )
        problem = None
        if not ok:
            problem = "perform_assignment raised"
        elif not isinstance(plan, Mapping):
            problem = f"perform_assignment must return a Mapping, got {type(plan).__name__}"
        else:
            known = {x.member_id for x in members}
            unknown = sorted(set(plan) - known)
            bad = sorted(k for k, v in plan.items() if not isinstance(v, bytes | bytearray))
            if unknown:
                problem = f"perform_assignment assigned to unknown members {unknown}"
            elif bad:
                problem = f"perform_assignment gave non-bytes assignments to {bad}"
            else:
                missing = sorted(known - set(plan))
                if missing:
                    self._log.warning(
                        "%s: perform_assignment left out members %s; they get an empty assignment",
                        self._who(),
                        missing,
                    )
        if problem is not None:
            error = AssignmentError(f"{self._who()}: {problem}")
            self._note_problem(str(error))
            self._log.error("%s; rejoining after backoff", error)
            return _Failed(Reaction(Next.RETRY_BACKOFF), problem, generation, error)
        assert isinstance(plan, Mapping)
        assignments = tuple(sorted((k, bytes(v)) for k, v in plan.items()))
        size = sum(len(a) for _, a in assignments) + sum(
            len(x.metadata) + len(x.member_id) + len(x.group_instance_id or "") + _MEMBER_OVERHEAD
            for x in raw_members
        )
        limit = self._config.max_assignment_bytes
        if size > limit:
            # The broker would refuse to store it (UNKNOWN_SERVER_ERROR) at every attempt.
            problem = (
                f"the group state is {size} bytes ({len(raw_members)} members' metadata and "
                f"assignments), above max_assignment_bytes={limit}: the broker stores it as one "
                "record of __consumer_offsets and refuses larger ones. Assign less per group "
                "(fewer partitions or members), or raise the offsets topic's max.message.bytes "
                "and max_assignment_bytes together"
            )
            error = AssignmentError(f"{self._who()}: {problem}")
            return _Failed(Reaction(Next.FATAL), problem, generation, error)
        return assignments

    def _complete_join(self, joined: _Joined) -> bool:
        """Run on_join_complete for a finished sync. True if done (or no longer relevant)."""
        fenced = not self._await_takeover_fence()
        gen = joined.generation
        assert gen.protocol is not None
        # Checked once the callback lock is held: waiting for it (a callback of the user's
        # thread) leaves time for the heartbeat thread to reset the generation.
        with self._callback_lock:
            with self._lock:
                still_current = (
                    not fenced and self._generation == gen and self._state is MemberState.STABLE
                )
                if not still_current:
                    # The heartbeat thread reset the generation before the assignment was
                    # handed over, or a rebalance began during a static member's takeover
                    # wait: the assignment is stale, rejoin instead (Kafka:
                    # resetStateAndRejoin).
                    self._pending = None
                    self._needs_join_prepare = True
                    if self._rejoin_reason is None:
                        self._rejoin_reason = "the generation was lost before the join completed"
                    return True
            ok, _ = self._invoke_serialized(
                "on_join_complete",
                self._callbacks.on_join_complete,
                gen.generation_id,
                gen.member_id,
                gen.protocol,
                joined.assignment,
            )
        if ok:
            self._publish_rebalance(gen.generation_id)
        with self._lock:
            if ok or self._rejoin_reason is not None:
                # Done, or superseded by a new rebalance: on_join_prepare comes next either way.
                self._pending = None
                self._needs_join_prepare = True
                self._changed.notify_all()
                return True
            self._note_problem("on_join_complete raised; retrying with the same assignment")
            return False

    def _credit_heartbeat_locked(self, generation: Generation, sent_at: float | None) -> None:
        """A heartbeat sent at ``sent_at`` and answered NONE was followed by a SyncGroup of
        ``generation`` answered NONE: the lease counts from the heartbeat's send.

        A SyncGroup answered from a group already Stable (a follower that synced late) does
        not restart the member's session timer on Kafka 4, so it renews nothing itself; but
        it proves the member was in this generation when it arrived, which makes the
        heartbeat answered before it trustworthy (see _proving_heartbeat).
        """
        if sent_at is None:
            return
        confirmed = self._confirmed
        if confirmed is None or confirmed[0] != generation or confirmed[1] < sent_at:
            self._confirmed = (generation, sent_at)

    def _lease_runs_low_locked(self, generation: Generation) -> bool:
        """Whether the lease will not last until the heartbeat thread's next heartbeat
        (two intervals' margin)."""
        confirmed = self._confirmed
        if confirmed is None or confirmed[0] != generation:
            return True
        lasts_s = confirmed[1] + self._lease_s - self._clock.monotonic()
        return lasts_s < 2 * self._config.heartbeat_interval_ms / 1000

    def _proving_heartbeat(
        self, generation: Generation, coordinator: CoordinatorNode
    ) -> float | _Failed | None:
        """Send a heartbeat, to be followed by a SyncGroup, when the lease runs low. Returns
        the heartbeat's send time if it was answered NONE (the SyncGroup's success then
        proves it), None if it was answered otherwise (the SyncGroup gets the same answer),
        or the failure if it got no answer (a SyncGroup to the same coordinator would wait
        as long for nothing).

        A JoinGroup proves a session restart no earlier than the JoinGroup's send, which is
        all a member can know: a join that waited in its phase longer than the lease (the
        group waited for a slow or dead member), or a SyncGroup that waited as long for the
        leader's, ends with the lease spent. A Stable member's heartbeat answered NONE then
        proves nothing, as it could come from a coordinator still loading the group, and
        the member would leave and join again as a new member: a second rebalance for
        nothing, and an assignment lost as soon as it was handed over.

        A heartbeat sent at ``h`` and answered NONE, followed by a SyncGroup of the same
        generation answered NONE, proves a session restart at or after ``h``: either the
        heartbeat's answer was real (the member was in the group when it arrived, which
        restarted its timer), or a coordinator was loading the group then, and a Kafka 4
        coordinator restarts every member's session when it finishes loading, after ``h``
        (Kafka 3.9 restarts it at every SyncGroup it answers NONE); the SyncGroup, which a
        loading coordinator never answers NONE, shows the member was in the loaded group.
        """
        now = self._clock.monotonic()
        try:
            response = self._send_heartbeat(generation, coordinator)
        except TransportError as e:
            return self._transport_failed(e, "Heartbeat", generation)
        with self._lock:
            self._counters.heartbeat_total += 1
            if response.error_code == ErrorCode.NONE:
                answered_at = self._clock.monotonic()
                self._timers.answered_elsewhere(answered_at)
                self._counters.last_heartbeat_at = answered_at
        if response.error_code != ErrorCode.NONE:
            # The SyncGroup that follows gets the same answer and handles it.
            self._log.debug(
                "%s: heartbeat before SyncGroup returned %s",
                self._who(),
                error_name(response.error_code),
            )
            return None
        return now

    def note_rebalance_change(self, moved: str) -> None:
        """Say what the last rebalance changed for this member (its timeline's ``moved``)."""
        with self._lock:
            timeline = self._counters.recent_rebalances
            if timeline:
                timeline[-1] = dataclasses.replace(timeline[-1], moved=moved)

    def _publish_rebalance(self, generation_id: int) -> None:
        """Put the rebalance just completed on the wake-up channel, for ``describe``."""
        if self._wakeups is None:
            return
        with self._lock:
            timeline = self._counters.recent_rebalances
            if not timeline or timeline[-1].generation != generation_id:
                return
            record = timeline[-1]
        self._wakeups.record_rebalance(dataclasses.asdict(record))

    def _await_takeover_fence(self) -> bool:
        """Hold a static member's assignment back until an earlier process it may have
        replaced (same ``group_instance_id``) can no longer act on its own.

        That process's lease (``membership_lease``) lasts at most min(session, rebalance
        timeout) past its last confirmed request, which it sent before the broker replaced it,
        so before this member's JoinGroup answer arrived. Heartbeats go on meanwhile; a new
        rebalance (rejoin request) interrupts the wait, which resumes at the next assignment.
        True once the assignment may take effect; False if a rebalance superseded it first.
        """
        while True:
            with self._lock:
                until = self._takeover_fence_until
                rejoin = self._rejoin_reason is not None
            if until is None:
                return True
            remaining = until - self._clock.monotonic()
            if remaining <= 0:
                with self._lock:
                    if self._takeover_fence_until == until:
                        self._takeover_fence_until = None
                return True
            if rejoin:
                return False
            self._clock.sleep(min(remaining, _FENCE_POLL_S), self._stop)
            self._check_running()

    # ------------------------------------------------------------------ failures

    def _transport_failed(self, e: TransportError, api: str, sent: Generation) -> _Failed:
        if e.fatal:
            error = e.stop_error(f"{self._who()}: {api}")
            return _Failed(Reaction(Next.FATAL), str(e), sent, error)
        # The member id is kept: the broker may still know it (Kafka keeps it too).
        return _Failed(Reaction(Next.FIND_COORDINATOR), f"{api} got no response: {e}", sent)

    def _broker_failed(self, code: int, api: Api, sent: Generation) -> _Failed:
        error = broker_error(
            code, group_id=self._config.group_id, member_id=sent.member_id, api=api.value
        )
        reason = f"{api.value} returned {error_name(code)}"
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            with self._lock:
                self._rebalance_told = True
        return _Failed(classify.reaction(api, code), reason, sent, error)

    def _inconsistent(self, problem: str, sent: Generation) -> _Failed:
        error = InconsistentGroupProtocolError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            group_id=self._config.group_id,
            member_id=sent.member_id,
            api=problem,
        )
        return _Failed(Reaction(Next.FATAL), problem, sent, error)

    def _handle_failure(self, failed: _Failed, deadline: float | None) -> None:
        reaction = failed.reaction
        with self._lock:
            if reaction.reset is not Reset.NOTHING and self._generation == failed.sent:
                self._reset_locked(reaction.reset)
            if self._state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
                self._state = MemberState.UNJOINED
            counted = reaction.next is not Next.RETRY_WITH_MEMBER_ID
            if counted:
                self._counters.failed_rebalance_total += 1
                self._counters.rebalance_failures += 1
                self._note_problem(failed.reason)
                if self._rejoin_reason is None or reaction.next is not Next.RETRY_NOW:
                    self._rejoin_reason = f"rebalance failed: {failed.reason}"
            elif self._rejoin_reason is None:
                self._rejoin_reason = failed.reason
            self._changed.notify_all()
        if counted and self._hooks:
            self._hooks.emit(
                "on_rebalance_failed",
                RebalanceFailed(
                    group_id=self._config.group_id,
                    member_id=failed.sent.member_id,
                    error=failed.reason,
                ),
            )
        if reaction.next is Next.FATAL:
            self._fail(failed.error or CoordinationError(f"{self._who()}: {failed.reason}"))
        elif reaction.next is Next.FIND_COORDINATOR:
            self._mark_coordinator_unknown(failed.reason)
        elif reaction.next is Next.RETRY_BACKOFF:
            delay = self._retry_backoff.next_delay()
            level = self._join_retries.level(self._clock.monotonic(), _routine(failed.error))
            self._log.log(level, "%s: %s; retrying in %.2fs", self._who(), failed.reason, delay)
            self._sleep(delay, deadline)
        else:
            self._log.info("%s: %s; rejoining at once", self._who(), failed.reason)

    def _reset_locked(self, reset: Reset) -> None:
        if reset is Reset.MEMBER:
            self._generation = NO_GENERATION
            self._highest_generation = -1
            # A new member's join starts a rebalance of its own, whatever this member was
            # told of before: the others must hear of it (see _rebalance_once's announce).
            self._rebalance_told = False
        elif reset is Reset.GENERATION:
            self._generation = Generation(-1, self._generation.member_id, None)
        self._state = MemberState.UNJOINED
        self._leader_id = None
        # Let the subclass see, in on_join_prepare, that its generation is gone.
        self._needs_join_prepare = True

    def _fail(self, error: CoordinationError) -> NoReturn:
        with self._lock:
            if self._fatal is None:
                self._fatal = error
            self._state = MemberState.CLOSED
            self._stop.set()
            self._changed.notify_all()
        self._log.error("%s: stopping: %s", self._who(), error)
        raise error

    # ------------------------------------------------------------------ phase 4: heartbeats

    def heartbeat_once(self) -> float | None:
        """Send a heartbeat if one is due. Returns seconds until the next is due (None: idle)."""
        now = self._clock.monotonic()
        with self._lock:
            if self._stop.is_set():
                raise _Stopped
            self._warn_if_assignment_overdue_locked(now)
            active = self._state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)
            if not active or self._coordinator is None:
                return None
            if self._timers.session_expired(now):
                expired = True
            else:
                expired = False
                woken = bool(self._wake_at) and self._wake_at[0] <= now
                if not woken and not self._timers.is_due(now):
                    return self._time_to_next_heartbeat_locked(now)
                if self._timers.in_flight:
                    return self._timers.time_to_next(now)
                self._wake_at = [t for t in self._wake_at if t > now]
                self._timers.sent(now)
                sent = self._generation
                node = self._coordinator
        if expired:
            # No heartbeat got through for a whole session: the broker has evicted this member
            # or will. Look for the coordinator again; its answer tells which.
            self._mark_coordinator_unknown(
                "session timed out without a successful heartbeat response"
            )
            with self._lock:
                self._timers.reset(now)
            return None
        cfg = self._config
        try:
            response = self._send_heartbeat(sent, node)
        except TransportError as e:
            with self._lock:
                self._timers.failed(self._clock.monotonic(), cfg.retry_backoff_ms / 1000)
            self._heartbeat_failed(sent, f"no response: {e}")
            if e.fatal:
                self._fail(e.stop_error(f"{self._who()}: heartbeat"))
            with self._lock:
                same_node = self._coordinator == node
            if same_node:
                self._mark_coordinator_unknown(f"heartbeat got no response: {e}")
            return None
        return self._on_heartbeat_response(response.error_code, sent, node, sent_at=now)

    def _warn_if_assignment_overdue_locked(self, now: float) -> None:
        """Warn (once per assignment) while perform_assignment runs past the rebalance
        timeout: the heartbeat thread checks at every heartbeat it sends, which it keeps
        sending meanwhile (a watchdog thread per assignment cost every rebalance a thread
        start, a fraction of a millisecond on the leader's critical path)."""
        overdue_at = self._assignment_overdue_at
        if overdue_at is None or now < overdue_at:
            return
        self._assignment_overdue_at = None
        self._log.warning(
            "%s: perform_assignment has run for more than rebalance_timeout_ms (%d ms); "
            "the broker is evicting members that cannot sync in time. Make it faster or "
            "raise rebalance_timeout_ms",
            self._who(),
            self._config.rebalance_timeout_ms,
        )

    def _send_heartbeat(
        self, generation: Generation, coordinator: CoordinatorNode
    ) -> msg.HeartbeatResponse:
        """One heartbeat of ``generation``, answered. Raises TransportError."""
        cfg = self._config
        request = msg.HeartbeatRequest(
            group_id=cfg.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=cfg.group_instance_id,
        )
        return self._transport.send(
            request,
            msg.HeartbeatResponse,
            coordinator=coordinator,
            timeout_s=cfg.request_timeout_ms / 1000,
        )

    def _time_to_next_heartbeat_locked(self, now: float) -> float:
        """Seconds until the next heartbeat: the interval's, or sooner if a wake-up asked."""
        next_s = self._timers.time_to_next(now)
        if self._wake_at:
            next_s = min(next_s, max(0.0, self._wake_at[0] - now))
        return next_s

    def _heartbeat_failed(self, sent: Generation, error: str) -> None:
        if self._hooks:
            self._hooks.emit(
                "on_heartbeat_failed",
                HeartbeatFailed(
                    group_id=self._config.group_id,
                    member_id=sent.member_id,
                    generation=sent.generation_id,
                    error=error,
                ),
            )

    def _on_heartbeat_response(
        self, code: int, sent: Generation, node: CoordinatorNode, sent_at: float | None = None
    ) -> float | None:
        if code not in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
            self._heartbeat_failed(sent, error_name(code))
        now = self._clock.monotonic()
        retry_s = self._config.retry_backoff_ms / 1000
        with self._lock:
            self._counters.heartbeat_total += 1
            if code == ErrorCode.NONE:
                self._heartbeat_retries.clear()
                if sent_at is not None and self._generation == sent:
                    self._renew_lease_locked(sent, sent_at)
                self._timers.received(now)
                self._counters.last_heartbeat_at = now
                return self._time_to_next_heartbeat_locked(now)
            reaction = classify.reaction(Api.HEARTBEAT, code)
            if reaction.next is Next.REJOIN_IF_STABLE:
                # Still a live session. Heartbeats are expected during COMPLETING_REBALANCE;
                # only a stable member learns here that a new rebalance began.
                self._timers.received(now)
                self._counters.last_heartbeat_at = now
                self._wake_at.clear()
                found = self._state is MemberState.STABLE and self._generation == sent
                if found:
                    self._rejoin_told_locked("group is already rebalancing")
                next_s = self._timers.time_to_next(now)
        if reaction.next is Next.REJOIN_IF_STABLE:
            if found:
                self._found_rebalance(sent.generation_id)
            return next_s
        with self._lock:
            self._timers.failed(now, retry_s)
            if self._generation != sent:
                self._log.debug(
                    "%s: ignoring heartbeat %s for stale generation %d",
                    self._who(),
                    error_name(code),
                    sent.generation_id,
                )
                return retry_s
            error = broker_error(
                code, group_id=self._config.group_id, member_id=sent.member_id, api="Heartbeat"
            )
            if reaction.next is Next.REJOIN:
                self._reset_locked(reaction.reset)
                self._request_rejoin_locked(f"heartbeat returned {error_name(code)}")
                return None
            if reaction.next is Next.RETRY_BACKOFF:
                self._note_problem(str(error))
                level = self._heartbeat_retries.level(now, _routine(error))
                self._log.log(level, "%s: %s; retrying", self._who(), error)
                return retry_s
        if reaction.next is Next.FATAL:
            with self._lock:
                self._reset_locked(reaction.reset)
            self._fail(error)
        self._mark_coordinator_unknown(f"heartbeat returned {error_name(code)}")
        return None

    def _found_rebalance(self, generation_id: int) -> None:
        """This member's heartbeat found its group rebalancing away from ``generation_id``:
        its siblings in this process that are still in it rejoin now, without asking (see
        ``sibling_found_rebalance``). Called without the lock: each sibling takes its own."""
        if self._wakeups is not None:
            self._wakeups.rebalancing(generation_id)

    # ------------------------------------------------------------------ leave

    def _leave_stale_member(self, member_id: str, coordinator: CoordinatorNode) -> None:
        """Remove this member's own given-up id from the group, so that the next join phase
        need not wait for it; any answer will do."""
        request = msg.LeaveGroupRequest(
            group_id=self._config.group_id,
            member_id=member_id,
            group_instance_id=None,
            reason="the member proves its place again under a new member id",
        )
        try:
            self._transport.send(
                request,
                msg.LeaveGroupResponse,
                coordinator=coordinator,
                timeout_s=self._config.request_timeout_ms / 1000,
            )
        except TransportError as e:
            self._log.info("%s: LeaveGroup for %r got no answer (%s)", self._who(), member_id, e)

    def _maybe_leave_group(self, reason: str, deadline: float) -> None:
        cfg = self._config
        with self._lock:
            node = self._coordinator
            generation = self._generation
            state = self._state
        should_leave = (
            cfg.leave_group_on_close
            and not cfg.is_static
            and node is not None
            and state is not MemberState.UNJOINED
            and generation.has_member_id
        )
        if should_leave:
            assert node is not None
            if state is not MemberState.STABLE:
                # A JoinGroup or SyncGroup parked on the broker holds the connection (the broker
                # answers a connection's requests in order): drop it so LeaveGroup is not queued.
                self._transport.disconnect(node)
            self._log.info("%s: leaving the group (%s)", self._who(), reason)
            request = msg.LeaveGroupRequest(
                group_id=cfg.group_id,
                member_id=generation.member_id,
                group_instance_id=cfg.group_instance_id,
                reason=msg.truncate_reason(reason),
            )
            # Where the coordinator also leads the wake-up partition, the departure rides
            # behind the LeaveGroup on its connection: the broker appends it right after
            # accepting the LeaveGroup, a round trip sooner than sending it after the answer.
            departure = (
                None
                if self._wakeups is None
                else self._wakeups.departure(generation.member_id, generation.generation_id)
            )
            if departure is not None and self._callbacks.rejoin_changes_metadata:
                # Every member's rejoin makes the broker rebalance, whichever of it and this
                # LeaveGroup arrives first: the departure may go ahead of the LeaveGroup, so
                # the others are woken while the broker still works on it.
                departure.leads = True
            left = self._send_leave(request, node, deadline, departure)
            if left and self._wakeups is not None:
                # Only now (unless it rode behind the LeaveGroup): a wake-up that overtook
                # the LeaveGroup would find no rebalance. From this thread, at once: the
                # others are waiting for it.
                self._wakeups.announce(
                    generation.member_id,
                    "leave",
                    generation.generation_id,
                    timeout_s=min(
                        _LEAVE_WAKEUP_WAIT_S, max(0.0, deadline - self._clock.monotonic())
                    ),
                )
            if self._wakeups is not None:
                # The connections close next: wait (briefly) until the wake-up is out.
                self._wakeups.flush(
                    min(_LEAVE_WAKEUP_WAIT_S, max(0.0, deadline - self._clock.monotonic()))
                )
        with self._lock:
            self._generation = NO_GENERATION
            self._state = MemberState.UNJOINED

    def _send_leave(
        self,
        request: msg.LeaveGroupRequest,
        node: CoordinatorNode,
        deadline: float,
        departure: FollowUp | None,
    ) -> bool:
        """Send the LeaveGroup (``departure`` riding with it); True if the broker took it.

        A coordinator that moved or is still loading the group refuses it (classify's
        LeaveGroup column): the member leaves again where the group is, until ``deadline``.
        A departure that rode with the refused LeaveGroup has told the others already, and
        they rejoin; left in the group until its session ends, this member would hold their
        JoinGroups parked that long (a sitting leader's lease running out meanwhile).
        """
        cfg = self._config
        backoff_s = cfg.retry_backoff_ms / 1000
        while True:
            timeout_s = max(
                0.5, min(cfg.request_timeout_ms / 1000, deadline - self._clock.monotonic())
            )
            try:
                response = self._transport.send(
                    request,
                    msg.LeaveGroupResponse,
                    coordinator=node,
                    timeout_s=timeout_s,
                    then=departure,
                )
            except TransportError as e:
                self._log.info(
                    "%s: LeaveGroup got no response (%s); the session will expire instead",
                    self._who(),
                    e,
                )
                return False
            departure = None  # it went along once; announce() sends it if it must
            code = response.error_code or response.member_error_code
            if code == ErrorCode.NONE:
                return True
            retry = classify.reaction(Api.LEAVE_GROUP, code).next
            found: CoordinatorNode | None = None
            if retry is not Next.IGNORE and self._clock.monotonic() + backoff_s < deadline:
                self._clock.sleep(backoff_s, self._clock.event())
                found = (
                    node if retry is Next.RETRY_BACKOFF else self._coordinator_for_leave(deadline)
                )
            if found is None:
                self._log.info(
                    "%s: LeaveGroup returned %s (ignored)", self._who(), error_name(code)
                )
                return False
            self._log.info(
                "%s: LeaveGroup returned %s; leaving at %s", self._who(), error_name(code), found
            )
            node = found

    def _coordinator_for_leave(self, deadline: float) -> CoordinatorNode | None:
        """The group's coordinator, asked once for a closing member (None: no answer)."""
        timeout_s = min(self._config.request_timeout_ms / 1000, deadline - self._clock.monotonic())
        try:
            response = self._transport.send(
                msg.FindCoordinatorRequest(key=self._config.group_id),
                msg.FindCoordinatorResponse,
                coordinator=None,
                timeout_s=max(0.1, timeout_s),
            )
        except TransportError:
            return None
        if response.error_code != ErrorCode.NONE:
            return None
        return CoordinatorNode(response.node_id, response.host, response.port)

    # ------------------------------------------------------------------ helpers

    def _request_rejoin_locked(self, reason: str) -> None:
        if self._rejoin_reason is None:
            self._rejoin_reason = reason
        self._counters.rejoin_reasons.append(reason)
        del self._counters.rejoin_reasons[:-20]
        self._log.info("%s: rejoin requested: %s", self._who(), reason)
        self._changed.notify_all()

    def _work_pending_locked(self) -> bool:
        return self._rejoin_reason is not None or self._pending is not None

    def _invoke(self, name: str, fn: Any, *args: Any) -> tuple[bool, Any]:
        """Call a user callback; an exception is logged, never propagated."""
        try:
            return True, fn(*args)
        except Exception:
            self._log.exception("%s: %s raised; the member carries on", self._who(), name)
            return False, None

    def _invoke_serialized(self, name: str, fn: Any, *args: Any) -> tuple[bool, Any]:
        with self._callback_lock:
            if self._leave_prepared or self._stop.is_set():
                # close() has begun: no callback may run after (or instead of) on_leave_prepare.
                raise _Stopped
            try:
                return True, fn(*args)
            except (FatalBrokerError, ConnectionFailedError) as e:
                # A request of the callback's got an answer retrying cannot change (a missing
                # ACL, a refused login): stop, as when one of the engine's own requests does.
                self._log.error("%s: %s raised %s", self._who(), name, type(e).__name__)
                self._fail(e)
            except Exception:
                self._log.exception("%s: %s raised; the member carries on", self._who(), name)
                return False, None

    def _sleep(self, seconds: float, deadline: float | None = None) -> bool:
        """Back off; False (without sleeping past it) if the deadline comes first."""
        if deadline is not None:
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return False
            seconds = min(seconds, remaining)
        self._clock.sleep(seconds, self._stop)
        self._check_running()
        return True

    def _check_running(self) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _note_problem(self, problem: str) -> None:
        with self._lock:
            self._last_error = problem

    def _who(self) -> str:
        member = self._generation.member_id
        who = f"group {self._config.group_id!r}"
        return f"{who} member {member!r}" if member else who
