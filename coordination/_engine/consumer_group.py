"""Kafka's consumer group protocol (KIP-848): one request, ConsumerGroupHeartbeat, and the
assignment computed by the broker.

A member of a KIP-848 group has no join phase, no leader and no ``perform_assignment``.
It heartbeats with its subscription and its *member epoch*; the broker answers with the
member's epoch and, when it changes, the member's assignment. The member *reconciles*:

1. it gives up (``revoked``) the partitions it owns that the assignment leaves out,
2. it takes (``assigned``) the new partitions of the assignment (the broker puts a
   partition in an assignment only once its previous owner reported it released),
3. it reports what it now owns in its next heartbeat, at once (the broker hands the
   partitions it released to the others only then).

No member waits for another: a slow member holds up only the partitions it gives up.

Threads. The *heartbeat thread* (here) sends every request and acts on every answer; the
*reconcile thread* (:mod:`.reconcile`) runs the recipe's callbacks
(:class:`PartitionCallbacks`), one at a time, so that a slow callback never delays a
heartbeat.

The membership lease. The broker removes a member that sends no heartbeat for its
session, and gives away a partition the member was told to give up once the member's
rebalance timeout passes without the member reporting it released. The lease
(:meth:`ConsumerGroupMembership.membership_lease`) runs out before either: from the sending of
the last answered heartbeat, the session timeout, and while a revocation is pending,
``rebalance_timeout_ms`` from the heartbeat whose answer asked for it. The session timeout
is the broker's to set (the group's ``consumer.session.timeout.ms``, else the broker's
``group.consumer.session.timeout.ms``): before its first join the member asks the broker for
it (``session_lookup``) and takes it where it is below ``session_timeout_ms``; where the
broker cannot say, ``session_timeout_ms`` stands, and must not exceed the broker's.

What it shares with the classic engine: finding the coordinator and the failure handling
(:mod:`.core`), the statistics and hook events (:mod:`.stats`), the heartbeat timers
(:mod:`.heartbeat`), offset commits and fetches (:mod:`.offsets`: the member epoch stands
in the generation's place, as Kafka's OffsetCommit v9 reads it), and the error table
(:mod:`.classify`, its ConsumerGroupHeartbeat column).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from .._config import CoordinatorConfig
from .._protocol import consumer_group as cg
from .._protocol.error_codes import ErrorCode, error_name
from .._transport.base import Wakeups
from .._types import NO_GENERATION, Generation, MemberState
from ..clock import Clock
from ..errors import CoordinationError, CoordinationTimeoutError, CoordinatorStateError
from ..transport import CoordinatorNode, Transport, TransportError
from .classify import Api, Reset
from .epochs import IDLE_WAIT_S, NoClassicCallbacks, new_member_id
from .reconcile import (
    PROTOCOL_NAME,
    ConsumerGroupReconcile,
    PartitionCallbacks,
    Subscription,
    TopicIdPartition,
)

__all__ = [
    "ConsumerGroupMembership",
    "PartitionCallbacks",
    "SessionLookup",
    "Subscription",
    "TopicIdPartition",
]

SessionLookup = Callable[[CoordinatorNode], "int | None"]
"""The group's session timeout in ms as the coordinator ``node`` has it, or None if it does
not say; raises :class:`TransportError` when no answer came (asked again before the join)
and :class:`CoordinationError` when the broker refused (the setting stands)."""


@dataclass(slots=True)
class _Sent:
    """What the last heartbeat told the broker: fields equal to these are sent as null."""

    subscription: Subscription | None = None
    owned: frozenset[TopicIdPartition] | None = None


class ConsumerGroupMembership(ConsumerGroupReconcile):
    """One member of a KIP-848 consumer group (Kafka's ``ConsumerMembershipManager`` and
    heartbeat request manager, in Python)."""

    def __init__(
        self,
        callbacks: PartitionCallbacks,
        config: CoordinatorConfig,
        transport: Transport,
        clock: Clock | None = None,
        wakeups: Wakeups | None = None,
        session_lookup: SessionLookup | None = None,
    ) -> None:
        super().__init__(
            NoClassicCallbacks(PROTOCOL_NAME), callbacks, config, transport, clock, wakeups
        )
        # The session the lease and the session check count with (see the module docstring).
        self._session_timeout_s = config.session_timeout_ms / 1000
        self._session_lookup = session_lookup
        self._member_id = new_member_id(self._clock.random())
        self._epoch = cg.JOIN_EPOCH
        self._protocol_type = PROTOCOL_NAME
        # When the broker may give away the partitions a pending revocation names.
        self._revoke_deadline: float | None = None
        # A static member that was in the group, fenced itself (no answer for a session)
        # and was refused its rejoin with UNRELEASED_INSTANCE_ID: the broker still holds the
        # instance for this member's own old registration (a coordinator that moved restarts
        # the sessions). The next heartbeat releases it (epoch -2), then the member joins.
        self._was_member = False
        self._release_instance = False
        self._lease_until: float | None = None
        # When the first heartbeat since the last answered one was sent: the broker may have
        # begun a revocation when any of them arrived, its rebalance timeout running since.
        self._unanswered_since: float | None = None
        # Send every field in the next heartbeat (joining, after an error or a new coordinator).
        self._send_full = True
        self._sent = _Sent()
        self._heartbeat_now = True
        self._rebalance_timeout_s = config.rebalance_timeout_ms / 1000
        # The last assignment (and epoch) whose acknowledgement was asked for.
        self._acknowledged: tuple[frozenset[TopicIdPartition], int] | None = None

    # ------------------------------------------------------------------ public view

    @property
    def member_id(self) -> str:
        with self._lock:
            return self._member_id

    @property
    def member_epoch(self) -> int:
        with self._lock:
            return self._epoch

    def membership_lease(self) -> float:
        """Seconds during which the broker cannot have given this member's partitions to
        another member; 0.0 if none (see the module docstring)."""
        now = self._clock.monotonic()
        with self._lock:
            if self._lease_until is None or self._epoch <= 0:
                return 0.0
            until = self._lease_until
            if self._revoke_deadline is not None:
                until = min(until, self._revoke_deadline)
            if self._unanswered_since is not None:
                # An answer lost on the way may have asked for a revocation.
                until = min(until, self._unanswered_since + self._rebalance_timeout_s)
        return max(0.0, until - now)

    def react_to_fenced_request(self, sent: Generation, reset: Reset, api: str, code: int) -> None:
        """A request of epoch ``sent`` was refused for its epoch (an OffsetCommit): a fenced
        or unknown member loses its partitions and joins again; a stale epoch only means a
        newer one exists, which the next heartbeat (sent now) brings."""
        if code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self._fenced(f"{api} returned {error_name(code)}", sent.generation_id)
            return
        with self._lock:
            self._heartbeat_now = True
            self._changed.notify_all()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the heartbeat and reconcile threads (idempotent)."""
        with self._lock:
            if self._closing:
                raise CoordinatorStateError(f"{self._who()}: the member is closed")
            if self._threads:
                return
            group = self._config.group_id
            self._threads = [
                self._clock.thread(self._run_heartbeats, f"coordination-heartbeat|{group}"),
                self._clock.thread(self._run_reconcile, f"coordination-reconcile|{group}"),
            ]
            for thread in self._threads:
                thread.start()

    def wait_stable(self, timeout_s: float | None) -> None:
        """Block until the member has an epoch and owns its whole assignment, reported."""
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        with self._lock:
            while not self._stable_locked():
                if self._fatal is not None:
                    raise self._fatal
                if self._closing:
                    raise CoordinatorStateError(f"{self._who()}: the member is closed")
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    raise CoordinationTimeoutError(
                        f"{self._who()}: not stable after {timeout_s}s (epoch {self._epoch}, "
                        f"coordinator {self._coordinator or 'unknown'}, last problem: "
                        f"{self._last_error or 'none'})"
                    )
                self._changed.wait(IDLE_WAIT_S if remaining is None else min(remaining, 1.0))

    def _stable_locked(self) -> bool:
        return (
            self._state is MemberState.STABLE
            and self._target is not None
            and self._owned == self._target
            and self._sent.owned == self._owned
            and not self._lose_all
            and not self._unannounced
        )

    def request_rejoin(self, reason: str) -> None:
        """Send a full heartbeat now (the new protocol has no rejoin: the broker decides)."""
        with self._lock:
            self._rejoin_requests += 1
            self._log.info("%s: full heartbeat requested: %s", self._who(), reason)
            self._send_full = True
            self._heartbeat_now = True
            self._changed.notify_all()

    def subscription_changed(self) -> None:
        """The subscription changed: heartbeat now to tell the broker."""
        with self._lock:
            self._heartbeat_now = True
            self._changed.notify_all()

    def close(self, timeout_s: float, *, leave_group: bool = True) -> None:
        """Give up the partitions, leave the group (epoch -1, or -2 for a static member,
        whose assignment the broker keeps for a session), stop the threads."""
        deadline = self._begin_close(timeout_s)
        if deadline is None:
            return
        try:
            left = False
            if self._callback_lock.acquire(timeout=max(0.0, timeout_s / 2)):
                try:
                    if not self._leave_prepared:
                        self._invoke("leaving", self._partitions.leaving)
                        self._leave_prepared = True
                        left = True
                finally:
                    self._callback_lock.release()
            else:
                self._log.warning(
                    "%s: a callback is still running after %.1fs; not leaving the group "
                    "while the member's work may run (the broker removes the member after "
                    "its session)",
                    self._who(),
                    timeout_s / 2,
                )
            if left and leave_group and self._fatal is None:
                self._leave(deadline)
        finally:
            self._transport.close()
            for thread in self._threads:
                thread.join(max(0.0, deadline - self._clock.monotonic()))
            with self._lock:
                self._state = MemberState.CLOSED
                self._generation = NO_GENERATION
                self._changed.notify_all()

    def _leave(self, deadline: float) -> None:
        with self._lock:
            node = self._coordinator
            joined = self._epoch > 0
            member_id = self._member_id
        if node is None or not joined:
            return
        epoch = cg.STATIC_LEAVE_EPOCH if self._config.is_static else cg.LEAVE_EPOCH
        request = cg.ConsumerGroupHeartbeatRequest(
            group_id=self._config.group_id,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=self._config.group_instance_id,
        )
        self._log.info("%s: leaving the group (epoch %d)", self._who(), epoch)
        if self._send_leave(request, cg.ConsumerGroupHeartbeatResponse, node, deadline) is None:
            return
        with self._lock:
            self._epoch = epoch
            self._lease_until = None

    # ------------------------------------------------------------------ heartbeat thread

    def heartbeat_once(self) -> float:
        """Send a heartbeat if one is due; returns the seconds until the next is due."""
        self.ensure_coordinator_ready(deadline=None)  # backs off between attempts
        if self._session_lookup is not None and not self._adopt_broker_session(
            self._session_lookup
        ):
            # No answer: not joining without it. The wait is here, not the caller's, which
            # skips it while a heartbeat is due at once (a closed connection fails at once).
            self._sleep(self._retry_backoff.next_delay())
            return 0.0
        now = self._clock.monotonic()
        with self._lock:
            self._check_running()
            if self._lose_all:
                # Rejoin once ``lost`` has run (the reconcile thread wakes it). The wait is
                # here, not the caller's: the caller skips its own while a heartbeat is asked
                # for at once (a stale commit, a subscription change), and would spin.
                self._changed.wait(IDLE_WAIT_S)
                return 0.0
            expired = self._epoch > 0 and self._timers.session_expired(now)
            # A static member that took over its instance's place is answered at epoch 0
            # and keeps the partitions it may keep (as Kafka does). Its heartbeats are
            # joins, which the broker answers even after it removed the member (a new
            # member then): no fencing answer would tell it. So its session counts from
            # the last answered heartbeat's sending (the lease's start), which no failed
            # heartbeat or coordinator found again restarts.
            if self._epoch == cg.JOIN_EPOCH and self._owned and self._lease_until is not None:
                expired = now >= self._lease_until
        if expired:
            # No heartbeat answered for a whole session: the broker has removed this member
            # or is about to. Lose the partitions now; the rejoin tells which.
            self._fenced("no heartbeat was answered within the session", self.member_epoch)
            self._mark_coordinator_unknown("session timed out without a heartbeat answer")
            return 0.0
        with self._lock:
            if not self._heartbeat_now and not self._timers.is_due(now):
                return self._timers.time_to_next(now)
            self._heartbeat_now = False
            request = self._request_locked()
            node = self._coordinator
            if self._unanswered_since is None:
                self._unanswered_since = now
            self._heartbeat_sent_locked(now)
        self._tell_hooks()
        assert node is not None
        response = self._exchange_heartbeat(request, cg.ConsumerGroupHeartbeatResponse, node, now)
        if response is None:
            return 0.0
        self._on_response(request, response, now)
        with self._lock:
            return self._timers.time_to_next(self._clock.monotonic())

    def _adopt_broker_session(self, lookup: SessionLookup) -> bool:
        """Before the first join: take the broker's session timeout where it is below
        ``session_timeout_ms`` (the broker removes the member after its own). False when
        no answer came: the coordinator is looked for again and the lookup retried (a
        member that joined meanwhile could trust a lease longer than its session)."""
        with self._lock:
            node = self._coordinator
        assert node is not None
        configured = self._config.session_timeout_ms
        try:
            broker_ms = lookup(node)
        except TransportError as e:
            self._log.info("%s: the group's session timeout: no answer (%s)", self._who(), e)
            self._mark_coordinator_unknown(f"DescribeConfigs got no response: {e}")
            return False
        except CoordinationError as e:  # the broker will not say
            self._log.warning(
                "%s: could not read the group's session timeout from the broker (%s); the "
                "membership lease assumes session_timeout_ms=%d: keep it at or below the "
                "broker's (group.consumer.session.timeout.ms)",
                self._who(),
                e,
                configured,
            )
            broker_ms = None
        self._session_lookup = None
        if broker_ms is None or broker_ms >= configured:
            return True
        self._log.warning(
            "%s: session_timeout_ms=%d is above the group's session timeout at the broker "
            "(%d ms): the membership lease and the session check count with the broker's",
            self._who(),
            configured,
            broker_ms,
        )
        with self._lock:
            self._session_timeout_s = broker_ms / 1000
            self._timers.session_timeout = self._session_timeout_s
        return True

    def _request_locked(self) -> cg.ConsumerGroupHeartbeatRequest:
        """The next heartbeat: every field when joining or after an error; otherwise only
        what changed since the last one (Kafka reads null as unchanged)."""
        cfg = self._config
        if self._release_instance:
            return cg.ConsumerGroupHeartbeatRequest(
                group_id=cfg.group_id,
                member_id=self._member_id,
                member_epoch=cg.STATIC_LEAVE_EPOCH,
                instance_id=cfg.group_instance_id,
            )
        subscription = self._partitions.subscription()
        full = self._send_full or self._epoch == cg.JOIN_EPOCH
        changed = full or subscription != self._sent.subscription
        # Owned, and what the reconcile thread may still take of the target. A partition
        # reported as not owned, the broker may hand to another member at once (its answer
        # moves it elsewhere): a member must never take it afterwards from the older target
        # (found by the fault campaign: two owners for 0.1 s after a coordinator failover).
        owned = (
            self._owned | (self._target or frozenset())
            if self._epoch != cg.JOIN_EPOCH
            else frozenset()
        )
        report_owned = full or owned != self._sent.owned
        request = cg.ConsumerGroupHeartbeatRequest(
            group_id=cfg.group_id,
            member_id=self._member_id,
            member_epoch=self._epoch,
            instance_id=cfg.group_instance_id,
            rack_id=subscription.rack if full else None,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=(
                tuple(sorted(subscription.topics or ()))
                if changed and not subscription.pattern
                else None
            ),
            subscribed_topic_regex=subscription.pattern if changed else None,
            server_assignor=subscription.assignor if changed else None,
            topic_partitions=_by_topic(owned) if report_owned else None,
        )
        self._sent = _Sent(subscription=subscription, owned=owned)
        self._send_full = False
        return request

    def _on_response(
        self,
        request: cg.ConsumerGroupHeartbeatRequest,
        response: cg.ConsumerGroupHeartbeatResponse,
        sent_at: float,
    ) -> None:
        code = response.error_code
        if request.member_epoch == cg.STATIC_LEAVE_EPOCH:
            # The release of this member's own old registration: whatever the answer (the
            # registration may have expired meanwhile), join now.
            self._log.info(
                "%s: released its instance's old registration (%s); joining again",
                self._who(),
                error_name(code),
            )
            with self._lock:
                self._release_instance = False
                self._send_full = True
                self._heartbeat_now = True
                self._changed.notify_all()
            return
        if code == ErrorCode.NONE:
            self._on_success(request, response, sent_at)
            return
        if (
            code == ErrorCode.UNRELEASED_INSTANCE_ID
            and request.member_epoch == cg.JOIN_EPOCH
            and self._was_member
            and not self._release_instance
        ):
            self._log.warning(
                "%s: rejoin refused with UNRELEASED_INSTANCE_ID: the broker still holds the "
                "instance %r for this member's old registration; releasing it (epoch -2)",
                self._who(),
                self._config.group_instance_id,
            )
            with self._lock:
                self._was_member = False  # once: a second refusal is another process's
                self._release_instance = True
                self._heartbeat_now = True
                self._changed.notify_all()
            return
        self._heartbeat_error(
            Api.CONSUMER_GROUP_HEARTBEAT,
            code,
            response.error_message,
            (request.member_id, request.member_epoch),
            sent_at,
        )

    def _on_success(
        self,
        request: cg.ConsumerGroupHeartbeatRequest,
        response: cg.ConsumerGroupHeartbeatResponse,
        sent_at: float,
    ) -> None:
        now = self._clock.monotonic()
        with self._lock:
            if request.member_epoch != self._epoch and self._epoch == cg.JOIN_EPOCH:
                return  # fenced meanwhile: an answer to the old epoch says nothing
            self._timers.received(now)
            self._stats.heartbeat_answered(now)
            if response.member_epoch > 0 and self._config.is_static:
                self._was_member = True
            self._heartbeat_retries.clear()
            self._retry_backoff.reset()
            if response.heartbeat_interval_ms > 0:
                self._timers.interval = response.heartbeat_interval_ms / 1000
            if response.member_id:
                self._member_id = response.member_id
            self._epoch = response.member_epoch
            self._lease_until = sent_at + self._session_timeout_s
            # A revocation this answer asks for may have begun when the first heartbeat
            # after the last answered one arrived (an answer between was lost).
            revoking_since = (
                self._unanswered_since if self._unanswered_since is not None else sent_at
            )
            self._unanswered_since = None
            if request.topic_partitions is not None and self._revoke_deadline is not None:
                reported = frozenset(
                    (t.topic_id, p) for t in request.topic_partitions for p in t.partitions
                )
                if not reported - (self._target or frozenset()):
                    # The broker has the release (only its answer tells: the revocation's
                    # deadline holds until then, whatever this member did meanwhile).
                    self._revoke_deadline = None
            self._generation = Generation(self._epoch, self._member_id, PROTOCOL_NAME)
            if self._state is not MemberState.STABLE:
                self._state = MemberState.STABLE
            if response.assignment is not None:
                target = frozenset(
                    (t.topic_id, p) for t in response.assignment for p in t.partitions
                )
                # What the broker may count as this member's and now waits to see released:
                # it gives those away once the rebalance timeout passes without a heartbeat
                # that reports them gone (whether this member ever took them or not).
                if ((self._target or frozenset()) | self._owned) - target:
                    deadline = revoking_since + self._rebalance_timeout_s
                    if self._revoke_deadline is None or deadline < self._revoke_deadline:
                        self._revoke_deadline = deadline
                # Every new assignment (or epoch) is acknowledged: the next heartbeat reports
                # what the member owns (at once if there is nothing to reconcile), as Kafka's
                # clients do; the broker leaves a revocation pending until it reads such a
                # report. The broker answers a report with the assignment again: the same one
                # at the same epoch needs no second acknowledgement.
                if (target, self._epoch) != self._acknowledged:
                    self._acknowledged = (target, self._epoch)
                    self._sent = _Sent(subscription=self._sent.subscription, owned=None)
                    if target == self._owned:
                        self._heartbeat_now = True
                if target != self._target:
                    self._target = target
                    self._target_epoch = self._epoch
                    if self._stats.attempt(now, "the broker sent a new assignment"):
                        started = self._stats.started_event(self._member_id, "new assignment")
                        self._tell_locked(lambda: self._hooks.rebalance_started(started))
            self._changed.notify_all()
        self._tell_hooks()

    def _fenced(self, reason: str, sent_epoch: int) -> None:
        """The broker no longer counts this member (fenced epoch, unknown member): its
        partitions may be someone else's already. Lose them, rejoin at epoch 0 with the
        same member id (as Kafka's clients do)."""
        with self._lock:
            if sent_epoch != self._epoch:
                return  # already handled
            self._log.warning(
                "%s: %s; losing its partitions and joining again", self._who(), reason
            )
            self._epoch = cg.JOIN_EPOCH
            self._generation = NO_GENERATION
            self._state = MemberState.UNJOINED
            self._lease_until = None
            self._revoke_deadline = None
            self._unanswered_since = None
            self._target = None
            self._lose_all = True
            self._send_full = True
            self._heartbeat_now = False  # after the reconcile thread called lost
            self._changed.notify_all()


def _by_topic(partitions: frozenset[TopicIdPartition]) -> tuple[cg.TopicIdPartitions, ...]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in partitions:
        by_topic.setdefault(topic_id, []).append(partition)
    return tuple(
        cg.TopicIdPartitions(topic_id=t, partitions=tuple(sorted(ps)))
        for t, ps in sorted(by_topic.items())
    )
