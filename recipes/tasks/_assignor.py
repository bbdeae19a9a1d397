"""The leader's incremental cooperative task assignment (Kafka Connect's KIP-415, for named tasks).

Internal, no compatibility guarantee. :func:`assign` is a pure, deterministic function:
the group leader calls it in ``perform_assignment`` with the task set, what every worker
reports (:class:`WorkerState`) and what the leader remembers from the round before
(:class:`LeaderMemory`); it returns what each worker must stop, keep and start
(:class:`WorkerAssignment`) and the memory for the next round. No I/O, no clock: the
caller passes ``now_ms``.

The rules, in the order :func:`assign` applies them:

1. **A task never runs on two workers.** A task some worker reports running is never given
   to another worker in the same round. To move a task, the leader revokes it from its
   owner in one round; the owner stops it and rejoins; the next round gives it to its new
   owner (KIP-415's revoke-then-assign in two rounds).
2. **Cleanup.** Tasks no longer in the task set are revoked. A task reported by two workers
   is kept by the one the leader last gave it to (else the lowest worker id) and revoked
   from the others. A worker over its capacity sheds tasks until it fits.
3. **Returning workers.** A task the leader gave to worker id ``W`` last round that nobody
   runs now goes back to ``W`` if ``W`` is in the group, whatever its member id (a
   restarted process keeps its worker id, not its member id).
4. **Departed workers.** If ``W`` is gone, its tasks are *held* for it for ``max_delay_ms``
   (Connect's ``scheduled.rebalance.max.delay.ms``) from the round that first found it
   gone; every assignment carries ``delay_ms``, after which the workers rejoin so the held
   tasks can be given to others. If ``W`` comes back in time it gets its tasks back and
   nothing else moves.
5. **New tasks** (and released ones) go, largest first, each to the least loaded worker that
   has room for it.
6. **Balance.** When no task is held, tasks move from heavier to lighter workers while the
   gap between the two is larger than the largest task on the heavier one; each moved task
   is revoked now and assigned next round. So a balanced group is one where every worker is
   within its largest task of every worker with room for it: with equal weights
   (``Balance.COUNT``), counts differ by at most one. Greedy placement already leaves workers
   that close, so a leave revokes nothing; a join revokes just enough to fill the newcomer.
   Balanced is a property of the loads alone, so the round that hands the revoked tasks over
   finds nothing more to move. Balance revocations never happen in two rounds back to back
   either: if the round after a revoking round would revoke again (a worker joined
   meanwhile), it waits a growing backoff first (Connect's KAFKA-12495). A join or a leave
   thus settles in at most two rounds, without a revocation storm.

Capacity (``WorkerState.capacity``) is a hard limit: a worker over it sheds tasks (smallest
kept first) even while tasks are held, and a task no worker has room for stays unassigned
and is reported in :attr:`AssignmentResult.unassigned`.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Final

from coordination.errors import ConfigurationError

__all__ = [
    "AssignmentResult",
    "AssignmentStatus",
    "Balance",
    "LeaderMemory",
    "WorkerAssignment",
    "WorkerState",
    "assign",
]

# Loads are sums of floats; comparisons allow this much (relative) rounding error so that
# two loads equal on paper compare equal, and a task that just fits is seen to fit.
_EPS: Final = 1e-9

# The backoff before a second balance revocation right after one, then x10 per further
# revoking round in the same streak, capped at max_delay_ms (Connect: 40 ms, x40).
_BALANCE_BACKOFF_BASE_MS: Final = 100
_BALANCE_BACKOFF_FACTOR: Final = 10


class Balance(enum.Enum):
    """What the assignor balances between workers."""

    COUNT = "count"
    """The number of tasks: weights are ignored and capacities count tasks."""
    WEIGHT = "weight"
    """The total weight of the tasks: capacities are total weights."""


class AssignmentStatus(enum.IntEnum):
    """Whether an assignment can be acted on; anything but OK means "change nothing"."""

    OK = 0
    """Apply the assignment: stop ``revoked``, run ``assigned``."""
    CONFIG_MISMATCH = 1
    """A worker has seen a newer task set than the leader. Nobody changes anything; the
    leader refreshes its task set and every worker rejoins (Connect's CONFIG_MISMATCH)."""
    DUPLICATE_WORKER_ID = 2
    """Another member of the group has this worker's ``worker_id`` and was chosen; this
    one gets no tasks (``revoked`` lists all it ran) until it is the only one with that id.
    Two processes are configured with the same worker id; a person should fix it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerState:
    """One member as the leader sees it: decoded from its JoinGroup metadata.

    Attributes:
        member_id: the member id the coordinator gave it this generation.
        worker_id: its stable identity across restarts (e.g. ``host:port`` or the static
            ``group_instance_id``); the leader remembers tasks by worker id, so a restarted
            worker gets its tasks back.
        owned: the tasks it runs now (it is still running them while the group rebalances).
        capacity: the most it takes: a number of tasks under ``Balance.COUNT``, a total
            weight under ``Balance.WEIGHT``; None for no limit.
        config_version: the version of the task set this worker has seen.

    Raises:
        ConfigurationError: ``worker_id`` is empty or ``capacity`` is negative or not finite.
    """

    member_id: str
    worker_id: str
    owned: frozenset[str] = frozenset()
    capacity: float | None = None
    config_version: int = 0

    def __post_init__(self) -> None:
        if not self.worker_id:
            raise ConfigurationError(f"member {self.member_id!r}: worker_id must not be empty")
        if self.capacity is not None and not (math.isfinite(self.capacity) and self.capacity >= 0):
            raise ConfigurationError(
                f"worker {self.worker_id!r}: capacity must be a finite number >= 0 or None, "
                f"not {self.capacity!r}"
            )
        if not isinstance(self.owned, frozenset):
            # Accept any set from callers; the dataclass stays hashable and immutable.
            object.__setattr__(self, "owned", frozenset(self.owned))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerAssignment:
    """What one worker must do after a rebalance.

    A worker applies it in this order: if ``status`` is not OK, change nothing. Otherwise
    stop every task in ``revoked``; then run exactly ``assigned`` (it includes the tasks the
    worker keeps, which it must not restart). If ``revoked`` is not empty, rejoin at once
    so the next round can hand those tasks to their new owners; else, if ``delay_ms`` is
    positive, rejoin after ``delay_ms``.

    Attributes:
        assigned: the tasks to run from now on, sorted; the worker keeps those it already runs.
        revoked: the tasks to stop now, sorted; never overlaps ``assigned``.
        delay_ms: if positive, rejoin after this many milliseconds: tasks are held for a
            departed worker, or a balance revocation waits out its backoff.
        leader_id: the leader's member id.
        leader_worker_id: the leader's worker id.
        config_version: the version of the task set the leader assigned; a worker that has
            seen an older one must catch up before starting a task it does not know.
        status: OK, or why the worker must change nothing.
    """

    assigned: tuple[str, ...] = ()
    revoked: tuple[str, ...] = ()
    delay_ms: int = 0
    leader_id: str = ""
    leader_worker_id: str = ""
    config_version: int = 0
    status: AssignmentStatus = AssignmentStatus.OK

    def started(self, owned: AbstractSet[str]) -> frozenset[str]:
        """The tasks to start: assigned to this worker and not in ``owned`` (what it runs)."""
        return frozenset(self.assigned) - owned

    @property
    def needs_rejoin(self) -> bool:
        """True if the worker must rejoin at once (it has tasks to hand over)."""
        return self.status is AssignmentStatus.OK and bool(self.revoked)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderMemory:
    """What the leader carries from one round to the next; pass ``LeaderMemory()`` to start.

    Keep the memory returned by :func:`assign` only once the round completed (the leader's
    own ``on_join_complete`` received the assignment it computed), like Connect discarding
    its previous assignment when the generation does not match: a memory from a round that
    never reached the workers describes tasks nobody started. Memory is only a hint for
    liveness: safety (never two owners) rests on what the workers report. A new leader
    starts empty: tasks nobody runs are then simply assigned, and the delay for a worker
    that left under the previous leader is forgotten.

    Attributes:
        previous: worker id -> the tasks the leader gave it (or holds for it), after the
            last round's revocations.
        departed: worker id -> the time (ms) at which the tasks held for it are released.
        moving: task -> the worker id it was revoked for last round (it gets it next round).
        revoked_last_round: whether the last round revoked tasks to balance the load.
        revoking_streak: how many rounds revoked for balance since the load last settled.
        balance_not_before_ms: no balance revocation before this time (backoff).
    """

    previous: Mapping[str, frozenset[str]] = field(default_factory=dict)
    departed: Mapping[str, int] = field(default_factory=dict)
    moving: Mapping[str, str] = field(default_factory=dict)
    revoked_last_round: bool = False
    revoking_streak: int = 0
    balance_not_before_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentResult:
    """The outcome of :func:`assign`.

    Attributes:
        assignments: member id -> its assignment; every worker passed in has one.
        memory: what the leader must pass to the next :func:`assign` (see :class:`LeaderMemory`).
        held: departed worker id -> the tasks waiting for it to come back (sorted).
        moving: task -> the worker id that gets it next round (revoked from its owner now).
        unassigned: tasks no worker has room for (capacity), sorted; they stay unassigned.
        delay_ms: the ``delay_ms`` of every assignment (0: no rejoin scheduled).
    """

    assignments: Mapping[str, WorkerAssignment]
    memory: LeaderMemory
    held: Mapping[str, tuple[str, ...]]
    moving: Mapping[str, str]
    unassigned: tuple[str, ...]
    delay_ms: int


def assign(
    tasks: Mapping[str, float],
    workers: Sequence[WorkerState],
    memory: LeaderMemory,
    *,
    leader_id: str,
    now_ms: int,
    max_delay_ms: int,
    config_version: int = 0,
    balance: Balance = Balance.WEIGHT,
) -> AssignmentResult:
    """Compute one round of incremental cooperative assignment (see the module docstring).

    Example:
        # In the leader's perform_assignment (the codecs are in recipes.tasks._wire):
        workers = [decode_worker_metadata(m.member_id, m.metadata) for m in members]
        result = assign(
            self._tasks, workers, self._memory, leader_id=leader_id,
            now_ms=int(time.monotonic() * 1000), max_delay_ms=300_000,
            config_version=self._tasks_version,
        )
        self._pending_memory = result.memory  # kept once the round completes
        return {m: encode_assignment(a) for m, a in result.assignments.items()}

    Deterministic: the result depends only on the arguments, not on the order of
    ``workers`` or of ``tasks``.

    Args:
        tasks: task id -> weight (> 0; use 1.0 when tasks are alike): the full task set.
        workers: every member of this generation, the leader included.
        memory: what the previous :func:`assign` returned, or ``LeaderMemory()``.
        leader_id: the leader's member id (one of ``workers``).
        now_ms: the current time in milliseconds (any monotonic clock, used consistently).
        max_delay_ms: how long the tasks of a departed worker wait for it
            (``scheduled.rebalance.max.delay.ms``; Connect's default is 300000); 0 gives
            them to others at once. Also caps the backoff between balance revocations.
        config_version: the version of ``tasks``; if a worker reports a newer one, every
            worker gets ``CONFIG_MISMATCH`` and nothing changes.
        balance: balance task counts or total weights.

    Returns:
        Every worker's assignment and the memory for the next round.

    Raises:
        ConfigurationError: a weight is not a finite number > 0, a task id is empty,
            ``max_delay_ms`` is negative, two workers share a member id, or ``leader_id``
            is not among ``workers``.
    """
    _check_arguments(tasks, workers, leader_id, max_delay_ms)
    members = sorted(workers, key=lambda w: (w.worker_id, w.member_id))
    leader = next(w for w in members if w.member_id == leader_id)

    base = WorkerAssignment(
        leader_id=leader.member_id,
        leader_worker_id=leader.worker_id,
        config_version=config_version,
    )

    if any(w.config_version > config_version for w in members):
        # Connect's CONFIG_MISMATCH: assigning from an old task set could revoke tasks a
        # newer set still has, or miss new ones; better that the leader catches up first.
        mismatch = replace(base, status=AssignmentStatus.CONFIG_MISMATCH)
        return AssignmentResult(
            assignments={w.member_id: mismatch for w in members},
            memory=memory,
            held={},
            moving={},
            unassigned=(),
            delay_ms=0,
        )

    loads = {t: 1.0 if balance is Balance.COUNT else float(w) for t, w in tasks.items()}
    primary, duplicates = _pick_primaries(members)
    state = _classify(loads, primary, members, memory, now_ms, max_delay_ms)

    capacities = {wid: w.capacity for wid, w in primary.items()}
    planner = _Planner(loads, capacities, state)

    # Rule 6: balance only when nothing is held for a departed worker (its tasks will come
    # back or be spread soon; moving others now could mean moving them twice), and never
    # in two rounds back to back.
    streak = memory.revoking_streak
    not_before = memory.balance_not_before_ms
    revoked_now = False
    deferred = False
    if state.held:
        plan = planner.plan(balancing=False)
    else:
        plan = planner.plan(balancing=True)
        if plan.balance_moves:
            throttled = max_delay_ms > 0 and (
                memory.revoked_last_round or now_ms < memory.balance_not_before_ms
            )
            if throttled:
                if now_ms >= not_before:
                    not_before = now_ms + _balance_backoff(max(streak, 1), max_delay_ms)
                plan = planner.plan(balancing=False)
                deferred = True
            else:
                streak += 1
                revoked_now = True
        else:
            streak, not_before = 0, 0

    waits = [deadline - now_ms for deadline in state.deadlines.values()]
    if deferred:
        waits.append(not_before - now_ms)
    delay_ms = max(1, min(waits)) if waits else 0

    assignments: dict[str, WorkerAssignment] = {}
    for wid, worker in primary.items():
        final = plan.final[wid]
        assignments[worker.member_id] = replace(
            base,
            assigned=tuple(sorted(final)),
            revoked=tuple(sorted(worker.owned - final)),
            delay_ms=delay_ms,
        )
    for worker in duplicates:
        assignments[worker.member_id] = replace(
            base,
            revoked=tuple(sorted(worker.owned)),
            delay_ms=delay_ms,
            status=AssignmentStatus.DUPLICATE_WORKER_ID,
        )

    previous = {wid: frozenset(final) for wid, final in plan.final.items() if final}
    previous.update((wid, frozenset(ts)) for wid, ts in state.held.items())
    new_memory = LeaderMemory(
        previous=previous,
        departed=dict(state.deadlines),
        moving=dict(plan.moving),
        revoked_last_round=revoked_now,
        revoking_streak=streak,
        balance_not_before_ms=not_before,
    )
    return AssignmentResult(
        assignments=assignments,
        memory=new_memory,
        held={wid: tuple(sorted(ts)) for wid, ts in state.held.items()},
        moving=dict(plan.moving),
        unassigned=tuple(sorted(plan.unassigned)),
        delay_ms=delay_ms,
    )


def _check_arguments(
    tasks: Mapping[str, float], workers: Sequence[WorkerState], leader_id: str, max_delay_ms: int
) -> None:
    for task, weight in tasks.items():
        if not task:
            raise ConfigurationError("task ids must not be empty")
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight > 0):
            raise ConfigurationError(
                f"task {task!r}: weight must be a finite number > 0, not {weight!r}"
            )
    if max_delay_ms < 0:
        raise ConfigurationError(f"max_delay_ms must be >= 0, not {max_delay_ms}")
    member_ids = [w.member_id for w in workers]
    if len(set(member_ids)) != len(member_ids):
        raise ConfigurationError("two workers have the same member_id")
    if leader_id not in member_ids:
        raise ConfigurationError(f"leader {leader_id!r} is not among the workers")


def _pick_primaries(
    members: Sequence[WorkerState],
) -> tuple[dict[str, WorkerState], list[WorkerState]]:
    """One member per worker id; the others are duplicates that get nothing.

    Of several members with one worker id, the one running the most tasks is kept (it is
    most likely the live process; keeping it moves the least), then the lowest member id.
    """
    by_worker: dict[str, list[WorkerState]] = {}
    for m in members:
        by_worker.setdefault(m.worker_id, []).append(m)
    primary: dict[str, WorkerState] = {}
    duplicates: list[WorkerState] = []
    for wid in sorted(by_worker):
        ranked = sorted(by_worker[wid], key=lambda m: (-len(m.owned), m.member_id))
        primary[wid] = ranked[0]
        duplicates.extend(ranked[1:])
    return primary, duplicates


@dataclass(slots=True)
class _RoundState:
    """Where every task of the task set stands at the start of a round."""

    running: dict[str, set[str]]  # worker id -> tasks it runs and may keep
    returning: dict[str, set[str]]  # worker id -> tasks nobody runs that go back to it
    free: set[str]  # tasks nobody runs or waits for: new, released, or unknown to memory
    held: dict[str, set[str]]  # departed worker id -> tasks waiting for it
    deadlines: dict[str, int]  # departed worker id -> when its held tasks are released


def _classify(
    loads: Mapping[str, float],
    primary: Mapping[str, WorkerState],
    members: Sequence[WorkerState],
    memory: LeaderMemory,
    now_ms: int,
    max_delay_ms: int,
) -> _RoundState:
    """Rules 1-4: who keeps what it runs, what returns, what is held, what is free."""
    previous_owner: dict[str, str] = {}
    for wid in sorted(memory.previous):
        for task in memory.previous[wid]:
            previous_owner.setdefault(task, wid)

    # Everything any member runs, duplicates included: none of it may start elsewhere now.
    busy: set[str] = set()
    for m in members:
        busy |= m.owned

    running: dict[str, set[str]] = {wid: set() for wid in primary}
    claimants: dict[str, list[str]] = {}
    for wid, worker in primary.items():  # sorted by worker id
        for task in worker.owned:
            if task in loads:
                claimants.setdefault(task, []).append(wid)
    for task, wids in claimants.items():
        # Two claimants: a worker kept running a task it should have stopped (a missed
        # assignment, a leader change). The one the leader gave it to last is the rightful
        # owner; without memory, any fixed choice will do.
        last = previous_owner.get(task)
        running[last if last in wids else wids[0]].add(task)

    returning: dict[str, set[str]] = {wid: set() for wid in primary}
    free: set[str] = set()
    held: dict[str, set[str]] = {}
    deadlines: dict[str, int] = {}
    for task in sorted(loads):
        if task in busy:
            continue
        destination = memory.moving.get(task)
        if destination is not None and destination in primary:
            returning[destination].add(task)
            continue
        owner = previous_owner.get(task)
        if owner is None:
            free.add(task)
        elif owner in primary:
            returning[owner].add(task)
        elif max_delay_ms > 0:
            deadline = memory.departed.get(owner, now_ms + max_delay_ms)
            if now_ms < deadline:
                held.setdefault(owner, set()).add(task)
                deadlines[owner] = deadline
            else:
                free.add(task)
        else:
            free.add(task)
    return _RoundState(running, returning, free, held, deadlines)


def _balance_backoff(streak: int, max_delay_ms: int) -> int:
    factor = _BALANCE_BACKOFF_FACTOR ** min(streak - 1, 12)
    return int(min(max_delay_ms, _BALANCE_BACKOFF_BASE_MS * factor))


@dataclass(slots=True)
class _Plan:
    final: dict[str, set[str]]  # worker id -> tasks it runs after this round
    moving: dict[str, str]  # task revoked this round -> worker id that gets it next round
    unassigned: list[str]
    balance_moves: int  # running tasks revoked only to balance the load


class _Planner:
    """Rules 5 and 6: what each worker keeps, where new tasks go, what moves for balance."""

    def __init__(
        self,
        loads: Mapping[str, float],
        capacities: Mapping[str, float | None],
        state: _RoundState,
    ) -> None:
        self._loads = loads
        self._capacities = capacities
        self._state = state
        # The worker running each task that some worker runs and may keep.
        self._origin = {t: wid for wid, ts in state.running.items() for t in ts}
        planned = set(state.free).union(*state.running.values(), *state.returning.values())
        scale = max([1.0, *(loads[t] for t in planned)])
        self._eps = _EPS * scale * max(1, len(planned))

    def plan(self, *, balancing: bool) -> _Plan:
        """Plan the round; with ``balancing`` off, no running task moves except for capacity."""
        loads, eps, state, origin = self._loads, self._eps, self._state, self._origin
        on: dict[str, set[str]] = {}
        level: dict[str, float] = {}
        over_capacity: set[str] = set()
        pool: list[str] = sorted(state.free)
        for wid, capacity in self._capacities.items():
            # Capacity is a hard limit, enforced even when balancing waits. Running tasks
            # first, smallest first: a returning task is dropped before a running one is
            # revoked, and as many tasks as possible stay.
            total = 0.0
            kept: set[str] = set()
            order = sorted(state.running[wid], key=lambda t: (loads[t], t)) + sorted(
                state.returning[wid], key=lambda t: (loads[t], t)
            )
            for task in order:
                if capacity is not None and total + loads[task] > capacity + eps:
                    pool.append(task)
                    if task in origin:
                        over_capacity.add(task)
                    continue
                kept.add(task)
                total += loads[task]
            on[wid] = kept
            level[wid] = math.fsum(loads[t] for t in kept)

        # New, released and shed tasks: largest first, each to the least loaded worker with
        # room for it (the LPT greedy). Then balance: move tasks from heavier to lighter
        # workers while a move narrows their gap (see _improving_move). Each move lowers the
        # sum of squared loads, so this ends; and where it ends is a property of the loads
        # alone, so the round after a handover (same loads, the moved tasks now running)
        # finds nothing to move: no storm. Balancing can make room for a task that fitted
        # nowhere before, hence the loop.
        unassigned = sorted(pool, key=lambda t: (-loads[t], t))
        moves_left = 4 * len(loads) + 16  # a guard against float pathologies only
        while True:
            waiting = unassigned
            unassigned = []
            moved = False
            # Workers by (load, worker id); those without room for a task are set aside
            # for it and put back after.
            heap = [(level[wid], wid) for wid in self._capacities]
            heapq.heapify(heap)
            for task in waiting:
                load = loads[task]
                skipped: list[tuple[float, str]] = []
                best: str | None = None
                while heap:
                    entry = heapq.heappop(heap)
                    capacity = self._capacities[entry[1]]
                    if capacity is None or entry[0] + load <= capacity + eps:
                        best = entry[1]
                        break
                    skipped.append(entry)
                for entry in skipped:
                    heapq.heappush(heap, entry)
                if best is None:
                    unassigned.append(task)
                    continue
                on[best].add(task)
                level[best] += load
                heapq.heappush(heap, (level[best], best))
            while moves_left > 0:
                move = self._improving_move(on, level, balancing)
                if move is None:
                    break
                moves_left -= 1
                moved = True
                task, source, target = move
                on[source].remove(task)
                on[target].add(task)
                level[source] = math.fsum(loads[t] for t in on[source])
                level[target] = math.fsum(loads[t] for t in on[target])
            if not (moved and unassigned):
                break  # nothing changed since the placement above: nothing more fits

        final: dict[str, set[str]] = {wid: set() for wid in on}
        moving: dict[str, str] = {}
        balance_moves = 0
        for wid, tasks in on.items():
            for task in tasks:
                running_on = origin.get(task)
                if running_on is None or running_on == wid:
                    final[wid].add(task)
                else:
                    # Revoked from running_on now; runs on wid from the next round.
                    moving[task] = wid
                    if task not in over_capacity:
                        balance_moves += 1
        return _Plan(final, moving, unassigned, balance_moves)

    def _improving_move(
        self, on: Mapping[str, set[str]], level: Mapping[str, float], balancing: bool
    ) -> tuple[str, str, str] | None:
        """The next task to move (task, from, to), or None if the plan is balanced.

        A task that does not run where it is planned moves if that narrows the gap between
        the two workers (gap > its load). A running task moves only if the gap is larger
        than the largest task on the giver: greedy placement never leaves a worker more than
        one task above another, so a leave (whose tasks are simply placed) never revokes,
        and balanced means "every worker is within its largest task of every other", which
        for equal loads is "counts differ by at most one".
        """
        loads, eps, origin = self._loads, self._eps, self._origin
        descending = sorted(on, key=lambda w: (-level[w], w))
        ascending = descending[::-1]
        for source in descending:
            if not on[source]:
                continue
            largest = max(loads[t] for t in on[source])
            movable = {
                t: (largest if origin.get(t) == source else loads[t]) + eps
                for t in on[source]
                if balancing or origin.get(t) != source
            }
            if not movable:
                continue
            lowest = min(movable.values())
            for target in ascending:
                gap = level[source] - level[target]
                if gap <= lowest:
                    break  # targets only get heavier from here on
                capacity = self._capacities[target]
                room = math.inf if capacity is None else capacity - level[target] + eps
                best: tuple[bool, float, str] | None = None
                for task, needed in movable.items():
                    load = loads[task]
                    if gap > needed and load <= room:
                        # Prefer a task that costs no revocation, then the one that
                        # narrows the gap the most (closest to half of it).
                        key = (origin.get(task) == source, abs(gap - 2 * load), task)
                        if best is None or key < best:
                            best = key
                if best is not None:
                    return best[2], source, target
        return None
