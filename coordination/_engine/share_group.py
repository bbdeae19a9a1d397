"""Kafka's share groups (KIP-932, "queues for Kafka"): the membership side, ShareGroupHeartbeat.

A share group's member heartbeats to the group coordinator as a KIP-848 member does (its
own member id, epoch 0 to join, -1 to leave, the interval the broker sets), and the
broker answers with its epoch and, when it changes, its assignment: the partitions it may
fetch from. Unlike a consumer group, several members may be assigned the same partition
(the broker hands each *record* to one member at a time, under an acquisition lock), so
there is nothing to revoke or reconcile: the assignment is usable the moment it arrives,
and there is no reconcile thread. The records themselves are fetched and acknowledged at
each partition's leader, in share sessions (:mod:`.share_sessions`).

Threads: one, the heartbeat thread (:class:`~coordination._engine.epochs.EpochHeartbeats`),
which sends every heartbeat and acts on every answer. Errors follow ``classify.py``'s
ShareGroupHeartbeat column: a fenced epoch or an unknown member joins again at epoch 0
with the same member id; GROUP_MAX_SIZE_REACHED, an authorization failure or a broker
without share groups stop the member (:class:`~coordination.errors.ShareGroupsUnsupportedError`
for the last); coordinator errors find the coordinator again.
"""

from __future__ import annotations

import uuid
from typing import NoReturn

from .._config import CoordinatorConfig
from .._protocol import share_group as sg
from .._protocol.error_codes import ErrorCode
from .._types import NO_GENERATION, Generation, MemberState
from ..clock import Clock
from ..errors import (
    CoordinationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
    ShareGroupsUnsupportedError,
)
from ..transport import Transport
from .classify import Api
from .epochs import IDLE_WAIT_S, EpochHeartbeats, NoClassicCallbacks, new_member_id

PROTOCOL_NAME = "share"

TopicIdPartition = tuple[uuid.UUID, int]
"""A partition as the protocol names it: the topic's id and the partition number."""


