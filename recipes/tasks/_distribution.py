"""The task distribution recipe: named tasks spread over a group of workers, Connect style.

:class:`TaskDistribution` is the public face; the group side (what a worker reports, what
the leader assigns, acting on assignments) is ``_task_group.py``, and running the tasks
(threads, stop timeouts, the lease watchdog's action) is ``_runner.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

from coordination.clock import Clock
from coordination.errors import ConfigurationError
from coordination.parts import check_int
from coordination.transport import Transport

from .._recipe import Recipe
from ._assignor import Balance, WorkerState
from ._errors import TaskError
from ._runner import TaskMetrics, TaskRunner, WorkerSettings
from ._sources import CallableTasks, StaticTasks, TaskSource, TaskSpec
from ._task_group import GroupView, TaskGroup

log = logging.getLogger("recipes.tasks")

PROTOCOL_TYPE: Final = "tasks"
PROTOCOL_NAME: Final = "tasks-v0"
_PROTOCOL: Final = (PROTOCOL_TYPE, PROTOCOL_NAME)

# How often the lease watchdog looks at the clock while tasks run; short, so that a process
# resumed after a pause stops its tasks within this long even if nothing else wakes it.
_WATCHDOG_S: Final = 0.05
# How often it looks whether tasks run, while none do (starting one also wakes it).
_WATCHDOG_IDLE_S: Final = 0.5


class TaskDistribution(Recipe):
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

    Time and I/O:
        Every wait, lock, event, timer and thread of the distribution (the helper threads
        that run ``stop_task`` included) comes from its member's clock (``clock=``), and
        every group request goes through its transport (``transport=``), so tests can run
        a worker on a manual or simulated clock and a scripted broker
        (``coordination.testing``). A :class:`TaskSource` is given the clock too
        (:meth:`TaskSource.use_clock`); :class:`TopicTasks` still reads its topic with a
        kafka-python consumer of its own.
    """

    _KIND: ClassVar[str] = "task distribution"
    _DEFAULTS: ClassVar[Mapping[str, Any]] = {
        # A crashed worker's tasks run elsewhere within about session + one heartbeat (11 s)
        # plus the hand-over, where Kafka's consumer defaults (45 s / 3 s) would take 48 s;
        # Kafka Connect uses 10 s / 3 s / 60 s. docs/tasks.md#failover-time has the table.
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
        # Connect's: running tasks get this long to stop when they move.
        "rebalance_timeout_ms": 60_000,
    }
    _LOG: ClassVar[logging.Logger] = log
    # wait_stable looks again this often (settling involves the member's state, which does
    # not notify the distribution).
    _WAIT_POLL_S: ClassVar[float] = 0.05
    # The group side; a variant of the protocol (the benchmark's eager one) replaces it.
    _GROUP: ClassVar[type[TaskGroup]] = TaskGroup

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
        transport: Transport | None = None,
        clock: Clock | None = None,
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
            transport: where the member's requests go, as for :class:`coordination.Coordinator`;
                default: Kafka. Tests pass a ``coordination.testing.ScriptedTransport``.
            clock: where every time read, wait, lock, event, timer and thread of the worker,
                its task source and its member come from, as for
                :class:`coordination.Coordinator`; default: the system's. Tests pass a
                ``coordination.testing.ManualClock``.
            **settings: the group's settings (``bootstrap_servers``, ``session_timeout_ms``,
                TLS, SASL, ...), as for :class:`coordination.Coordinator`.

        Raises:
            ConfigurationError: an argument or setting is invalid; the message names it.
        """
        if not isinstance(worker_id, str) or not worker_id.strip():
            raise ConfigurationError("worker_id must be a non-empty string, e.g. the host name")
        for name, value in (("max_delay_ms", max_delay_ms), ("stop_timeout_ms", stop_timeout_ms)):
            check_int(name, value, minimum=0)
        if not isinstance(balance, Balance):
            raise ConfigurationError(f"balance must be a Balance, got {balance!r}")
        if capacity is not None:
            WorkerState(member_id="", worker_id=worker_id, capacity=capacity)  # validates
        if isinstance(tasks, TaskSource):
            source: TaskSource = tasks
        elif isinstance(tasks, Mapping):
            source = StaticTasks(tasks)
        elif callable(tasks):
            source = CallableTasks(tasks)
        else:
            raise ConfigurationError(
                f"tasks must be a mapping, a callable or a TaskSource, got {type(tasks).__name__}"
            )
        super().__init__(group_id, _PROTOCOL, transport=transport, clock=clock, settings=settings)
        # A worker stops everything when its lease falls to margin + stop_timeout_ms: enough
        # time left to stop.
        lease = self._guard_lease(
            lease_margin_ms,
            reserve=("stop_timeout_ms", stop_timeout_ms),
            why=": a worker must be able to stop its tasks before the group can give them away",
        )
        self.worker_id = worker_id
        source.use_clock(self._ctx.clock)
        self._source = source
        settings_ = WorkerSettings(
            worker_id=worker_id,
            stop_timeout_s=stop_timeout_ms / 1000,
            capacity=capacity,
            max_delay_ms=max_delay_ms,
            balance=balance,
        )
        self._runner = TaskRunner(
            self._ctx,
            lease,
            settings_,
            start_task=start_task,
            stop_task=stop_task,
            on_task_error=on_task_error,
            on_lease_lost=lambda: self._group.forget_assignment(),
        )
        self._group = self._GROUP(self._ctx, self._runner, source, settings_)
        self._member.listen(self._group)

    # ------------------------------------------------------------------ lifecycle

    def close(self, timeout: float = 30.0) -> None:
        """Stop every task, leave the group and stop (idempotent).

        A dynamic member's departure rebalances the group at once; its tasks are held for
        ``max_delay_ms`` like those of a crashed worker, then given to the others.

        Args:
            timeout: seconds for the whole close.

        Raises:
            CoordinatorStateError: called from a task callback on the membership thread.
        """
        super().close(timeout)

    def _starting(self) -> None:
        self._source.start(dict(self._member.config.connection), self._group.tasks_changed)
        # Stop every task when the membership lease runs low, even if nothing else happens.
        self._watch_lease(
            self._runner.check_lease,
            on_held=self._group.lease_held,
            active=self._runner.has_tasks,
            poll_s=_WATCHDOG_S,
            idle_poll_s=_WATCHDOG_IDLE_S,
            name="tasks-lease",
        )

    def _before_leave(self, deadline: float, timeout: float) -> bool:
        self._group.cancel_rejoin()
        # Stop every task while this worker still has its place in the group (it still
        # heartbeats, and rejoins if the group rebalances), and wait up to half the timeout
        # for stops that overran: until a stop returns, the task is reported as this
        # worker's, so the group gives it to nobody else. Leaving comes after.
        self._runner.stop_all("the worker is closing")
        late = self._runner.wait_for_stops(deadline - timeout / 2)
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
        return not late

    def _after_close(self) -> None:
        self._runner.stop_all("the worker is closing")
        self._source.close()

    def _describe(self) -> str:
        return f"worker={self.worker_id!r} running={len(self.running())}"

    # ------------------------------------------------------------------ queries

    def running(self) -> frozenset[str]:
        """The tasks this worker runs now (started and not stopped)."""
        with self._ctx.lock:
            return frozenset(self._runner.running)

    def owns(self, task_id: str) -> bool:
        """True if this worker runs ``task_id`` and may go on working on it.

        Checks the membership lease against the clock at the time of the call, so a
        process that resumes from a pause longer than its lease gets False at once (and
        the watchdog stops the task right after). Call it before each unit of work.

        Args:
            task_id: the task.
        """
        with self._ctx.lock:
            if task_id not in self._runner.running:
                return False
        lease = self._runner.lease
        if lease.holds():
            return True
        lease.wake()
        return False

    def describe(self) -> GroupView | None:
        """Who runs what after the last completed rebalance; None before the first one.

        Complete (``complete=True``) on the leader only; every other worker sees its own
        tasks (see :class:`GroupView`).
        """
        return self._group.view()

    def metrics(self) -> TaskMetrics:
        """Counters of this worker."""
        return self._runner.metrics()

    def wait_stable(self, timeout: float | None = None) -> GroupView:
        """Start if needed; block until this worker is settled; return :meth:`describe`.

        Settled: the member is stable in a generation, its last assignment was applied
        (status OK), it has nothing left to hand over, nothing waits to start or to stop,
        that assignment covers every change to the task set this worker has read that needs
        a rebalance (a task added or removed, a weight changed; a new config alone needs
        none), and, on the leader, no task is moving between workers. A change this worker
        has not read yet is not waited for. Held tasks (``delay_ms`` > 0) do not count as
        unsettled: they wait for their worker by design.

        Args:
            timeout: seconds to wait; None waits forever.

        Returns:
            The view of the assignment this worker settled on.

        Raises:
            CoordinationTimeoutError: not settled within ``timeout`` seconds.
            CoordinatorStateError: the distribution was closed.
            FatalBrokerError: the member stopped on an error a person must fix.
        """
        self.start()
        return self._wait(self._group.settled_view, timeout, self._group.unsettled)

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
        self._group.refresh()
