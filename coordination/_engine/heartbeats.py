"""Phase 4 of the classic protocol: heartbeats keep the session alive.

The heartbeat thread sends a Heartbeat when one is due (the interval's, or sooner when a
wake-up asked), in COMPLETING_REBALANCE and STABLE, and acts on the answer: NONE renews
the membership lease (:mod:`.lease` says whether it may), REBALANCE_IN_PROGRESS makes a
stable member rejoin, and any other answer resets, rejoins, backs off or rediscovers the
coordinator as ``classify.py``'s Heartbeat column says. The timing (:mod:`.heartbeat`),
the lease and the wake-up plan are shared with any other protocol; the Heartbeat request
and its answers are the classic protocol's (KIP-848 replaces them with
ConsumerGroupHeartbeat).
"""

from __future__ import annotations

from .._protocol import messages as msg
from .._protocol.error_codes import ErrorCode, error_name
from .._types import Generation, MemberState
from ..errors import broker_error
from ..hooks import HeartbeatFailed
from ..transport import CoordinatorNode, TransportError
from . import classify
from .classify import Api, Next
from .core import MemberCore, Stopped, routine
from .lease import MustRejoin

# The states in which a member heartbeats; built once (an enum member's lookup is slow on
# Python 3.11, and the heartbeat thread asks at every turn).
_HEARTBEATING = (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)


class ClassicHeartbeats(MemberCore):
    """The heartbeat thread's work (one :meth:`heartbeat_once` per turn)."""

    def heartbeat_once(self) -> float | None:
        """Send a heartbeat if one is due. Returns seconds until the next is due (None: idle)."""
        now = self._clock.monotonic()
        with self._lock:
            if self._stop.is_set():
                raise Stopped
            self._warn_if_assignment_overdue_locked(now)
            active = self._state in _HEARTBEATING
            if not active or self._coordinator is None:
                return None
            if self._timers.session_expired(now):
                expired = True
            else:
                expired = False
                woken = self._wake_plan.due(now)
                if not woken and not self._timers.is_due(now):
                    return self._time_to_next_heartbeat_locked(now)
                if self._timers.in_flight:
                    return self._timers.time_to_next(now)
                self._wake_plan.heartbeat_sent(now)
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
        return self._wake_plan.next_in(now, self._timers.time_to_next(now))

    def _heartbeat_failed(self, sent: Generation, error: str) -> None:
        group_id = self._config.group_id
        self._hooks.heartbeat_failed(
            lambda: HeartbeatFailed(
                group_id=group_id,
                member_id=sent.member_id,
                generation=sent.generation_id,
                error=error,
            )
        )

    def _on_heartbeat_response(
        self, code: int, sent: Generation, node: CoordinatorNode, sent_at: float | None = None
    ) -> float | None:
        if code not in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
            self._heartbeat_failed(sent, error_name(code))
        now = self._clock.monotonic()
        retry_s = self._config.retry_backoff_ms / 1000
        with self._lock:
            self._stats.heartbeat_total += 1
            if code == ErrorCode.NONE:
                self._heartbeat_retries.clear()
                if sent_at is not None and self._generation == sent:
                    self._renew_lease_locked(sent, sent_at)
                self._timers.received(now)
                self._stats.last_heartbeat_at = now
                return self._time_to_next_heartbeat_locked(now)
            reaction = classify.reaction(Api.HEARTBEAT, code)
            if reaction.next is Next.REJOIN_IF_STABLE:
                # Still a live session. Heartbeats are expected during COMPLETING_REBALANCE;
                # only a stable member learns here that a new rebalance began.
                self._timers.received(now)
                self._stats.last_heartbeat_at = now
                self._wake_plan.at.clear()  # the rebalance shows: nothing left to ask
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
                level = self._heartbeat_retries.level(now, routine(error))
                self._log.log(level, "%s: %s; retrying", self._who(), error)
                return retry_s
        if reaction.next is Next.FATAL:
            with self._lock:
                self._reset_locked(reaction.reset)
            self._fail(error)
        self._mark_coordinator_unknown(f"heartbeat returned {error_name(code)}")
        return None

    def _renew_lease_locked(self, sent: Generation, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was answered NONE: renew the lease if it still held
        when the heartbeat left (see SessionLease.renew). A stable member whose lease ran out
        proves its place again with a join phase, which restarts the session: it leaves (a
        dynamic member's old id would hold up the next phase until its session ends) and
        joins as a new member; a static one takes its instance's place again, and waits out
        its takeover fence like any static member with a new member id."""
        verdict = self._lease.renew(sent, sent_at)
        if isinstance(verdict, MustRejoin) and self._state is MemberState.STABLE:
            self._stale_member_id = sent.member_id
            self._reset_locked(classify.Reset.MEMBER)
            self._request_rejoin_locked(verdict.reason)

    def _found_rebalance(self, generation_id: int) -> None:
        """This member's heartbeat found its group rebalancing away from ``generation_id``:
        its siblings in this process that are still in it rejoin now, without asking (see
        ``sibling_found_rebalance``). Called without the lock: each sibling takes its own."""
        if self._wakeups is not None:
            self._wakeups.rebalancing(generation_id)
