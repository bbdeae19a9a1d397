"""Phases 2 and 3 of the classic protocol: JoinGroup, the leader's assignment, SyncGroup.

One rebalance attempt (:meth:`ClassicJoin._rebalance_once`) reads as the protocol does,
one method per step:

1. :meth:`~ClassicJoin._begin_rebalance`: the member is PREPARING_REBALANCE; the first
   attempt of a rebalance starts its statistics and the ``rebalance_started`` hook.
2. :meth:`~ClassicJoin._join`: JoinGroup with this member's protocols (the join may wake
   the group's other members first, see :mod:`.wakeplan`).
3. :meth:`~ClassicJoin._on_join_answer`: take the new generation; what the answer proves
   of the session (:mod:`.lease`); a static member's takeover fence; COMPLETING_REBALANCE.
4. :meth:`~ClassicJoin._lead`: the leader runs ``perform_assignment``.
5. :meth:`~ClassicJoin._sync`: SyncGroup (with a proving heartbeat first when the lease
   runs low), which returns this member's assignment.
6. :meth:`~ClassicJoin._become_stable`: STABLE; the statistics' timeline record and the
   ``rebalance_finished`` hook.

Each step returns its result or a :class:`~.core.Failed`, which the membership thread
hands to ``_handle_failure``. Everything here is specific to JoinGroup/SyncGroup; a
KIP-848 member would replace this module (and :mod:`.heartbeats`), not change it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from .._protocol import messages as msg
from .._protocol.error_codes import ErrorCode, error_name
from .._types import Generation, Member, MemberState, ProtocolMetadata
from ..errors import AssignmentError
from ..transport import CoordinatorNode, TransportError
from .classify import Api, Next, Reaction, Reset
from .core import Failed, Joined
from .heartbeats import ClassicHeartbeats
from .lease import missed_generations

# JoinGroup waits this much longer than the rebalance timeout (Kafka's JOIN_GROUP_TIMEOUT_LAPSE).
_JOIN_TIMEOUT_LAPSE_S = 5.0
# What the broker stores per member besides metadata and assignment (client id, host, timeouts).
_MEMBER_OVERHEAD = 128


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One join-and-sync attempt, as it began."""

    sent: Generation
    """The generation the member held when it began (its JoinGroup's member id)."""
    coordinator: CoordinatorNode
    reason: str
    requests_at_start: int
    """``request_rejoin`` calls so far: one made during the attempt asks for another."""
    long_timeout_s: float
    """How long a JoinGroup, or a follower's SyncGroup, may wait at the broker."""