class ShareGroupMembership(EpochHeartbeats):
    """One member of a share group (Kafka's ``ShareMembershipManager`` and
    ``ShareHeartbeatRequestManager``, in Python): joins, heartbeats, holds the assignment."""

    def __init__(
        self,
        topics: frozenset[str],
        config: CoordinatorConfig,
        transport: Transport,
        clock: Clock | None = None,
        *,
        rack_id: str | None = None,
    ) -> None:
        super().__init__(NoClassicCallbacks(PROTOCOL_NAME), config, transport, clock)
        self._protocol_type = PROTOCOL_NAME
        self._topics = topics
        self._rack_id = rack_id
        self._member_id = new_member_id(self._clock.random())
        self._epoch = sg.JOIN_EPOCH
        self._assignment: frozenset[TopicIdPartition] | None = None  # None until the first
        self._send_full = True
        self._heartbeat_now = True
        # The coordinator discovery (stats' count) the last heartbeat went to.
        self._discovery_heartbeated = 0

    # ------------------------------------------------------------------ public view

    @property
    def member_id(self) -> str:
        with self._lock:
            return self._member_id

    @property
    def member_epoch(self) -> int:
        with self._lock:
            return self._epoch

    @property
    def topics(self) -> frozenset[str]:
        return self._topics

    def assignment(self) -> frozenset[TopicIdPartition]:
        """The partitions this member may fetch from now (empty before the first)."""
        with self._lock:
            return self._assignment or frozenset()

    def note_problem(self, problem: str) -> None:
        """Record ``problem`` as the member's last (a fetch's, shown by a timeout's error)."""
        self._note_problem(problem)
        self._log.info("%s: %s", self._who(), problem)

    def fail(self, error: CoordinationError) -> NoReturn:
        """Stop the member with ``error`` (a fetch's answer it cannot go on from); raises it."""
        self._fail(error)

    def error_for(self, api: Api, code: int, message: str | None) -> CoordinationError:
        """The error ``code`` stands for in ``api``'s answer to this member."""
        return self._error_for(api, code, self.member_id, message)

    def heartbeat_soon(self) -> None:
        """Heartbeat now (a fetch found the member unknown): the answer tells where the
        member stands."""
        with self._lock:
            self._heartbeat_now = True
            self._changed.notify_all()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the heartbeat thread (idempotent)."""
        with self._lock:
            if self._closing:
                raise CoordinatorStateError(f"{self._who()}: the member is closed")
            if self._threads:
                return
            group = self._config.group_id
            self._threads = [
                self._clock.thread(self._run_heartbeats, f"coordination-share|{group}")
            ]
            self._threads[0].start()

    def wait_assigned(self, timeout_s: float | None) -> None:
        """Block until the member is in the group and the broker has sent it an assignment
        (possibly empty: the broker computes a share group's assignment a moment after a
        member joins, and sends it with a later heartbeat).

        Raises:
            CoordinationTimeoutError: not in time; the member keeps trying.
            FatalBrokerError: the member stopped (for instance ShareGroupsUnsupportedError).
            CoordinatorStateError: the member is closed.
        """
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        with self._lock:
            while self._state is not MemberState.STABLE or self._assignment is None:
                if self._fatal is not None:
                    raise self._fatal
                if self._closing:
                    raise CoordinatorStateError(f"{self._who()}: the member is closed")
                remaining = None if deadline is None else deadline - self._clock.monotonic()
                if remaining is not None and remaining <= 0:
                    raise CoordinationTimeoutError(
                        f"{self._who()}: no assignment after {timeout_s}s (epoch {self._epoch}, "
                        f"coordinator {self._coordinator or 'unknown'}, last problem: "
                        f"{self._last_error or 'none'})"
                    )
                self._changed.wait(IDLE_WAIT_S if remaining is None else min(remaining, 1.0))

    def wait_changed(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for any change of the member's state (an assignment)."""
        with self._lock:
            self._changed.wait(timeout_s)

    def close(self, timeout_s: float, *, leave_group: bool = True) -> None:
        """Leave the group (epoch -1) and stop the heartbeat thread."""
        deadline = self._begin_close(timeout_s)
        if deadline is None:
            return
        try:
            if leave_group and self._fatal is None:
                self._leave(deadline)
        finally:
            for thread in self._threads:
                thread.join(max(0.0, deadline - self._clock.monotonic()))
            with self._lock:
                self._state = MemberState.CLOSED
                self._generation = NO_GENERATION
                self._assignment = frozenset()
                self._changed.notify_all()

    def _leave(self, deadline: float) -> None:
        with self._lock:
            node = self._coordinator
            joined = self._epoch > 0
            member_id = self._member_id
        if node is None or not joined:
            return
        request = sg.ShareGroupHeartbeatRequest(
            group_id=self._config.group_id, member_id=member_id, member_epoch=sg.LEAVE_EPOCH
        )
        self._log.info("%s: leaving the share group", self._who())
        if self._send_leave(request, sg.ShareGroupHeartbeatResponse, node, deadline) is not None:
            with self._lock:
                self._epoch = sg.LEAVE_EPOCH

    # ------------------------------------------------------------------ heartbeat thread

    def heartbeat_once(self) -> float:
        """Send a heartbeat if one is due; returns the seconds until the next is due."""
        self.ensure_coordinator_ready(deadline=None)  # backs off between attempts
        now = self._clock.monotonic()
        with self._lock:
            self._check_running()
            expired = self._epoch > 0 and self._timers.session_expired(now)
        if expired:
            # No heartbeat answered for a whole session: the broker has removed this member
            # or is about to. Join again; the coordinator may have moved.
            self._fenced("no heartbeat was answered within the session", self.member_epoch)
            self._mark_coordinator_unknown("session timed out without a heartbeat answer")
            return 0.0
        with self._lock:
            if self._stats.coordinator_discoveries != self._discovery_heartbeated:
                # The coordinator found (again): tell it everything, now.
                self._discovery_heartbeated = self._stats.coordinator_discoveries
                self._heartbeat_now = self._send_full = True
            if not self._heartbeat_now and not self._timers.is_due(now):
                return self._timers.time_to_next(now)
            self._heartbeat_now = False
            full = self._send_full or self._epoch == sg.JOIN_EPOCH
            request = sg.ShareGroupHeartbeatRequest(
                group_id=self._config.group_id,
                member_id=self._member_id,
                member_epoch=self._epoch,
                rack_id=self._rack_id if full else None,
                subscribed_topic_names=tuple(sorted(self._topics)) if full else None,
            )
            self._send_full = False
            node = self._coordinator
            self._heartbeat_sent_locked(now)
        self._tell_hooks()
        assert node is not None
        response = self._exchange_heartbeat(request, sg.ShareGroupHeartbeatResponse, node, now)
        if response is None:
            return 0.0
        if response.error_code == ErrorCode.NONE:
            self._on_success(request, response)
        else:
            sent = (request.member_id, request.member_epoch)
            self._heartbeat_error(
                Api.SHARE_GROUP_HEARTBEAT, response.error_code, response.error_message, sent, now
            )
        with self._lock:
            if self._coordinator is None or self._heartbeat_now:
                return 0.0  # find the coordinator (or rejoin) now
            return self._timers.time_to_next(self._clock.monotonic())

    def _error_for(
        self, api: Api, code: int, member_id: str, message: str | None
    ) -> CoordinationError:
        if code == ErrorCode.UNSUPPORTED_VERSION:
            # Kafka before 4.1 offers no share-group request (the transport says which it
            # lacks); 4.1+ with share.version off answers UNSUPPORTED_VERSION with no message.
            where = f"{api.value} ({message})" if message else api.value
            return ShareGroupsUnsupportedError(
                code, group_id=self._config.group_id, member_id=member_id, api=where
            )
        return super()._error_for(api, code, member_id, message)

    def _on_success(
        self, request: sg.ShareGroupHeartbeatRequest, response: sg.ShareGroupHeartbeatResponse
    ) -> None:
        now = self._clock.monotonic()
        with self._lock:
            if request.member_epoch != self._epoch and self._epoch == sg.JOIN_EPOCH:
                return  # fenced meanwhile: an answer to the old epoch says nothing
            self._timers.received(now)
            self._stats.heartbeat_answered(now)
            self._stats.heartbeat_total += 1
            self._heartbeat_retries.clear()
            self._retry_backoff.reset()
            if response.heartbeat_interval_ms > 0:
                # The broker's interval, from this heartbeat's sending (the first one was
                # scheduled with the configured one).
                self._timers.interval = response.heartbeat_interval_ms / 1000
                self._timers.next_due = min(
                    self._timers.next_due, self._timers.last_sent + self._timers.interval
                )
            if response.member_id:
                self._member_id = response.member_id
            self._epoch = response.member_epoch
            self._generation = Generation(self._epoch, self._member_id, PROTOCOL_NAME)
            self._state = MemberState.STABLE
            if response.assignment is not None:
                assignment = frozenset(
                    (t.topic_id, p) for t in response.assignment for p in t.partitions
                )
                if assignment != self._assignment:
                    if self._stats.attempt(now, "the broker sent a new assignment"):
                        started = self._stats.started_event(self._member_id, "new assignment")
                        self._tell_locked(lambda: self._hooks.rebalance_started(started))
                    self._log.info(
                        "%s: assigned %d partitions at epoch %d",
                        self._who(),
                        len(assignment),
                        self._epoch,
                    )
                    self._assignment = assignment
                    record = self._stats.finished(now, self._generation, False)
                    finished = self._stats.finished_event(record)
                    self._tell_locked(lambda: self._hooks.rebalance_finished(finished))
            self._changed.notify_all()
        self._tell_hooks()

    def _fenced(self, reason: str, sent_epoch: int) -> None:
        """The broker no longer counts this member (fenced epoch, unknown member, session
        lost): join again at epoch 0 with the same member id, at once. The records it holds
        stay its own until their locks run out or it acknowledges them (the broker checks
        the member id, which is unchanged)."""
        with self._lock:
            if sent_epoch != self._epoch:
                return  # already handled
            self._log.warning("%s: %s; joining again", self._who(), reason)
            self._epoch = sg.JOIN_EPOCH
            self._generation = NO_GENERATION
            self._state = MemberState.UNJOINED
            self._send_full = True
            self._heartbeat_now = True
            self._changed.notify_all()
