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

Where each phase lives: phase 1 in ``core.py`` (``MemberCore``, with the state every
protocol shares), phases 2-3 in ``classic.py`` (``ClassicJoin``, one method per step),
phase 4 in ``heartbeats.py``; the threads and the lifecycle here. The membership lease
(``lease.py``), the statistics (``stats.py``) and the wake-up plan (``wakeplan.py``) are
state objects that return verdicts; they never call the engine. docs/architecture.md
shows how a request flows through them.

A note on locking: all membership state (state, generation, coordinator,
rejoin reason, and the lease, statistics and wake-up plan objects, which have no lock
of their own) is guarded by ``_lock``; requests are sent, and hooks called, without
holding it.
A request remembers the generation it was sent in, and its response only acts
if the generation is still the same (Kafka's ``sentGeneration``): a late
heartbeat error must not reset a generation that was joined meanwhile. User
callbacks run under ``_callback_lock`` so they never overlap.
"""

from __future__ import annotations

import dataclasses

from .._protocol import messages as msg
from .._protocol.error_codes import ErrorCode, error_name
from .._types import NO_GENERATION, MemberState
from ..errors import CoordinationError, CoordinationTimeoutError, CoordinatorStateError
from ..transport import CoordinatorNode, FollowUp, TransportError
from . import classify
from .classic import ClassicJoin
from .classify import Api, Next
from .core import Callbacks, Joined, Stopped

__all__ = ["Callbacks", "GroupMembership"]

# How often idle engine threads look at their stop flag even if nobody wakes them.
_IDLE_WAIT_S = 1.0
# How often a static member waiting out its takeover fence looks for a new rebalance.
_FENCE_POLL_S = 0.1
# How long a leaving member waits for its wake-up to be written before closing.
_LEAVE_WAKEUP_WAIT_S = 1.0


class GroupMembership(ClassicJoin):
    """One member of one group: Kafka's ``AbstractCoordinator`` without the consumer.

    The threads, the lifecycle and the public surface the rest of the library uses; the
    classic protocol's steps come from :class:`~.classic.ClassicJoin` and
    :class:`~.heartbeats.ClassicHeartbeats`, the state they share from
    :class:`~.core.MemberCore`.
    """

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
            self._stats.wakeups += 1
            generation = self._generation.generation_id
            if left_generation is not None and left_generation == generation:
                self._rejoin_told_locked(f"{reason}; the group is rebalancing")
                return
            self._wake_plan.woken(now, generation, probed)
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
        deadline = self._begin_close(timeout_s)
        if deadline is None:
            return
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
            except Stopped:
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
            except Stopped:
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
            except Stopped:
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
            if isinstance(outcome, Joined):
                with self._lock:
                    self._pending = outcome
                continue
            self._handle_failure(outcome, deadline)
            if deadline is not None and self._clock.monotonic() >= deadline:
                return False

    def _complete_join(self, joined: Joined) -> bool:
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

    def note_rebalance_change(self, moved: str) -> None:
        """Say what the last rebalance changed for this member (its timeline's ``moved``)."""
        with self._lock:
            self._stats.note_change(moved)

    def _publish_rebalance(self, generation_id: int) -> None:
        """Put the rebalance just completed on the wake-up channel, for ``describe``."""
        if self._wakeups is None:
            return
        with self._lock:
            record = self._stats.last_record(generation_id)
        if record is None:
            return
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

    # ------------------------------------------------------------------ leave

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