class ClassicJoin(ClassicHeartbeats):
    """The classic protocol's join and sync (see the module docstring)."""

    def _rebalance_once(self, prepared: Generation) -> Joined | Failed | None:
        """One JoinGroup and, if it succeeds, one SyncGroup.

        ``prepared`` is the generation the subclass last saw in ``on_join_prepare``. If the
        heartbeat thread (or a fenced commit) reset the generation since, return None without
        joining: the subclass must first learn, in ``on_join_prepare(-1)``, that what it owned
        is lost, or it would claim it again with a stale generation.
        """
        attempt = self._begin_rebalance(prepared)
        if not isinstance(attempt, _Attempt):
            return attempt
        answer = self._join(attempt)
        if isinstance(answer, Failed):
            return answer
        joined, join_sent_at = answer
        generation = self._on_join_answer(attempt, joined, join_sent_at)
        if isinstance(generation, Failed):
            return generation
        is_leader = joined.leader != "" and joined.leader == joined.member_id
        self._log.info(
            "%s: joined generation %d with protocol %r as %s",
            self._who(),
            generation.generation_id,
            generation.protocol,
            "leader" if is_leader else "follower",
        )
        assignments = self._lead(generation, joined) if is_leader else ()
        if isinstance(assignments, Failed):
            return assignments
        synced = self._sync(attempt, generation, assignments)
        if isinstance(synced, Failed):
            return synced
        return self._become_stable(attempt, generation, is_leader, synced)

    # ------------------------------------------------------------------ 1. begin

    def _begin_rebalance(self, prepared: Generation) -> _Attempt | Failed | None:
        """PREPARING_REBALANCE, unless the generation changed since ``on_join_prepare``."""
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
            starting = self._stats.attempt(now, reason)
        if starting:
            stats = self._stats
            self._hooks.rebalance_started(lambda: stats.started_event(sent.member_id, reason))
        if coordinator is None:
            return Failed(Reaction(Next.FIND_COORDINATOR), "coordinator unknown", sent)
        long_timeout_s = max(
            cfg.request_timeout_ms / 1000, cfg.rebalance_timeout_ms / 1000 + _JOIN_TIMEOUT_LAPSE_S
        )
        return _Attempt(sent, coordinator, reason, requests_at_start, long_timeout_s)

    # ------------------------------------------------------------------ 2. join

    def _join(self, attempt: _Attempt) -> tuple[msg.JoinGroupResponse, float] | Failed:
        """Send the JoinGroup; its answer and send time, or why it failed."""
        cfg = self._config
        sent, coordinator = attempt.sent, attempt.coordinator
        with self._lock:
            stale, self._stale_member_id = self._stale_member_id, None
        if stale and not cfg.is_static:
            self._leave_stale_member(stale, coordinator)
        protocols = self._protocols()
        if isinstance(protocols, Failed):
            return protocols
        self._log.info("%s: joining (%s)", self._who(), attempt.reason)
        join = msg.JoinGroupRequest(
            group_id=cfg.group_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms,
            member_id=sent.member_id,
            group_instance_id=cfg.group_instance_id,
            protocol_type=self._protocol_type,
            protocols=tuple((p.name, p.metadata) for p in protocols),
            reason=msg.truncate_reason(attempt.reason),
        )
        join_sent_at = self._clock.monotonic()
        with self._lock:
            self._lease.join_sent(sent.generation_id, join_sent_at)
            announce = self._wakeups is not None and self._wake_plan.join_announces(
                bool(sent.member_id), cfg.is_static
            )
        if announce:
            assert self._wakeups is not None
            self._wakeups.announce(sent.member_id or str(cfg.group_instance_id), "join")
        try:
            joined = self._transport.send(
                join,
                msg.JoinGroupResponse,
                coordinator=coordinator,
                timeout_s=attempt.long_timeout_s,
            )
        except TransportError as e:
            with self._lock:
                self._lease.join_answer_was_lost()
            return self._transport_failed(e, "JoinGroup", sent)
        with self._lock:
            self._stats.join_total += 1
        problem = self._check_join_answer(joined, sent)
        return (joined, join_sent_at) if problem is None else problem

    def _check_join_answer(self, joined: msg.JoinGroupResponse, sent: Generation) -> Failed | None:
        """Why a JoinGroup answer cannot be used (None: it can)."""
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
        return None

    def _protocols(self) -> Sequence[ProtocolMetadata] | Failed:
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
            return Failed(Reaction(Next.RETRY_BACKOFF), problem, self.generation)
        assert protocols is not None
        return cast(Sequence[ProtocolMetadata], protocols)

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

    # ------------------------------------------------------------------ 3. the join's answer

    def _on_join_answer(
        self, attempt: _Attempt, joined: msg.JoinGroupResponse, join_sent_at: float
    ) -> Generation | Failed:
        """Take the generation the JoinGroup answered: COMPLETING_REBALANCE, heartbeats on."""
        cfg, sent = self._config, attempt.sent
        with self._lock:
            if self._state is not MemberState.PREPARING_REBALANCE:
                return Failed(Reaction(Next.RETRY_NOW), "the join was abandoned", sent)
            missed = missed_generations(
                cfg.is_static, self._generation.generation_id, joined.generation_id
            )
            if missed:
                # The rejoin may be answered this generation again, without a new session
                # (the broker restarted it when the phase completed): no lease from it.
                self._lease.saw_generation(joined.generation_id)
                return Failed(Reaction(Next.RETRY_NOW, Reset.GENERATION), missed, sent)
            generation = Generation(joined.generation_id, joined.member_id, joined.protocol_name)
            self._generation = generation
            session_restarted = self._lease.confirm_join(
                generation,
                generation,
                join_sent_at,
                kept_static_follower=(
                    cfg.is_static and bool(sent.member_id) and joined.leader != joined.member_id
                ),
            )
            if cfg.is_static and not sent.member_id:
                self._start_takeover_fence_locked()
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
        return generation

    def _start_takeover_fence_locked(self) -> None:
        """A new member id for this instance id: see _await_takeover_fence. Also when the
        member gave up its own id to prove its place again: the id it replaced may be a
        restarted process's, which took the place while this one was cut off and acts under
        a lease of its own."""
        fence_s = self._lease.lease_s  # the longest an earlier process's lease can last
        self._takeover_fence_until = self._clock.monotonic() + fence_s
        self._log.info(
            "%s: static member with a new member id; its assignments take effect in "
            "%.1fs, once any earlier process with group_instance_id %r has stopped",
            self._who(),
            fence_s,
            self._config.group_instance_id,
        )

    # ------------------------------------------------------------------ 4. lead

    def _lead(
        self, generation: Generation, joined: msg.JoinGroupResponse
    ) -> tuple[tuple[str, bytes], ...] | Failed:
        """The leader's assignment for every member (none to send after KIP-814's skip)."""
        if joined.skip_assignment:
            # KIP-814: a static leader came back to a stable group; the broker keeps the
            # current assignment, so the leader must not compute a new one.
            self._log.info(
                "%s: static leader rejoined a stable group; skipping assignment", self._who()
            )
            return ()
        return self._assign(generation, joined.members)

    def _assign(
        self, generation: Generation, raw_members: Sequence[msg.JoinGroupResponseMember]
    ) -> tuple[tuple[str, bytes], ...] | Failed:
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
        problem = self._check_plan(ok, plan, members)
        if problem is not None:
            error = AssignmentError(f"{self._who()}: {problem}")
            self._note_problem(str(error))
            self._log.error("%s; rejoining after backoff", error)
            return Failed(Reaction(Next.RETRY_BACKOFF), problem, generation, error)
        assert isinstance(plan, Mapping)
        assignments = tuple(sorted((k, bytes(v)) for k, v in plan.items()))
        return self._check_size(generation, assignments, raw_members)

    def _check_plan(self, ok: bool, plan: object, members: Sequence[Member]) -> str | None:
        """What is wrong with ``perform_assignment``'s result (None: nothing)."""
        if not ok:
            return "perform_assignment raised"
        if not isinstance(plan, Mapping):
            return f"perform_assignment must return a Mapping, got {type(plan).__name__}"
        known = {x.member_id for x in members}
        unknown = sorted(set(plan) - known)
        bad = sorted(k for k, v in plan.items() if not isinstance(v, bytes | bytearray))
        if unknown:
            return f"perform_assignment assigned to unknown members {unknown}"
        if bad:
            return f"perform_assignment gave non-bytes assignments to {bad}"
        missing = sorted(known - set(plan))
        if missing:
            self._log.warning(
                "%s: perform_assignment left out members %s; they get an empty assignment",
                self._who(),
                missing,
            )
        return None

    def _check_size(
        self,
        generation: Generation,
        assignments: tuple[tuple[str, bytes], ...],
        raw_members: Sequence[msg.JoinGroupResponseMember],
    ) -> tuple[tuple[str, bytes], ...] | Failed:
        """The assignments, unless the group state is too large for the broker to store."""
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
            return Failed(Reaction(Next.FATAL), problem, generation, error)
        return assignments

    # ------------------------------------------------------------------ 5. sync

    def _sync(
        self, attempt: _Attempt, generation: Generation, assignments: tuple[tuple[str, bytes], ...]
    ) -> msg.SyncGroupResponse | Failed:
        """Send the SyncGroup (a proving heartbeat first if the lease runs low); its answer."""
        cfg, coordinator = self._config, attempt.coordinator
        with self._lock:
            tried = self._lease_runs_low_locked(generation)
        proved_at = self._proving_heartbeat(generation, coordinator) if tried else None
        if isinstance(proved_at, Failed):
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
                sync,
                msg.SyncGroupResponse,
                coordinator=coordinator,
                timeout_s=attempt.long_timeout_s,
            )
        except TransportError as e:
            return self._transport_failed(e, "SyncGroup", generation)
        with self._lock:
            self._stats.sync_total += 1
        problem = self._check_sync_answer(synced, generation)
        if problem is not None:
            return problem
        with self._lock:
            self._lease.credit_heartbeat(generation, proved_at)
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
            failed = self._prove_and_sync_again(sync, generation, coordinator)
            if failed is not None:
                return failed
        return synced

    def _check_sync_answer(
        self, synced: msg.SyncGroupResponse, generation: Generation
    ) -> Failed | None:
        """Why a SyncGroup answer cannot be used (None: it can)."""
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
        return None

    def _prove_and_sync_again(
        self, sync: msg.SyncGroupRequest, generation: Generation, coordinator: CoordinatorNode
    ) -> Failed | None:
        """A proving heartbeat and the SyncGroup repeated (without assignments)."""
        proved_at = self._proving_heartbeat(generation, coordinator)
        if isinstance(proved_at, Failed):
            return proved_at
        # Repeated whatever the heartbeat's answer: the SyncGroup tells whether the
        # assignment still holds (a refused heartbeat credits nothing).
        try:
            resynced = self._transport.send(
                dataclasses.replace(sync, assignments=()),
                msg.SyncGroupResponse,
                coordinator=coordinator,
                timeout_s=self._config.request_timeout_ms / 1000,
            )
        except TransportError as e:
            return self._transport_failed(e, "SyncGroup", generation)
        if resynced.error_code != ErrorCode.NONE:
            return self._broker_failed(resynced.error_code, Api.SYNC_GROUP, generation)
        with self._lock:
            self._lease.credit_heartbeat(generation, proved_at)
        return None

    def _lease_runs_low_locked(self, generation: Generation) -> bool:
        """Whether the lease will not last until the heartbeat thread's next heartbeat
        (two intervals' margin)."""
        margin_s = 2 * self._config.heartbeat_interval_ms / 1000
        return self._lease.runs_low(generation, self._clock.monotonic(), margin_s)

    def _proving_heartbeat(
        self, generation: Generation, coordinator: CoordinatorNode
    ) -> float | Failed | None:
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
            self._stats.heartbeat_total += 1
            if response.error_code == ErrorCode.NONE:
                answered_at = self._clock.monotonic()
                self._timers.answered_elsewhere(answered_at)
                self._stats.last_heartbeat_at = answered_at
        if response.error_code != ErrorCode.NONE:
            # The SyncGroup that follows gets the same answer and handles it.
            self._log.debug(
                "%s: heartbeat before SyncGroup returned %s",
                self._who(),
                error_name(response.error_code),
            )
            return None
        return now

    # ------------------------------------------------------------------ 6. stable

    def _become_stable(
        self,
        attempt: _Attempt,
        generation: Generation,
        is_leader: bool,
        synced: msg.SyncGroupResponse,
    ) -> Joined | Failed:
        """STABLE in ``generation``, unless the heartbeat thread reset it meanwhile."""
        with self._lock:
            completing = self._state is MemberState.COMPLETING_REBALANCE
            now_s = self._clock.monotonic()
            if self._generation != generation or not completing:
                # The heartbeat thread reset the generation while SyncGroup was in flight.
                return Failed(
                    Reaction(Next.RETRY_NOW),
                    "the generation was reset while the sync was in flight",
                    generation,
                )
            self._state = MemberState.STABLE
            rejoined_same = self._lease.first_join_generation() == generation.generation_id
            self._wake_plan.stable(now_s, rejoined_same)
            self._lease.stable()
            if self._rejoin_requests == attempt.requests_at_start:
                self._rejoin_reason = None
            record = self._stats.finished(self._clock.monotonic(), generation, is_leader)
            self._retry_backoff.reset()
            self._join_retries.clear()
            self._last_error = None
            self._changed.notify_all()
        self._log.info(
            "%s: stable in generation %d after %.3fs (%d bytes assigned)",
            self._who(),
            generation.generation_id,
            record.duration_s,
            len(synced.assignment),
        )
        stats = self._stats
        self._hooks.rebalance_finished(lambda: stats.finished_event(record))
        return Joined(generation, synced.assignment, is_leader)
