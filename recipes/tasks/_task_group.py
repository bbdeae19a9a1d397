"""The task distribution's group side: what a worker reports, what the leader assigns, and
what each assignment (or task-set change) makes the worker start and stop.

:class:`TaskGroup` is the :class:`~recipes._recipe.GroupListener` of a
:class:`~recipes.tasks.TaskDistribution`; the tasks themselves are run by its
:class:`~recipes.tasks._runner.TaskRunner`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from coordination import Member
from coordination.errors import ProtocolCodecError

from .._recipe import ClockTimer, GroupListener, RecipeContext
from ._assignor import (
    AssignmentStatus,
    LeaderMemory,
    WorkerAssignment,
    WorkerState,
    assign,
)
from ._runner import TaskRunner, WorkerSettings
from ._sources import TaskSet, TaskSource
from ._wire import (
    decode_assignment,
    decode_worker_metadata,
    encode_assignment,
    encode_worker_metadata,
)

# How long the leader waits for its own task set to catch up with the newest version a
# worker reports, at most (a fraction of the rebalance timeout is also respected).
_CATCH_UP_S: Final = 5.0
# After a CONFIG_MISMATCH round, the leader rejoins after this long (it is reading meanwhile).
_MISMATCH_RETRY_S: Final = 1.0
# A worker whose id another member also uses retries after this long.
_DUPLICATE_RETRY_S: Final = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    """Who runs what, as of the last rebalance: the leader's view, or this worker's part of it.

    Attributes:
        generation: the group generation the view belongs to.
        leader_worker_id: the worker id of the group's leader.
        complete: True on the leader, whose view covers every worker; False on the other
            workers, whose ``workers`` holds only their own tasks (the leader does not send
            the full view to everyone).
        workers: worker id -> the tasks it runs (or starts) after this round.
        held: departed worker id -> tasks waiting for it to come back (leader only).
        moving: task -> the worker that gets it in the next round (leader only).
        unassigned: tasks no worker has room for (leader only).
        delay_ms: if positive, the group rebalances again after this long.
        config_version: the version of the task set the round assigned.
    """

    generation: int
    leader_worker_id: str
    complete: bool
    workers: Mapping[str, tuple[str, ...]]
    held: Mapping[str, tuple[str, ...]]
    moving: Mapping[str, str]
    unassigned: tuple[str, ...]
    delay_ms: int
    config_version: int


@dataclass(frozen=True, slots=True)
class _Proposal:
    """What the leader computed for a generation, kept until its own assignment arrives."""

    generation: int
    own_assignment: bytes
    memory: LeaderMemory
    view: GroupView


class TaskGroup(GroupListener):
    """One worker's part in the group: its report, the leader's assignment, and acting on it.

    State (guarded by the recipe's lock):
        ``assignment`` and ``assigned_generation``: the last assignment applied (None once
        membership or the lease was lost: nothing may start until the next one).
        ``view``: what :meth:`TaskDistribution.describe` returns.
        ``reassign_version``: the newest task-set version read whose change needs a
        rebalance; the worker is not settled before an assignment of it.
        Leader memory (see ``LeaderMemory``): kept only once the leader's own assignment
        for the generation it computed arrives.
    """

    def __init__(
        self, ctx: RecipeContext, runner: TaskRunner, source: TaskSource, settings: WorkerSettings
    ) -> None:
        self.ctx = ctx
        self.runner = runner
        self.source = source
        self.settings = settings
        self.worker_id = settings.worker_id
        self._assignment: WorkerAssignment | None = None
        self._assigned_generation = -1
        self._view: GroupView | None = None
        self._reassign_version = 0
        self._first_join = True
        self._rejoin_timer: ClockTimer | None = None
        self._memory = LeaderMemory()
        self._memory_generation = -1
        self._last_completed_generation = -1
        self._proposal: _Proposal | None = None

    # ------------------------------------------------------------------ queries

    def view(self) -> GroupView | None:
        with self.ctx.lock:
            return self._view

    def settled_view(self) -> GroupView | None:
        """The view, if this worker is settled (see ``TaskDistribution.wait_stable``)."""
        with self.ctx.lock:
            a = self._assignment
            runner = self.runner
            gen = self.ctx.member.generation_if_stable()
            settled = (
                a is not None
                and gen is not None
                and gen.generation_id == self._assigned_generation
                and a.status is AssignmentStatus.OK
                and a.config_version >= self._reassign_version
                and not a.revoked
                and not runner.waiting
                and not runner.stopping
                and self._view is not None
                and not self._view.moving
            )
            return self._view if settled else None

    def unsettled(self) -> str:
        """What keeps this worker from being settled, for a timeout's message."""
        with self.ctx.lock:
            return (
                f"worker {self.worker_id!r} to settle (waiting: {sorted(self.runner.waiting)}, "
                f"stopping: {sorted(self.runner.stopping)})"
            )

    def forget_assignment(self) -> None:
        """Nothing is assigned here any more (membership or lease lost) until the next
        assignment; the caller holds the recipe's lock."""
        self._assignment = None

    # ------------------------------------------------------------------ GroupListener

    def metadata(self) -> bytes:
        return encode_worker_metadata(self.worker_state())

    def worker_state(self) -> WorkerState:
        """What this worker reports in its JoinGroup."""
        if self._first_join:
            # Join with the full task set, not with what was read so far.
            if not self.source.wait_ready(self.ctx.member.config.rebalance_timeout_ms / 2000):
                self.ctx.log.warning(
                    "worker %s: joining before the task set was fully read", self.worker_id
                )
            self._first_join = False
        version, _ = self.source.snapshot()
        return WorkerState(
            member_id="",
            worker_id=self.worker_id,
            owned=self.runner.owned(),
            capacity=self.settings.capacity,
            config_version=version,
        )

    def assign(
        self, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ctx = self.ctx
        workers = [decode_worker_metadata(m.member_id, m.metadata) for m in members]
        newest = max(w.config_version for w in workers)
        budget = min(_CATCH_UP_S, ctx.member.config.rebalance_timeout_ms / 4000)
        if not self.source.wait_for_version(newest, budget):
            ctx.log.warning("leader %s: task set still behind version %d", self.worker_id, newest)
        version, tasks = self.source.snapshot()
        # A memory is only valid if it describes the round this member completed last: a
        # round led by another member (or one that never completed) may have moved tasks.
        memory = (
            self._memory
            if self._memory_generation == self._last_completed_generation >= 0
            else LeaderMemory()
        )
        result = assign(
            {t: s.weight for t, s in tasks.items()},
            workers,
            memory,
            leader_id=leader_id,
            now_ms=int(ctx.clock.monotonic() * 1000),
            max_delay_ms=self.settings.max_delay_ms,
            config_version=version,
            balance=self.settings.balance,
        )
        plan = {member: encode_assignment(a) for member, a in result.assignments.items()}
        by_member = {w.member_id: w.worker_id for w in workers}
        view = GroupView(
            generation=generation,
            leader_worker_id=self.worker_id,
            complete=True,
            workers={
                by_member[m]: a.assigned
                for m, a in result.assignments.items()
                if a.status is AssignmentStatus.OK
            },
            held=result.held,
            moving=result.moving,
            unassigned=result.unassigned,
            delay_ms=result.delay_ms,
            config_version=version,
        )
        self._proposal = _Proposal(generation, plan[leader_id], result.memory, view)
        summary = {by_member[m]: len(a.assigned) for m, a in result.assignments.items()}
        ctx.log.info(
            "leader %s: generation %d: %s; revoked %d; held %s; delay %d ms",
            self.worker_id,
            generation,
            summary,
            sum(len(a.revoked) for a in result.assignments.values()),
            {w: len(ts) for w, ts in result.held.items()},
            result.delay_ms,
        )
        return plan

    def joined(self, generation: int, member_id: str, assignment: bytes) -> None:
        ctx, runner = self.ctx, self.runner
        proposal, self._proposal = self._proposal, None
        self._last_completed_generation = generation
        leader_round = (
            proposal is not None
            and proposal.generation == generation
            and proposal.own_assignment == assignment
        )
        if leader_round:
            assert proposal is not None
            self._memory, self._memory_generation = proposal.memory, generation
        try:
            a = decode_assignment(assignment)
        except ProtocolCodecError as e:
            # Nothing safe to do with an assignment we cannot read but keep what runs; a
            # leader of another version will be replaced or upgraded.
            ctx.log.error("worker %s: cannot read the assignment: %s", self.worker_id, e)
            return
        self.cancel_rejoin()
        runner.count("rounds")
        if a.status is AssignmentStatus.CONFIG_MISMATCH:
            ctx.log.warning(
                "worker %s: generation %d: task set versions differ; nothing changes",
                self.worker_id,
                generation,
            )
            if ctx.member.is_leader:
                self._schedule_rejoin(
                    _MISMATCH_RETRY_S, "the leader is catching up with the task set"
                )
            self._set_assignment(generation, a, None)
            return
        with runner.decisions:
            if a.status is AssignmentStatus.DUPLICATE_WORKER_ID:
                ctx.log.error(
                    "worker %s: another member of group %r uses this worker id; this one runs "
                    "nothing. Give every worker a unique worker_id",
                    self.worker_id,
                    ctx.member.group_id,
                )
                runner.stop_all("duplicate worker id")  # what waits never started: not stopped
                self._set_assignment(generation, a, None)
                self._schedule_rejoin(_DUPLICATE_RETRY_S, "retrying with a duplicate worker id")
                return
            assigned = set(a.assigned)
            # Revoked first, and anything else not assigned (a task stopped and restarted
            # elsewhere must not also run here); then start what is new.
            drop = [t for t in runner.running if t not in assigned]
            with ctx.lock:
                runner.waiting &= assigned
            if drop:
                runner.stop_tasks(drop, f"revoked in generation {generation}")
            with ctx.lock:
                # Not a task whose stop still runs: it starts once that returned. Nothing
                # new once closing: the worker is about to leave.
                if not ctx.closed:
                    runner.waiting |= assigned - set(runner.running) - runner.stopping
            self._set_assignment(
                generation, a, proposal.view if leader_round and proposal else None
            )
            with ctx.lock:
                starting = len(runner.waiting)
            ctx.member.note_rebalance_change(
                f"+{starting} -{len(drop)} tasks, {len(assigned)} assigned"
            )
            self.start_waiting()
        if a.revoked:
            ctx.member.request_rejoin(
                f"worker {self.worker_id} stopped {len(a.revoked)} revoked task(s) to hand over"
            )
        elif a.delay_ms > 0:
            self._schedule_rejoin(a.delay_ms / 1000, "the scheduled rebalance delay elapsed")

    def lost(self) -> None:
        runner = self.runner
        with runner.decisions:
            with self.ctx.lock:
                if runner.running:
                    runner.count("memberships_lost")
                self._assignment = None
            runner.stop_all("this worker lost its place in the group")

    def leaving(self) -> None:
        self.runner.stop_all("the worker is leaving the group")

    def _set_assignment(self, generation: int, a: WorkerAssignment, view: GroupView | None) -> None:
        if view is None:
            view = GroupView(
                generation=generation,
                leader_worker_id=a.leader_worker_id,
                complete=False,
                workers={self.worker_id: a.assigned} if a.status is AssignmentStatus.OK else {},
                held={},
                moving={},
                unassigned=(),
                delay_ms=a.delay_ms,
                config_version=a.config_version,
            )
        with self.ctx.lock:
            self._assignment = a
            self._assigned_generation = generation
            self._view = view
            self.ctx.changed.notify_all()
        # Tasks may wait to start: the watchdog guards them from now on.
        self.runner.lease.wake()

    def lease_held(self) -> None:
        """The lease holds again after it ran low: start what waited for it."""
        with self.runner.decisions:
            self.start_waiting()

    def start_waiting(self) -> None:
        """Start the assigned tasks whose definition this worker has (the caller holds the
        runner's decisions)."""
        runner = self.runner
        a = self._assignment
        if not runner.waiting or a is None or a.status is not AssignmentStatus.OK:
            return
        version, tasks = self.source.snapshot()
        if version < a.config_version:
            self.ctx.log.info(
                "worker %s: waiting for task set version %d (at %d) to start %d task(s)",
                self.worker_id,
                a.config_version,
                version,
                len(runner.waiting),
            )
            return
        if not runner.lease.holds():
            return  # the watchdog stops everything; the next assignment says what to run
        runner.start_tasks(sorted(t for t in runner.waiting if t in tasks), tasks)

    # ------------------------------------------------------------------ the task set

    def tasks_changed(self, version: int, old: TaskSet, new: TaskSet) -> None:
        """A new task set: reconcile what runs here; the leader rejoins if the set changed."""
        ctx, runner = self.ctx, self.runner
        reassign = set(old) != set(new) or any(
            old[t].weight != new[t].weight for t in old.keys() & new.keys()
        )
        with runner.decisions:
            if reassign:
                with ctx.lock:
                    # Not settled until an assignment of this version (or newer) arrives.
                    self._reassign_version = max(self._reassign_version, version)
            gone = [t for t in runner.running if t not in new]
            if gone:
                # Stopping is always safe; the leader's next round revokes them formally.
                runner.stop_tasks(gone, f"removed from the task set (version {version})")
            changed = [t for t, spec in runner.running.items() if new[t].config != spec.config]
            with ctx.lock:
                for t, spec in list(runner.running.items()):
                    if t not in changed and new[t] != spec:
                        runner.running[t] = new[t]  # a new weight alone: nothing to do here
            if changed:
                ctx.log.info(
                    "worker %s: restarting %s: their config changed", self.worker_id, changed
                )
                # Still assigned here: each moves back to waiting as its stop returns (in
                # the same step, so that it is reported as ours throughout), started below.
                runner.stop_tasks(changed, "its config changed", restart=True)
            self.start_waiting()
        if reassign and ctx.member.is_leader:
            # One rejoin, by the leader: the others learn the set by reading it, not by
            # rebalancing, and report their version when the leader's rejoin reaches them.
            ctx.member.request_rejoin(f"the task set changed (version {version})")

    def refresh(self) -> None:
        """Re-read the task set and act on changes (for sources that do not say)."""
        version, tasks = self.source.snapshot()
        with self.ctx.lock:
            known = dict(self.runner.running)
        self.tasks_changed(version, known, tasks)

    # ------------------------------------------------------------------ rejoin timer

    def _schedule_rejoin(self, delay_s: float, reason: str) -> None:
        self.cancel_rejoin()
        timer = ClockTimer(
            self.ctx.clock,
            delay_s,
            lambda: self.ctx.rejoin(reason),
            f"tasks-rejoin|{self.ctx.member.group_id}",
        )
        with self.ctx.lock:
            self._rejoin_timer = timer

    def cancel_rejoin(self) -> None:
        """Cancel a scheduled rejoin, if any."""
        with self.ctx.lock:
            timer, self._rejoin_timer = self._rejoin_timer, None
        if timer is not None:
            timer.cancel()
