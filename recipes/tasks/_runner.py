"""The task runner: starts this worker's tasks, stops them within the stop timeout, and
stops every one of them when the membership lease runs low.

It decides nothing about which tasks are this worker's (that is the group side's,
``_task_group.py``); it keeps what it has started, what waits to start and what is stopping,
which is exactly what the worker reports as its own in every JoinGroup.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Final

from coordination import MemberState
from coordination.clock import Event
from coordination.hooks import TaskOverran, TaskStarted, TaskStopped
from coordination.lease import LeaseGuard

from .._recipe import RecipeContext
from ._assignor import Balance
from ._errors import TaskError, TaskStartError, TaskStopError, TaskStopTimeoutError
from ._sources import TaskSet, TaskSpec

# How often a wait for stops looks at the clock again.
_STOPS_POLL_S: Final = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """A worker's own settings, as :class:`TaskDistribution` validated them."""

    worker_id: str
    stop_timeout_s: float
    capacity: float | None
    max_delay_ms: int
    balance: Balance


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


class TaskRunner:
    """Starts and stops one worker's tasks; every thread and wait of it is on the clock.

    State (guarded by the recipe's lock; its condition is notified at every change):
        ``running``: started and not stopped, with the spec each was started with.
        ``waiting``: assigned here, not started yet (the task set has not caught up, or
        ``start_task`` runs right now).
        ``stopping``: ``stop_task`` called and not returned, however long it takes.
    A task is in at most one of them, and moves between them in one step under the lock:
    :meth:`owned` (their union, what a JoinGroup reports) never misses a task in between.

    Locking:
        :attr:`decisions` (reentrant) serializes every decision to start or stop tasks,
        whichever thread makes it (the membership thread, the task source's, the lease
        watchdog, close); queries only take the recipe's lock, which nothing holds while a
        user's ``start_task`` or ``stop_task`` runs.
    """

    def __init__(
        self,
        ctx: RecipeContext,
        lease: LeaseGuard,
        settings: WorkerSettings,
        *,
        start_task: Callable[[str, TaskSpec], None],
        stop_task: Callable[[str], None],
        on_task_error: Callable[[str, TaskError], None] | None,
        on_lease_lost: Callable[[], None],
    ) -> None:
        """
        Args:
            on_lease_lost: called (holding :attr:`decisions` and the recipe's lock) when the
                lease watchdog stops every task, to forget the assignment.
        """
        self.ctx = ctx
        self.lease = lease
        self.settings = settings
        self.decisions = ctx.clock.rlock()
        self.start_task = start_task
        self.stop_task = stop_task
        self.on_task_error = on_task_error
        self._on_lease_lost = on_lease_lost
        self.running: dict[str, TaskSpec] = {}
        self.waiting: set[str] = set()
        self.stopping: set[str] = set()
        self._late: set[str] = set()  # stop_task overran the stop timeout
        self._counts = {f.name: 0 for f in fields(TaskMetrics)}

    # ------------------------------------------------------------------ queries

    def owned(self) -> frozenset[str]:
        """Every task this worker must report as its own: running, waiting or stopping."""
        with self.ctx.lock:
            return frozenset(self.running) | self.waiting | self.stopping

    def has_tasks(self) -> bool:
        """Whether the lease watchdog has anything to guard: tasks running or about to start."""
        with self.ctx.lock:
            return bool(self.running or self.waiting)

    def count(self, counter: str) -> None:
        """Add one to ``counter`` (a field of :class:`TaskMetrics`)."""
        with self.ctx.lock:
            self._counts[counter] += 1

    def metrics(self) -> TaskMetrics:
        with self.ctx.lock:
            return TaskMetrics(**self._counts)

    # ------------------------------------------------------------------ starting

    def start_tasks(self, task_ids: Sequence[str], tasks: TaskSet) -> None:
        """Start ``task_ids`` (waiting ones), one after the other; the caller holds
        :attr:`decisions`."""
        ctx = self.ctx
        for task in task_ids:
            spec = tasks[task]
            with ctx.lock:
                if task in self.stopping or ctx.closed:
                    # Its previous stop_task still runs (it overran): started again only
                    # once that returns. Closing: nothing starts any more.
                    continue
            # The task stays in waiting (reported as this worker's) while start_task runs,
            # and moves to running in one step under the lock: a JoinGroup computed meanwhile
            # (on the membership thread, which does not wait for decisions) sees it.
            try:
                self.start_task(task, spec)
            except Exception as e:
                with ctx.lock:
                    self.waiting.discard(task)
                    self._counts["start_failures"] += 1
                # Not running, so not reported as owned: the leader offers it to this worker
                # again in the next round (it remembers the owner), or to another one.
                self.report(TaskStartError(task, f"start_task({task!r}) raised {e!r}"), e)
                continue
            with ctx.lock:
                self.waiting.discard(task)
                self.running[task] = spec
                self._counts["started"] += 1
                ctx.changed.notify_all()
            self.lease.wake()
            if ctx.hooks:
                ctx.hooks.task_started(
                    TaskStarted(group_id=ctx.group_id, member_id=ctx.member_id, task=task),
                )

    # ------------------------------------------------------------------ stopping

    def stop_all(self, reason: str) -> None:
        """Forget what waits to start and stop everything that runs."""
        with self.decisions:
            with self.ctx.lock:
                self.waiting.clear()
                running = list(self.running)
            self.stop_tasks(running, reason)

    def stop_tasks(
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
        ctx = self.ctx
        ctx.log.info(
            "worker %s: stopping %d task(s) (%s)", self.settings.worker_id, len(task_ids), reason
        )
        with ctx.lock:
            for t in task_ids:
                self.running.pop(t, None)
                self.stopping.add(t)
            ctx.changed.notify_all()
        done: dict[str, Event] = {}
        for task in task_ids:
            done[task] = ctx.clock.event()
            ctx.clock.thread(
                functools.partial(self._stop_one, task, done[task], restart),
                f"tasks-stop|{task}",
            ).start()
        deadline = ctx.clock.monotonic() + self.settings.stop_timeout_s
        stopped: set[str] = set()
        for task in task_ids:
            if done[task].wait(max(0.0, deadline - ctx.clock.monotonic())):
                stopped.add(task)
                continue
            with ctx.lock:
                if done[task].is_set():  # returned just now
                    stopped.add(task)
                    continue
                self._counts["stop_timeouts"] += 1
                self._late.add(task)
            if ctx.hooks:
                ctx.hooks.task_overran(
                    TaskOverran(
                        group_id=ctx.group_id,
                        member_id=ctx.member_id,
                        task=task,
                        timeout_s=self.settings.stop_timeout_s,
                    ),
                )
            self.report(
                TaskStopTimeoutError(
                    task,
                    f"stop_task({task!r}) did not return within {self.settings.stop_timeout_s:g}s "
                    f"({reason}); this worker keeps reporting the task as its own, and does "
                    "not start it again, until it returns (if the group removed this worker "
                    "meanwhile, it may give the task to another one)",
                ),
                None,
            )
        return stopped

    def _stop_one(self, task: str, done: Event, restart: bool) -> None:
        ctx = self.ctx
        began = ctx.clock.monotonic()
        try:
            self.stop_task(task)
            failure: Exception | None = None
        except Exception as e:
            failure = e
        with ctx.lock:
            late = task in self._late
            self._late.discard(task)
            self.stopping.discard(task)
            if restart and not late:
                # The caller (holding decisions, waiting for this stop) starts it again.
                self.waiting.add(task)
            self._counts["stopped" if failure is None else "stop_failures"] += 1
            done.set()
            ctx.changed.notify_all()
        took = ctx.clock.monotonic() - began
        ctx.hooks.task_stopped(
            lambda: TaskStopped(
                group_id=ctx.group_id,
                member_id=ctx.member_id,
                task=task,
                duration_s=took,
                error=None if failure is None else repr(failure),
            ),
        )
        if failure is not None:
            self.report(TaskStopError(task, f"stop_task({task!r}) raised {failure!r}"), failure)
        if late:
            # It was still reported as this worker's; now it can be handed over (or, if it
            # is still assigned here, started again).
            ctx.rejoin(f"task {task} finally stopped")

    def wait_for_stops(self, deadline: float) -> frozenset[str]:
        """Block until no ``stop_task`` runs, or until ``deadline`` (on the clock); return
        the tasks whose stop still runs."""
        ctx = self.ctx
        with ctx.lock:
            while self.stopping:
                remaining = deadline - ctx.clock.monotonic()
                if remaining <= 0:
                    break
                ctx.changed.wait(min(remaining, _STOPS_POLL_S))
            return frozenset(self.stopping)

    def report(self, error: TaskError, cause: BaseException | None) -> None:
        """Log ``error`` and pass it to ``on_task_error``."""
        if cause is not None:
            error.__cause__ = cause
        self.ctx.log.error("worker %s: %s", self.settings.worker_id, error, exc_info=cause)
        self.ctx.callback("on_task_error", self.on_task_error, error.task_id, error)

    # ------------------------------------------------------------------ lease watchdog

    def check_lease(self) -> bool:
        """The lease watchdog's action: stop every task if the lease is low. True if it is.

        Tasks that only wait to start are left waiting (they start when the lease holds
        again, see :meth:`TaskGroup.lease_held`): forgetting them and rejoining would bring
        the same assignment straight back (a follower rejoining a stable group gets its
        generation again at once, which renews nothing), a rejoin storm until a heartbeat
        renewed the lease.
        """
        if self.lease.holds():
            return False
        ctx = self.ctx
        with self.decisions:
            # Checked again holding decisions: an assignment may just have renewed it.
            with ctx.lock:
                running = bool(self.running)
            if running and not self.lease.holds():
                with ctx.lock:
                    self._counts["lease_expiries"] += 1
                    self._on_lease_lost()
                ctx.log.warning(
                    "worker %s: membership lease ran out (no heartbeat confirmed in "
                    "time); stopping every task before the group can give them away",
                    self.settings.worker_id,
                )
                self.stop_all("the membership lease ran out")
                if ctx.member.state is not MemberState.CLOSED:
                    ctx.rejoin("the membership lease ran out")
        return True
