"""What every membership protocol shares: the member's state, its locks, finding the
coordinator, user callbacks, failures and what to do about them.

:class:`MemberCore` holds the state that the module docstring of
:mod:`coordination._engine` describes (and its locking rules), and phase 1 of the
protocol (find the coordinator). The classic protocol's steps (:mod:`.classic`,
:mod:`.heartbeats`) and the threads and lifecycle (:mod:`.membership`) build on it; a
second membership protocol (KIP-848) would build on it the same way. Its collaborators,
the session lease (:mod:`.lease`), the statistics (:mod:`.stats`) and the wake-up plan
(:mod:`.wakeplan`), return verdicts that the engine acts on and import nothing of it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from .._config import CoordinatorConfig
from .._logging import MemberLogAdapter
from .._metrics import MemberMetrics
from .._protocol import messages as msg
from .._protocol.error_codes import ErrorCode, error_name
from .._transport.base import Wakeups
from .._types import NO_GENERATION, Generation, Member, MemberState, ProtocolMetadata
from ..clock import SYSTEM_CLOCK, Clock, Thread
from ..errors import (
    BrokerError,
    ConnectionFailedError,
    CoordinationError,
    CoordinatorStateError,
    FatalBrokerError,
    InconsistentGroupProtocolError,
    broker_error,
)
from ..hooks import HookCaller
from ..transport import CoordinatorNode, Transport, TransportError
from . import classify
from .backoff import ExponentialBackoff
from .classify import Api, Next, Reaction, Reset
from .heartbeat import HeartbeatTimers
from .lease import SessionLease
from .stats import RebalanceStats
from .wakeplan import WakePlan

log = logging.getLogger("coordination.member")

# The states of a member that holds no place in a generation. Built once: looking up an enum
# member costs a few hundred nanoseconds on Python 3.11, and the lease is read on every poll.
_PLACELESS = (MemberState.UNJOINED, MemberState.CLOSED)

# How often a lasting failure to reach the cluster is logged at WARNING.
UNREACHABLE_WARN_EVERY_S = 30.0


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


class Stopped(Exception):
    """The engine is closing; unwind the membership thread."""


@dataclass(frozen=True, slots=True)
class Joined:
    """A completed join and sync whose assignment still has to reach on_join_complete."""

    generation: Generation
    assignment: bytes
    is_leader: bool


@dataclass(frozen=True, slots=True)
class Failed:
    """A join or sync attempt that failed, and what to do about it."""

    reaction: Reaction
    reason: str
    sent: Generation
    error: CoordinationError | None = None


class RetryLog:
    """The level a retried problem is logged at: INFO while it is routine (a retriable
    answer: a coordinator loading the group, busy, or moving, as Kafka's clients log them),
    WARNING once it has lasted ``UNREACHABLE_WARN_EVERY_S`` (then at most that often) and
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
        if now - self._since < UNREACHABLE_WARN_EVERY_S:
            return logging.INFO
        if self._warned_at is None or now - self._warned_at >= UNREACHABLE_WARN_EVERY_S:
            self._warned_at = now
            return logging.WARNING
        return logging.INFO

    def clear(self) -> None:
        """The problem is over (the member is stable, a heartbeat was answered)."""
        self._since = self._warned_at = None


def routine(error: CoordinationError | None) -> bool:
    """Whether retrying ``error`` is routine: a broker answer its class calls retriable."""
    return isinstance(error, BrokerError) and error.retriable


class MemberCore:
    """One member's state and the steps every membership protocol shares (see the module
    docstring); :class:`~coordination._engine.membership.GroupMembership` is the whole
    engine."""

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
        # Hook events queued under the lock, in the order they happened, and told once it
        # is released (_tell_hooks), in that order, whichever thread happened on them.
        self._untold: deque[Callable[[], None]] = deque()
        self._telling = self._clock.rlock()
        self._stop = self._clock.event()

        self._state = MemberState.UNJOINED
        self._generation = NO_GENERATION
        self._leader_id: str | None = None
        self._coordinator: CoordinatorNode | None = None
        # None when no rejoin is needed; otherwise why one is (sent as the KIP-800 reason).
        self._rejoin_reason: str | None = "the member is joining the group for the first time"
        self._rejoin_requests = 0  # bumped by every request_rejoin, to not lose one mid-join
        self._needs_join_prepare = True
        self._pending: Joined | None = None
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
        # What the broker's answers prove of this member's session (see lease.py).
        self._lease = SessionLease(config.session_timeout_ms, config.rebalance_timeout_ms)
        # This member's own id that it gave up to prove its place again (see
        # _renew_lease_locked): a dynamic member leaves it before the next JoinGroup.
        self._stale_member_id: str | None = None
        # Heartbeats wake-ups asked for, and whether a rebalance was announced (wakeplan.py).
        self._wake_plan = WakePlan()
        self._init_timing()

    def _init_timing(self) -> None:
        """The heartbeat timers, the backoffs and the statistics."""
        config = self._config
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
        self._stats = RebalanceStats(config.group_id, config.group_instance_id, config.client_id)
        self._threads: list[Thread] = []
        # How retries of a rebalance, and of heartbeats, are logged (see RetryLog).
        self._join_retries = RetryLog()
        self._heartbeat_retries = RetryLog()

    # ------------------------------------------------------------------ public view

    @property
    def state(self) -> MemberState:
        with self._lock:
            return self._state

    @property
    def generation(self) -> Generation:
        with self._lock:
            return self._generation

    @property
    def hooks(self) -> HookCaller:
        """The member's hooks, one typed method per event; call them without the lock."""
        return self._hooks

    @property
    def _confirmed(self) -> tuple[Generation, float] | None:
        """The lease's last proof of the session (see SessionLease.confirmed)."""
        return self._lease.confirmed

    @property
    def _wake_at(self) -> list[float]:
        """The heartbeats wake-ups asked for (engine clock), soonest first."""
        return self._wake_plan.at

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
        except Stopped:
            raise CoordinatorStateError(f"{self._who()}: the member is closed") from None

    def _begin_close(self, timeout_s: float) -> float | None:
        """The first step of either engine's close(): mark the member closing and wake its
        threads. Returns close()'s deadline, or None if it was closing already.

        Raises:
            CoordinatorStateError: called on one of the member's own threads (a callback),
                where close() would wait for itself.
        """
        if self._clock.current_thread() in self._threads:
            raise CoordinatorStateError(
                f"{self._who()}: close() was called from a callback, on the member's own "
                "thread; it would wait for itself. Call close() from another thread."
            )
        deadline = self._clock.monotonic() + timeout_s
        with self._lock:
            if self._closing:
                return None
            self._closing = True
            self._stop.set()
            self._changed.notify_all()
        return deadline

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
            gone = self._state in _PLACELESS
            expires = None if gone else self._lease.expires_at(self._generation)
            if expires is None:
                return 0.0
        return max(0.0, expires - self._clock.monotonic())

    def metrics(self) -> MemberMetrics:
        now = self._clock.monotonic()
        with self._lock:
            return self._stats.snapshot(now)

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
                self._stats.coordinator_discoveries += 1
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
        if last is None or now - last >= UNREACHABLE_WARN_EVERY_S:
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

    # ------------------------------------------------------------------ failures

    def _transport_failed(self, e: TransportError, api: str, sent: Generation) -> Failed:
        if e.fatal:
            error = e.stop_error(f"{self._who()}: {api}")
            return Failed(Reaction(Next.FATAL), str(e), sent, error)
        # The member id is kept: the broker may still know it (Kafka keeps it too).
        return Failed(Reaction(Next.FIND_COORDINATOR), f"{api} got no response: {e}", sent)

    def _broker_failed(self, code: int, api: Api, sent: Generation) -> Failed:
        error = broker_error(
            code, group_id=self._config.group_id, member_id=sent.member_id, api=api.value
        )
        reason = f"{api.value} returned {error_name(code)}"
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            with self._lock:
                self._wake_plan.rebalance_told = True
        return Failed(classify.reaction(api, code), reason, sent, error)

    def _inconsistent(self, problem: str, sent: Generation) -> Failed:
        error = InconsistentGroupProtocolError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            group_id=self._config.group_id,
            member_id=sent.member_id,
            api=problem,
        )
        return Failed(Reaction(Next.FATAL), problem, sent, error)

    def _handle_failure(self, failed: Failed, deadline: float | None) -> None:
        """Act on a failed join or sync attempt: reset what it asks, count it, then back
        off, rediscover the coordinator, rejoin at once, or stop (classify.py decides)."""
        reaction = failed.reaction
        with self._lock:
            if reaction.reset is not Reset.NOTHING and self._generation == failed.sent:
                self._reset_locked(reaction.reset)
            if self._state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
                self._state = MemberState.UNJOINED
            counted = reaction.next is not Next.RETRY_WITH_MEMBER_ID
            if counted:
                self._stats.attempt_failed()
                self._note_problem(failed.reason)
                if self._rejoin_reason is None or reaction.next is not Next.RETRY_NOW:
                    self._rejoin_reason = f"rebalance failed: {failed.reason}"
            elif self._rejoin_reason is None:
                self._rejoin_reason = failed.reason
            self._changed.notify_all()
        if counted:
            stats = self._stats
            self._hooks.rebalance_failed(
                lambda: stats.failed_event(failed.sent.member_id, failed.reason)
            )
        if reaction.next is Next.FATAL:
            self._fail(failed.error or CoordinationError(f"{self._who()}: {failed.reason}"))
        elif reaction.next is Next.FIND_COORDINATOR:
            self._mark_coordinator_unknown(failed.reason)
        elif reaction.next is Next.RETRY_BACKOFF:
            delay = self._retry_backoff.next_delay()
            level = self._join_retries.level(self._clock.monotonic(), routine(failed.error))
            self._log.log(level, "%s: %s; retrying in %.2fs", self._who(), failed.reason, delay)
            self._sleep(delay, deadline)
        else:
            self._log.info("%s: %s; rejoining at once", self._who(), failed.reason)

    def _reset_locked(self, reset: Reset) -> None:
        if reset is Reset.MEMBER:
            self._generation = NO_GENERATION
            self._lease.member_reset()
            # A new member's join starts a rebalance of its own, whatever this member was
            # told of before: the others must hear of it (see ClassicJoin._join).
            self._wake_plan.member_reset()
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

    # ------------------------------------------------------------------ helpers

    def _request_rejoin_locked(self, reason: str) -> None:
        if self._rejoin_reason is None:
            self._rejoin_reason = reason
        self._stats.rejoin_requested(reason)
        self._log.info("%s: rejoin requested: %s", self._who(), reason)
        self._changed.notify_all()

    def _rejoin_told_locked(self, reason: str) -> None:
        """Rejoin a rebalance known to be under way: nothing is left to ask by heartbeat, and
        the JoinGroup answers the rebalance, so it wakes nobody."""
        self._wake_plan.told_of_rebalance()
        self._request_rejoin_locked(reason)

    def _tell_locked(self, tell: Callable[[], None]) -> None:
        """(Under the lock) Queue a hook event for :meth:`_tell_hooks`."""
        self._untold.append(tell)

    def _tell_hooks(self) -> None:
        """Tell the hooks the queued events, in order, with the lock released (a hook may
        call the member; a slow hook must not hold up the other threads' work)."""
        with self._telling:
            while self._untold:
                self._untold.popleft()()

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
                raise Stopped
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
            raise Stopped

    def _note_problem(self, problem: str) -> None:
        with self._lock:
            self._last_error = problem

    def _who(self) -> str:
        member = self._generation.member_id
        who = f"group {self._config.group_id!r}"
        return f"{who} member {member!r}" if member else who
