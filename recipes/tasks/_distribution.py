"""The task distribution recipe: named tasks spread over a group of workers, Connect style."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from typing_extensions import Self

from coordination import Coordinator, Member, MemberState, ProtocolMetadata
from coordination._lease import LeaseGuard, engine_clock
from coordination.errors import (
    ConfigurationError,
    CoordinationError,
    CoordinationTimeoutError,
    CoordinatorStateError,
    ProtocolCodecError,
)

from ._assignor import (
    AssignmentStatus,
    Balance,
    LeaderMemory,
    WorkerAssignment,
    WorkerState,
    assign,
)
from ._sources import CallableTasks, StaticTasks, TaskSet, TaskSource, TaskSpec
from ._wire import (
    decode_assignment,
    decode_worker_metadata,
    encode_assignment,
    encode_worker_metadata,
)

log = logging.getLogger("recipes.tasks")

PROTOCOL_TYPE: Final = "tasks"
PROTOCOL_NAME: Final = "tasks-v0"

# How often the lease watchdog looks at the clock while tasks run; short, so that a process
# resumed after a pause stops its tasks within this long even if nothing else wakes it.
_WATCHDOG_S: Final = 0.05
# How often it looks whether tasks run, while none do (starting one also wakes it).
_WATCHDOG_IDLE_S: Final = 0.5
# How long the leader waits for its own task set to catch up with the newest version a
# worker reports, at most (a fraction of the rebalance timeout is also respected).
_CATCH_UP_S: Final = 5.0
# After a CONFIG_MISMATCH round, the leader rejoins after this long (it is reading meanwhile).
_MISMATCH_RETRY_S: Final = 1.0
# A worker whose id another member also uses retries after this long.
_DUPLICATE_RETRY_S: Final = 10.0


class TaskError(CoordinationError):
    """A task failed to start or stop; passed to ``on_task_error``.

    Attributes:
        task_id: the task.
    """

    def __init__(self, task_id: str, message: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class TaskStartError(TaskError):
    """``start_task`` raised (the cause is chained); the task is not running here."""


class TaskStopError(TaskError):
    """``stop_task`` raised (the cause is chained); the task is treated as stopped."""


class TaskStopTimeoutError(TaskStopError):
    """``stop_task`` did not return within ``stop_timeout_ms``.

    Whatever the reason for the stop (revocation, removal, lost membership, the lease
    watchdog, close), the worker keeps reporting the task as its own in every JoinGroup
    until ``stop_task`` returns, so that the leader gives it to no other worker, and does
    not start it again meanwhile; it rejoins when the stop returns. :meth:`close` waits for
    such stops (up to half its timeout) before leaving. If the group removes the worker
    while the stop still runs (its session expired, or close left after waiting in vain),
    the group gives the task away regardless: it may then run twice, and this error is the
    only trace of it.
    """


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


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskMetrics:
    """Counters of one worker, from :meth:`TaskDistribution.metrics`."""

    rounds: int
    """Assignments received (``on_join_complete`` calls)."""
    started: int
    """``start_task`` calls that returned."""
    stopped: int
    """``stop_task`` calls that returned (in time or late)."""
    start_failures: int
    """``start_task`` calls that raised."""
    stop_failures: int
    """``stop_task`` calls that raised."""
    stop_timeouts: int
    """``stop_task`` calls that overran ``stop_timeout_ms``."""
    lease_expiries: int
    """Times the membership lease ran out while tasks ran (every task was stopped)."""
    memberships_lost: int
    """Times the member lost its place in the group while tasks ran (every task was stopped)."""


class TaskDistribution:
    """Run each of a set of named tasks on exactly one worker of a group, moving few of them.

    Example:
        import threading

        threads = {}

        def start_task(task_id, spec):
            stop = threading.Event()
            def work():
                while not stop.is_set() and workers.owns(task_id):
                    process_one_batch(task_id, spec.config)
            threads[task_id] = (stop, threading.Thread(target=work, daemon=True))
            threads[task_id][1].start()

        def stop_task(task_id):
            stop, thread = threads.pop(task_id)
            stop.set()
            thread.join()

        workers = TaskDistribution(
            "ingest-workers", worker_id="host-a", start_task=start_task, stop_task=stop_task,
            tasks={"ingest-eu": 2.0, "ingest-us": 1.0, "reports": 0.5},
            bootstrap_servers="localhost:9092",
        )
        with workers:
            workers.wait_stable(timeout=60)
            print(workers.running())

    Protocol:
        Kafka Connect's incremental cooperative rebalancing (KIP-415) for named tasks, under
        the group protocol type ``"tasks"``. Each worker joins with the tasks it runs; the
        leader computes who keeps, stops and starts what (see ``recipes.tasks._assignor``).
        A worker keeps running its tasks through a rebalance; it stops only the tasks
        revoked from it, then rejoins at once so that the next round hands them to their
        new owners. A task moves in two rounds and never runs on two workers at once. A
        worker that departs (crash, restart) has its tasks *held* for ``max_delay_ms``;
        back within the delay (same ``worker_id``), it gets them back and nothing else
        moves; otherwise they go to the others. Weights and capacities shape the balance.

    Task set:
        ``tasks`` is a mapping ``task id -> weight or TaskSpec`` (change it with
        :meth:`update_tasks` on every worker), a callable returning one (call
        :meth:`refresh_tasks` after a change), or a :class:`TaskSource` such as
        :class:`TopicTasks`, a compacted topic every worker reads. When the task set
        changes, the leader rejoins once (one rebalance); a task whose ``config`` alone
        changed is restarted where it runs, without a rebalance; a removed task is stopped
        at once by the worker that runs it.

    Callbacks and threads:
        ``start_task(task_id, spec)`` and ``stop_task(task_id)`` run on the group's
        membership thread, on the task source's thread (after a change), on the lease
        watchdog or on the thread calling :meth:`close`; never two ``start_task`` at once,
        never a ``start_task`` while a batch of stops is within its ``stop_timeout_ms``,
        and never a ``start_task`` for a task whose ``stop_task`` has not returned (one that
        overran may still run while other tasks start). ``start_task`` must return quickly
        (start a thread). ``stop_task`` calls for several tasks run in parallel, one helper
        thread each, and must return within ``stop_timeout_ms``. Neither may call
        :meth:`close`. ``on_task_error(task_id, error)`` runs on the thread that saw
        the error.

    Guarantees:
        A task runs on at most one worker at a time, provided that ``stop_task`` returns
        within ``stop_timeout_ms`` and the host's clock does not run slower than the
        broker's by more than ``lease_margin_ms``. A task is started only by the worker the
        leader assigned it to, after its previous owner reported it stopped. A worker
        reports a task as its own in every JoinGroup from its assignment (waiting to start,
        starting, running) until its ``stop_task`` has returned, however long that takes;
        a stop that overruns can let the task run twice only if the group removes the
        worker before the stop returns (see :class:`TaskStopTimeoutError`). A worker that
        cannot confirm its membership stops every task ``lease_margin_ms +
        stop_timeout_ms`` before the broker could have removed it (and so before the group
        can have given its tasks away): a network partition or a paused process (SIGSTOP,
        a VM pause) ends its tasks in time. A paused process cannot act while paused; when
        it resumes, :meth:`owns` returns False at once and ``stop_task`` runs within
        ~50 ms. Work that checks :meth:`owns` before each unit therefore never happens
        after the lease ran out; work already under way when the pause began (or that
        does not check) may go on until ``stop_task`` ends it. Make such work safe with
        fencing (e.g. a transactional producer) where it matters.
    """

    def __init__(
        self,
        group_id: str,
        *,
        worker_id: str,
        start_task: Callable[[str, TaskSpec], None],
        stop_task: Callable[[str], None],
        tasks: Mapping[str, float | TaskSpec]
        | Callable[[], Mapping[str, float | TaskSpec]]
        | TaskSource,
        max_delay_ms: int = 300_000,
        stop_timeout_ms: int = 5_000,
        capacity: float | None = None,
        balance: Balance = Balance.WEIGHT,
        on_task_error: Callable[[str, TaskError], None] | None = None,
        lease_margin_ms: int | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the workers' group (its own group, not a consumer group).
            worker_id: this worker's identity across restarts (e.g. its host name); unique
                in the group. A worker that restarts with the same id within
                ``max_delay_ms`` gets its tasks back.
            start_task: starts a task here; must return quickly.
            stop_task: stops a task here; must return within ``stop_timeout_ms``.
            tasks: the task set (see the class docstring).
            max_delay_ms: how long a departed worker's tasks wait for it (Connect's
                ``scheduled.rebalance.max.delay.ms``); default 300000 (Connect's); 0 gives
                them to others at once.
            stop_timeout_ms: how long ``stop_task`` may take (Connect's
                ``task.shutdown.graceful.timeout.ms``); default 5000.
            capacity: the most this worker takes (a total weight under ``Balance.WEIGHT``,
                a number of tasks under ``Balance.COUNT``); default None, no limit.
            balance: balance total weights (default) or task counts.
            on_task_error: called with every :class:`TaskError` (also logged).
            lease_margin_ms: how much earlier than needed the worker stops its tasks when it
                cannot confirm its membership; default ``heartbeat_interval_ms``.
            **settings: the group's settings (``bootstrap_servers``, ``session_timeout_ms``,
                TLS, SASL, ...), as for :class:`coordination.Coordinator`.

        Raises:
            ConfigurationError: an argument or setting is invalid; the message names it.
        """
        if not isinstance(worker_id, str) or not worker_id.strip():
            raise ConfigurationError("worker_id must be a non-empty string, e.g. the host name")
        for name, value in (("max_delay_ms", max_delay_ms), ("stop_timeout_ms", stop_timeout_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name} must be an int >= 0, got {value!r}")
        if not isinstance(balance, Balance):
            raise ConfigurationError(f"balance must be a Balance, got {balance!r}")
        if capacity is not None:
            WorkerState(member_id="", worker_id=worker_id, capacity=capacity)  # validates
        self.worker_id = worker_id
        self._start_task = start_task
        self._stop_task = stop_task
        self._on_task_error = on_task_error
        self._max_delay_ms = max_delay_ms
        self._stop_timeout_s = stop_timeout_ms / 1000
        self._capacity = capacity
        self._balance = balance
        if isinstance(tasks, TaskSource):
            self._source: TaskSource = tasks
        elif isinstance(tasks, Mapping):
            self._source = StaticTasks(tasks)
        elif callable(tasks):
            self._source = CallableTasks(tasks)
        else:
            raise ConfigurationError(
                f"tasks must be a mapping, a callable or a TaskSource, got {type(tasks).__name__}"
            )
        self._coordinator = _TasksCoordinator(self, group_id, **settings)
        coordinator = self._coordinator
        # A worker stops everything when its lease falls to margin + stop_timeout_ms: enough
        # time left to stop.
        self._lease = LeaseGuard(
            lambda: coordinator.membership_lease(),
            coordinator.config,
            lease_margin_ms,
            reserve=("stop_timeout_ms", stop_timeout_ms),
            why=": a worker must be able to stop its tasks before the group can give them away",
        )

        # _tasks_lock serializes every start and stop decision (membership thread, source
        # thread, watchdog, close); _lock guards the small state read by queries.
        self._tasks_lock = threading.RLock()
        self._lock = threading.Condition(threading.RLock())
        self._running: dict[str, TaskSpec] = {}
        self._waiting: set[str] = set()  # assigned, waiting for the task set to catch up
        self._stopping: set[str] = set()  # stop_task called, not returned; reported as ours
        self._late: set[str] = set()  # stop_task overran the stop timeout
        # The newest task-set version read whose change needs a rebalance (tasks added or
        # removed, a weight changed): the worker is not settled before an assignment of it.
        self._reassign_version = 0
        self._assignment: WorkerAssignment | None = None
        self._assigned_generation = -1
        self._view: GroupView | None = None
        self._counts = {k: 0 for k in TaskMetrics.__dataclass_fields__}
        self._closed = False
        self._started = False
        self._first_join = True
        self._rejoin_timer: threading.Timer | None = None

        # Leader memory (see LeaderMemory): kept only once the leader's own on_join_complete
        # receives the assignment it computed for that generation.
        self._memory = LeaderMemory()
        self._memory_generation = -1
        self._last_completed_generation = -1
        self._proposal: _Proposal | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def group_id(self) -> str:
        """The workers' group."""
        return self._coordinator.group_id

    @property
    def coordinator(self) -> Coordinator:
        """The underlying group member (for ``metrics()``, ``generation()``, ``state``)."""
        return self._coordinator

    def start(self) -> None:
        """Start reading the task set and join the group in the background (idempotent).

        Raises:
            CoordinatorStateError: the distribution was closed.
        """
        with self._lock:
            if self._closed:
                raise CoordinatorStateError(f"task distribution {self.group_id!r} is closed")
            if self._started:
                return
            self._started = True
        self._source.start(dict(self._coordinator.config.connection), self._on_tasks_changed)
        self._start_watchdog()
        self._coordinator.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop every task, leave the group and stop (idempotent).

        A dynamic member's departure rebalances the group at once; its tasks are held for
        ``max_delay_ms`` like those of a crashed worker, then given to the others.

        Raises:
            CoordinatorStateError: called from a task callback on the membership thread.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        self._lease.close()
        self._cancel_rejoin_timer()
        deadline = time.monotonic() + timeout
        # Stop every task while this worker still has its place in the group (it still
        # heartbeats, and rejoins if the group rebalances), and wait up to half the timeout
        # for stops that overran: until a stop returns, the task is reported as this
        # worker's, so the group gives it to nobody else. Leaving comes after.
        self._stop_all("the worker is closing")
        late = self._wait_for_stops(deadline - timeout / 2)
        if late:
            # Leaving now would give these tasks to other workers at once, while they still
            # run here: stay in the group's books until the session times out instead.
            log.warning(
                "worker %s: stop_task still runs for %s; closing without leaving the group, "
                "which gives them to other workers only after session_timeout_ms",
                self.worker_id,
                sorted(late),
            )
        # on_leave_prepare stops whatever started meanwhile (nothing: closed workers start
        # nothing).
        self._coordinator.close(max(0.0, deadline - time.monotonic()), leave_group=not late)
        self._stop_all("the worker is closing")
        self._source.close()
        self._lease.join(1)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ queries

    def running(self) -> frozenset[str]:
        """The tasks this worker runs now (started and not stopped)."""
        with self._lock:
            return frozenset(self._running)

    def owns(self, task_id: str) -> bool:
        """True if this worker runs ``task_id`` and may go on working on it.

        Checks the membership lease against the clock at the time of the call, so a
        process that resumes from a pause longer than its lease gets False at once (and
        the watchdog stops the task right after). Call it before each unit of work.
        """
        with self._lock:
            if task_id not in self._running:
                return False
        if self._lease.holds():
            return True
        self._lease.wake()
        return False

    def describe(self) -> GroupView | None:
        """Who runs what after the last completed rebalance; None before the first one.

        Complete (``complete=True``) on the leader only; every other worker sees its own
        tasks (see :class:`GroupView`).
        """
        with self._lock:
            return self._view

    def metrics(self) -> TaskMetrics:
        """Counters of this worker."""
        with self._lock:
            return TaskMetrics(**self._counts)

    def wait_stable(self, timeout: float | None = None) -> GroupView:
        """Start if needed; block until this worker is settled; return :meth:`describe`.

        Settled: the member is stable in a generation, its last assignment was applied
        (status OK), it has nothing left to hand over, nothing waits to start or to stop,
        that assignment covers every change to the task set this worker has read that needs
        a rebalance (a task added or removed, a weight changed; a new config alone needs
        none), and, on the leader, no task is moving between workers. A change this worker
        has not read yet is not waited for. Held tasks (``delay_ms`` > 0) do not count as
        unsettled: they wait for their worker by design.

        Raises:
            CoordinationTimeoutError: not settled within ``timeout`` seconds.
            CoordinatorStateError: the distribution was closed.
            FatalBrokerError: the member stopped on an error a person must fix.
        """
        self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._closed:
                    raise CoordinatorStateError(f"task distribution {self.group_id!r} is closed")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                self._coordinator.ensure_active_group(timeout=remaining)
            except CoordinationTimeoutError:
                raise CoordinationTimeoutError(
                    f"task distribution {self.group_id!r}: worker {self.worker_id!r} not "
                    f"stable after {timeout}s"
                ) from None
            with self._lock:
                view = self._view
                if self._settled_locked() and view is not None:
                    return view
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise CoordinationTimeoutError(
                        f"task distribution {self.group_id!r}: worker {self.worker_id!r} not "
                        f"settled after {timeout}s (waiting: {sorted(self._waiting)}, "
                        f"stopping: {sorted(self._stopping)})"
                    )
                self._lock.wait(0.05 if remaining is None else min(remaining, 0.05))

    def _settled_locked(self) -> bool:
        a = self._assignment
        gen = self._coordinator.generation_if_stable()
        return (
            a is not None
            and gen is not None
            and gen.generation_id == self._assigned_generation
            and a.status is AssignmentStatus.OK
            and a.config_version >= self._reassign_version
            and not a.revoked
            and not self._waiting
            and not self._stopping
            and self._view is not None
            and not self._view.moving
        )

    # ------------------------------------------------------------------ the task set

    def update_tasks(
        self, tasks: Mapping[str, float | TaskSpec], version: int | None = None
    ) -> None:
        """Replace the task set of a distribution built from a mapping.

        Call it on every worker: the leader assigns from its own copy, and a worker starts
        only the tasks its own copy has. The leader rejoins once to reassign; a worker stops
        at once the tasks it runs that were removed, and restarts those whose config changed.

        Args:
            tasks: task id -> weight or :class:`TaskSpec`.
            version: see :class:`StaticTasks`; None keeps the version.

        Raises:
            ConfigurationError: a task is invalid, or the distribution was not built from a
                mapping.
        """
        if not isinstance(self._source, StaticTasks):
            raise ConfigurationError(
                "update_tasks needs a distribution built from a mapping; this one reads "
                f"{type(self._source).__name__}"
            )
        self._source.update(tasks, version)

    def refresh_tasks(self) -> None:
        """Re-read a task set that came from a callable (or any source) and act on changes.

        The leader rejoins to reassign; every worker reconciles what it runs.
        """
        version, tasks = self._source.snapshot()
        with self._lock:
            known = dict(self._running)
        self._on_tasks_changed(version, known, tasks)

    def _on_tasks_changed(self, version: int, old: TaskSet, new: TaskSet) -> None:
        """A new task set: reconcile what runs here; the leader rejoins if the set changed."""
        reassign = set(old) != set(new) or any(
            old[t].weight != new[t].weight for t in old.keys() & new.keys()
        )
        with self._tasks_lock:
            if reassign:
                with self._lock:
                    # Not settled until an assignment of this version (or newer) arrives.
                    self._reassign_version = max(self._reassign_version, version)
            gone = [t for t in self._running if t not in new]
            if gone:
                # Stopping is always safe; the leader's next round revokes them formally.
                self._stop_tasks(gone, f"removed from the task set (version {version})")
            changed = [t for t, spec in self._running.items() if new[t].config != spec.config]
            with self._lock:
                for t, spec in list(self._running.items()):
                    if t not in changed and new[t] != spec:
                        self._running[t] = new[t]  # a new weight alone: nothing to do here
            if changed:
                log.info("worker %s: restarting %s: their config changed", self.worker_id, changed)
                # Still assigned here: each moves back to waiting as its stop returns (in
                # the same step, so that it is reported as ours throughout), started below.
                self._stop_tasks(changed, "its config changed", restart=True)
            self._start_waiting()
        if reassign and self._coordinator.is_leader:
            # One rejoin, by the leader: the others learn the set by reading it, not by
            # rebalancing, and report their version when the leader's rejoin reaches them.
            self._coordinator.request_rejoin(f"the task set changed (version {version})")

    # ------------------------------------------------------------------ Coordinator side

    def _worker_state(self) -> WorkerState:
        if self._first_join:
            # Join with the full task set, not with what was read so far.
            if not self._source.wait_ready(self._coordinator.config.rebalance_timeout_ms / 2000):
                log.warning("worker %s: joining before the task set was fully read", self.worker_id)
            self._first_join = False
        version, _ = self._source.snapshot()
        with self._lock:
            owned = frozenset(self._running) | self._waiting | self._stopping
        return WorkerState(
            member_id="",
            worker_id=self.worker_id,
            owned=owned,
            capacity=self._capacity,
            config_version=version,
        )

    def _perform_assignment(
        self, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        workers = [decode_worker_metadata(m.member_id, m.metadata) for m in members]
        newest = max(w.config_version for w in workers)
        budget = min(_CATCH_UP_S, self._coordinator.config.rebalance_timeout_ms / 4000)
        if not self._source.wait_for_version(newest, budget):
            log.warning("leader %s: task set still behind version %d", self.worker_id, newest)
        version, tasks = self._source.snapshot()
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
            now_ms=int(time.monotonic() * 1000),
            max_delay_ms=self._max_delay_ms,
            config_version=version,
            balance=self._balance,
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
        log.info(
            "leader %s: generation %d: %s; revoked %d; held %s; delay %d ms",
            self.worker_id,
            generation,
            summary,
            sum(len(a.revoked) for a in result.assignments.values()),
            {w: len(ts) for w, ts in result.held.items()},
            result.delay_ms,
        )
        return plan

    def _join_complete(self, generation: int, assignment: bytes) -> None:
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
            log.error("worker %s: cannot read the assignment: %s", self.worker_id, e)
            return
        self._cancel_rejoin_timer()
        with self._lock:
            self._counts["rounds"] += 1
        if a.status is AssignmentStatus.CONFIG_MISMATCH:
            log.warning(
                "worker %s: generation %d: task set versions differ; nothing changes",
                self.worker_id,
                generation,
            )
            if self._coordinator.is_leader:
                self._schedule_rejoin(
                    _MISMATCH_RETRY_S, "the leader is catching up with the task set"
                )
            self._set_assignment(generation, a, None)
            return
        with self._tasks_lock:
            if a.status is AssignmentStatus.DUPLICATE_WORKER_ID:
                log.error(
                    "worker %s: another member of group %r uses this worker id; this one runs "
                    "nothing. Give every worker a unique worker_id",
                    self.worker_id,
                    self.group_id,
                )
                with self._lock:
                    self._waiting.clear()  # never started: nothing to stop
                self._stop_tasks(list(self._running), "duplicate worker id")
                self._set_assignment(generation, a, None)
                self._schedule_rejoin(_DUPLICATE_RETRY_S, "retrying with a duplicate worker id")
                return
            assigned = set(a.assigned)
            # Revoked first, and anything else not assigned (a task stopped and restarted
            # elsewhere must not also run here); then start what is new.
            drop = [t for t in self._running if t not in assigned]
            with self._lock:
                self._waiting &= assigned
            if drop:
                self._stop_tasks(drop, f"revoked in generation {generation}")
            with self._lock:
                # Not a task whose stop still runs: it starts once that returned. Nothing
                # new once closing: the worker is about to leave.
                if not self._closed:
                    self._waiting |= assigned - set(self._running) - self._stopping
            self._set_assignment(
                generation, a, proposal.view if leader_round and proposal else None
            )
            self._start_waiting()
        if a.revoked:
            self._coordinator.request_rejoin(
                f"worker {self.worker_id} stopped {len(a.revoked)} revoked task(s) to hand over"
            )
        elif a.delay_ms > 0:
            self._schedule_rejoin(a.delay_ms / 1000, "the scheduled rebalance delay elapsed")

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
        with self._lock:
            self._assignment = a
            self._assigned_generation = generation
            self._view = view
            self._lock.notify_all()
        self._lease.wake()  # tasks may wait to start: the watchdog guards them from now on

    def _membership_lost(self) -> None:
        with self._tasks_lock:
            with self._lock:
                if self._running:
                    self._counts["memberships_lost"] += 1
                self._assignment = None
            self._stop_all("this worker lost its place in the group")

    # ------------------------------------------------------------------ starting, stopping

    def _start_waiting(self) -> None:
        """Start the assigned tasks whose definition this worker has (caller holds the lock)."""
        a = self._assignment
        if not self._waiting or a is None or a.status is not AssignmentStatus.OK:
            return
        version, tasks = self._source.snapshot()
        if version < a.config_version:
            log.info(
                "worker %s: waiting for task set version %d (at %d) to start %d task(s)",
                self.worker_id,
                a.config_version,
                version,
                len(self._waiting),
            )
            return
        if not self._lease.holds():
            return  # the watchdog stops everything; the next assignment says what to run
        self._start_tasks(sorted(t for t in self._waiting if t in tasks), tasks)

    def _start_tasks(self, task_ids: Sequence[str], tasks: TaskSet) -> None:
        for task in task_ids:
            spec = tasks[task]
            with self._lock:
                if task in self._stopping or self._closed:
                    # Its previous stop_task still runs (it overran): started again only
                    # once that returns. Closing: nothing starts any more.
                    continue
            # The task stays in _waiting (reported as this worker's) while start_task runs,
            # and moves to _running in one step under _lock: a JoinGroup computed meanwhile
            # (on the membership thread, which does not wait for _tasks_lock) sees it.
            try:
                self._start_task(task, spec)
            except Exception as e:
                with self._lock:
                    self._waiting.discard(task)
                    self._counts["start_failures"] += 1
                # Not running, so not reported as owned: the leader offers it to this worker
                # again in the next round (it remembers the owner), or to another one.
                self._report(TaskStartError(task, f"start_task({task!r}) raised {e!r}"), e)
                continue
            with self._lock:
                self._waiting.discard(task)
                self._running[task] = spec
                self._counts["started"] += 1
                self._lock.notify_all()
            self._lease.wake()

    def _stop_all(self, reason: str) -> None:
        with self._tasks_lock:
            with self._lock:
                self._waiting.clear()
                running = list(self._running)
            self._stop_tasks(running, reason)

    def _stop_tasks(
        self, task_ids: Sequence[str], reason: str, *, restart: bool = False
    ) -> set[str]:
        """Stop tasks in parallel, each within the stop timeout. Returns those that stopped.

        Each task moves from ``running`` to ``stopping`` in one step and stays there until
        its ``stop_task`` returns, however long that takes and whatever the reason for the
        stop (revocation, removal, lost membership, the lease watchdog, close): meanwhile
        every JoinGroup reports it as this worker's, so the leader gives it to nobody else,
        and this worker does not start it again. If ``restart``, a task whose stop returns
        in time moves from ``stopping`` to ``waiting`` in one step, for the caller to start.
        """
        if not task_ids:
            return set()
        log.info("worker %s: stopping %d task(s) (%s)", self.worker_id, len(task_ids), reason)
        with self._lock:
            for t in task_ids:
                self._running.pop(t, None)
                self._stopping.add(t)
            self._lock.notify_all()
        done: dict[str, threading.Event] = {}
        for task in task_ids:
            done[task] = threading.Event()
            threading.Thread(
                target=self._stop_one,
                args=(task, done[task], restart),
                name=f"tasks-stop|{task}",
                daemon=True,
            ).start()
        deadline = time.monotonic() + self._stop_timeout_s
        stopped: set[str] = set()
        for task in task_ids:
            if done[task].wait(max(0.0, deadline - time.monotonic())):
                stopped.add(task)
                continue
            with self._lock:
                if done[task].is_set():  # returned just now
                    stopped.add(task)
                    continue
                self._counts["stop_timeouts"] += 1
                self._late.add(task)
            self._report(
                TaskStopTimeoutError(
                    task,
                    f"stop_task({task!r}) did not return within {self._stop_timeout_s:g}s "
                    f"({reason}); this worker keeps reporting the task as its own, and does "
                    "not start it again, until it returns (if the group removed this worker "
                    "meanwhile, it may give the task to another one)",
                ),
                None,
            )
        return stopped

    def _stop_one(self, task: str, done: threading.Event, restart: bool) -> None:
        try:
            self._stop_task(task)
            failure: Exception | None = None
        except Exception as e:
            failure = e
        with self._lock:
            late = task in self._late
            self._late.discard(task)
            self._stopping.discard(task)
            if restart and not late:
                # The caller (holding _tasks_lock, waiting for this stop) starts it again.
                self._waiting.add(task)
            self._counts["stopped" if failure is None else "stop_failures"] += 1
            done.set()
            self._lock.notify_all()
        if failure is not None:
            self._report(TaskStopError(task, f"stop_task({task!r}) raised {failure!r}"), failure)
        if late and not self._closed:
            # It was still reported as this worker's; now it can be handed over (or, if it
            # is still assigned here, started again).
            self._coordinator.request_rejoin(f"task {task} finally stopped")

    def _wait_for_stops(self, deadline: float) -> frozenset[str]:
        """Block until no ``stop_task`` runs, or until ``deadline``; return those still running."""
        with self._lock:
            while self._stopping:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(min(remaining, 0.05))
            return frozenset(self._stopping)

    def _report(self, error: TaskError, cause: BaseException | None) -> None:
        if cause is not None:
            error.__cause__ = cause
        log.error("worker %s: %s", self.worker_id, error, exc_info=cause)
        if self._on_task_error is not None:
            try:
                self._on_task_error(error.task_id, error)
            except Exception:
                log.exception("worker %s: on_task_error raised", self.worker_id)

    # ------------------------------------------------------------------ lease watchdog

    def _start_watchdog(self) -> None:
        """Stop every task when the membership lease runs low, even if nothing else happens."""
        self._lease.start_watchdog(
            engine_clock(self._coordinator),
            self._check_lease,
            active=self._has_tasks,
            poll_s=_WATCHDOG_S,
            idle_poll_s=_WATCHDOG_IDLE_S,
            name=f"tasks-lease|{self.group_id}",
        )

    def _has_tasks(self) -> bool:
        """Whether the watchdog has anything to guard: tasks running or about to start."""
        with self._lock:
            return bool(self._running or self._waiting)

    def _check_lease(self) -> bool:
        """The watchdog found the lease low: stop every task. True if the lease is low."""
        if self._lease.holds():
            return False
        with self._tasks_lock:
            # Checked again under the tasks lock: an assignment may just have renewed it.
            if not self._lease.holds() and (self._running or self._waiting):
                with self._lock:
                    self._counts["lease_expiries"] += 1
                    self._assignment = None
                log.warning(
                    "worker %s: membership lease ran out (no heartbeat confirmed in "
                    "time); stopping every task before the group can give them away",
                    self.worker_id,
                )
                self._stop_all("the membership lease ran out")
                if self._coordinator.state is not MemberState.CLOSED and not self._closed:
                    self._coordinator.request_rejoin("the membership lease ran out")
        return True

    # ------------------------------------------------------------------ rejoin timer

    def _schedule_rejoin(self, delay_s: float, reason: str) -> None:
        self._cancel_rejoin_timer()

        def fire() -> None:
            if not self._closed:
                self._coordinator.request_rejoin(reason)

        timer = threading.Timer(delay_s, fire)
        timer.daemon = True
        with self._lock:
            self._rejoin_timer = timer
        timer.start()

    def _cancel_rejoin_timer(self) -> None:
        with self._lock:
            timer, self._rejoin_timer = self._rejoin_timer, None
        if timer is not None:
            timer.cancel()

    def __repr__(self) -> str:
        return (
            f"<TaskDistribution group={self.group_id!r} worker={self.worker_id!r} "
            f"running={len(self.running())}>"
        )


@dataclass(frozen=True, slots=True)
class _Proposal:
    """What the leader computed for a generation, kept until its own assignment arrives."""

    generation: int
    own_assignment: bytes
    memory: LeaderMemory
    view: GroupView


class _TasksCoordinator(Coordinator):
    """The group member behind a :class:`TaskDistribution`."""

    def __init__(self, distribution: TaskDistribution, group_id: str, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self._distribution = distribution

    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [
            ProtocolMetadata(
                PROTOCOL_NAME, encode_worker_metadata(self._distribution._worker_state())
            )
        ]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        return self._distribution._perform_assignment(
            self.generation().generation_id, leader_id, members
        )

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        # Cooperative: a rebalance alone stops nothing. Only a lost generation does: the
        # group may already have given this worker's tasks to others.
        if generation == -1:
            self._distribution._membership_lost()

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self._distribution._join_complete(generation, assignment)

    def on_leave_prepare(self) -> None:
        self._distribution._stop_all("the worker is leaving the group")
