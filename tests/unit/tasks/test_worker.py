"""One TaskDistribution worker, round by round, against a scripted broker.

Each round is led by another member: the test scripts the assignment this worker gets and
reads back the metadata it joined with (what it told the leader it owns). Start and stop
callbacks can block, so that the test decides what happens while they run; nothing waits
on timing except ``stop_timeout_ms`` (0.1 s) running out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from coordination._engine.membership import GroupMembership
from coordination.testing import ManualClock, ScriptedTransport
from coordination.testing import messages as m
from recipes.tasks import (
    StaticTasks,
    TaskDistribution,
    TaskError,
    TaskSpec,
    TaskStopTimeoutError,
)
from recipes.tasks._assignor import AssignmentStatus, WorkerAssignment, WorkerState
from recipes.tasks._wire import decode_worker_metadata, encode_assignment

NODE = m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)
STOP_TIMEOUT_MS = 100
# With session_timeout_ms=10000 and the default margin (heartbeat_interval_ms, 3000), the
# watchdog stops everything once fewer than 3.1 s of the 10 s lease remain.
LEASE_RUNS_LOW_S = 7.0


def plan(*assigned: str, revoked: tuple[str, ...] = (), version: int = 0) -> WorkerAssignment:
    return WorkerAssignment(
        assigned=tuple(sorted(assigned)),
        revoked=revoked,
        leader_id="m-leader",
        leader_worker_id="leader",
        config_version=version,
    )


class Worker:
    """A worker named "w" in rounds led by "m-leader"; records its callbacks in ``calls``."""

    def __init__(self, tasks: Any, **kw: Any) -> None:
        self.transport = ScriptedTransport()
        self.clock = ManualClock()
        self.calls: list[tuple[str, str]] = []
        self.errors: list[TaskError] = []
        self.joined_with: list[WorkerState] = []
        self.blocked: dict[str, threading.Event] = {}  # stop_task(t) waits for it
        self.on_start: Any = None
        self.d = TaskDistribution(
            "g",
            worker_id="w",
            start_task=self._start,
            stop_task=self._stop,
            on_task_error=lambda task, error: self.errors.append(error),
            tasks=tasks,
            transport=self.transport,
            bootstrap_servers="x:1",
            session_timeout_ms=10_000,
            stop_timeout_ms=STOP_TIMEOUT_MS,
            **kw,
        )
        coordinator = self.d._coordinator
        self.engine = GroupMembership(coordinator, coordinator.config, self.transport, self.clock)
        coordinator._engine = self.engine
        self.engine.resolve_protocol_type()
        self.d._source.start({}, self.d._on_tasks_changed)  # what start() does, minus threads
        self.transport.prepare(NODE)
        self.generation = 0

    def _start(self, task: str, spec: TaskSpec) -> None:
        self.calls.append(("start", task))
        if self.on_start is not None:
            self.on_start(task)

    def _stop(self, task: str) -> None:
        self.calls.append(("stop", task))
        if task in self.blocked:
            assert self.blocked[task].wait(10)
        self.calls.append(("stopped", task))

    def block_stop(self, task: str) -> threading.Event:
        """Make ``stop_task(task)`` overrun until the returned event is set."""
        self.blocked[task] = threading.Event()
        return self.blocked[task]

    def rounds(self, *plans: WorkerAssignment) -> None:
        """Rebalance once per plan; plans after the first need a rejoin (e.g. revocations)."""
        for p in plans:
            self.generation += 1
            self.transport.prepare(
                self._join_answer(self.generation), response_type=m.JoinGroupResponse
            )
            self.transport.prepare(
                m.SyncGroupResponse(
                    error_code=0,
                    protocol_type="tasks",
                    protocol_name="tasks-v0",
                    assignment=encode_assignment(p),
                )
            )
        self.engine.request_rejoin("the test's next round")
        assert self.engine.join_group_if_needed(deadline=None)
        assert self.transport.pending() == 0

    def _join_answer(self, generation: int) -> Callable[[m.Request], m.Response]:
        def join(request: m.Request) -> m.Response:
            assert isinstance(request, m.JoinGroupRequest)
            ((_, metadata),) = request.protocols
            self.joined_with.append(decode_worker_metadata("m-w", metadata))
            return m.JoinGroupResponse(
                error_code=0,
                generation_id=generation,
                protocol_type="tasks",
                protocol_name="tasks-v0",
                leader="m-leader",
                member_id="m-w",
            )

        return join

    def settled(self) -> bool:
        with self.d._lock:
            return self.d._settled_locked()

    def wait_for_stops(self) -> None:
        assert self.d._wait_for_stops(time.monotonic() + 5) == frozenset()


# ------------------------------------------------------------------ stops that overrun


@pytest.mark.parametrize("path", ["revoked", "membership lost", "lease ran out"])
def test_a_task_whose_stop_overran_stays_this_workers_until_the_stop_returns(path: str) -> None:
    w = Worker({"t": 1.0})
    w.rounds(plan("t"))
    assert w.d.running() == {"t"}
    release = w.block_stop("t")

    if path == "revoked":
        # Stops t, rejoins at once; the leader sees t still reported and gives it back.
        w.rounds(plan(revoked=("t",)), plan("t"))
    elif path == "membership lost":
        w.d._coordinator.on_join_prepare(-1, "m-w")
        w.rounds(plan("t"))
    else:
        w.clock.advance(LEASE_RUNS_LOW_S)
        assert w.d._check_lease()
        w.rounds(plan("t"))

    assert [type(e) for e in w.errors] == [TaskStopTimeoutError]
    # The rejoin after the stop began told the leader that this worker still owns t ...
    assert "t" in w.joined_with[-1].owned
    # ... and, assigned t again, the worker did not start it while its stop still runs.
    assert w.calls == [("start", "t"), ("stop", "t")]
    assert w.d.running() == frozenset()

    release.set()
    w.wait_for_stops()
    assert w.d._worker_state().owned == frozenset()
    w.rounds(plan("t"))  # the rejoin the late stop asked for
    assert w.calls == [("start", "t"), ("stop", "t"), ("stopped", "t"), ("start", "t")]
    assert w.d.running() == {"t"}


def test_close_leaves_the_group_only_once_an_overrunning_stop_returned() -> None:
    w = Worker({"t": 1.0})
    w.rounds(plan("t"))
    release = w.block_stop("t")
    stopping_at_leave: list[bool] = []

    def leave(request: m.Request) -> m.Response:
        stopping_at_leave.append(not release.is_set())
        return m.LeaveGroupResponse(error_code=0)

    w.transport.prepare(leave, response_type=m.LeaveGroupResponse)
    closing = threading.Thread(target=w.d.close, args=(30.0,))
    closing.start()
    deadline = time.monotonic() + 5
    while not w.errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [type(e) for e in w.errors] == [TaskStopTimeoutError]
    assert w.d._worker_state().owned == {"t"}  # what a rejoin meanwhile would report
    release.set()
    closing.join(5)
    assert not closing.is_alive()
    assert stopping_at_leave == [False]


def test_close_does_not_wait_for_an_overrunning_stop_beyond_half_its_timeout() -> None:
    w = Worker({"t": 1.0})
    w.rounds(plan("t"))
    release = w.block_stop("t")
    w.transport.prepare(m.LeaveGroupResponse(error_code=0))
    began = time.monotonic()
    w.d.close(1.0)
    try:
        assert time.monotonic() - began < 1.0
        # The task may still run here: no LeaveGroup, so the group gives it to another
        # worker only after this one's session has timed out.
        assert w.transport.requests(m.LeaveGroupRequest) == []
    finally:
        release.set()


# ------------------------------------------------------------------ what a JoinGroup reports


def test_a_task_is_reported_as_this_workers_while_start_task_runs() -> None:
    w = Worker({"t": 1.0})
    entered, release = threading.Event(), threading.Event()

    def slow_start(task: str) -> None:
        entered.set()
        assert release.wait(5)

    w.on_start = slow_start
    membership = threading.Thread(target=w.rounds, args=(plan("t"),))
    membership.start()
    try:
        assert entered.wait(5)
        # A JoinGroup computed now (the membership thread does not wait for the start).
        during = w.d._worker_state().owned
    finally:
        release.set()
        membership.join(5)
    assert during == {"t"}
    assert w.d._worker_state().owned == {"t"}


def test_a_task_restarted_for_its_new_config_is_reported_throughout(monkeypatch) -> None:
    source = StaticTasks({"t": TaskSpec(1.0, {"n": 1})})
    w = Worker(source)
    w.rounds(plan("t"))
    reported: list[frozenset[str]] = []
    stop_tasks = w.d._stop_tasks

    def stop_then_look(*args: Any, **kw: Any) -> set[str]:
        stopped = stop_tasks(*args, **kw)
        reported.append(w.d._worker_state().owned)  # between the stop and the start
        return stopped

    monkeypatch.setattr(w.d, "_stop_tasks", stop_then_look)
    w.on_start = lambda task: reported.append(w.d._worker_state().owned)
    source.update({"t": TaskSpec(1.0, {"n": 2})})
    assert w.calls[1:] == [("stop", "t"), ("stopped", "t"), ("start", "t")]
    assert reported == [{"t"}, {"t"}]
    assert w.d.running() == {"t"}


# ------------------------------------------------------------------ settled


def test_a_worker_is_not_settled_until_it_is_assigned_the_task_set_change_it_read() -> None:
    source = StaticTasks({"a": 1.0, "b": 1.0}, version=6)
    w = Worker(source)
    w.rounds(plan("a", "b", version=6))
    assert w.settled()

    # A new config alone restarts the task here, without a rebalance: still settled.
    source.update({"a": TaskSpec(1.0, "new"), "b": 1.0}, version=7)
    assert w.settled()

    # A removal is stopped at once, but the leader's round for it has not come yet: the
    # last assignment (and describe()) still lists b.
    source.update({"a": TaskSpec(1.0, "new")}, version=8)
    assert w.d.running() == {"a"}
    assert not w.settled()

    w.rounds(plan("a", version=8))
    assert w.settled()
    view = w.d.describe()
    assert view is not None and view.config_version == 8 and view.workers == {"w": ("a",)}


# ------------------------------------------------------------------ duplicate worker id


def test_a_duplicate_worker_stops_what_runs_and_never_stops_what_did_not_start() -> None:
    w = Worker(StaticTasks({"a": 1.0}, version=4))
    w.rounds(plan("a", version=4))
    w.rounds(plan("a", "b", version=5))  # b waits for version 5
    assert w.d.running() == {"a"} and w.d._worker_state().owned == {"a", "b"}
    w.rounds(replace(plan(), status=AssignmentStatus.DUPLICATE_WORKER_ID))
    w.d._cancel_rejoin_timer()
    assert w.calls == [("start", "a"), ("stop", "a"), ("stopped", "a")]
    assert not w.errors
    assert w.d._worker_state().owned == frozenset()


# ------------------------------------------------------------------ lease watchdog


def test_the_lease_watchdog_stops_every_task_once_when_the_lease_runs_low() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    # The watchdog waits on the engine's manual clock, which each of its waits moves on.
    floor_s = w.d._lease.floor_s
    low_at = w.clock.now + w.engine.membership_lease() - floor_s
    stopped_at: list[float] = []
    stop = w.d._stop_task

    def timed_stop(task: str) -> None:
        stopped_at.append(w.clock.now)
        stop(task)

    w.d._stop_task = timed_stop
    w.d._start_watchdog()
    try:
        deadline = time.monotonic() + 5
        while len(stopped_at) < 2 or w.d.metrics().stopped < 2:
            assert time.monotonic() < deadline, "the watchdog stopped nothing"
            time.sleep(0.01)
    finally:
        w.d._lease.close()
        w.d._lease.join(5)
    assert w.d.running() == frozenset()
    assert w.d.metrics().lease_expiries == 1
    assert sorted(w.calls[2:]) == [("stop", "a"), ("stop", "b"), ("stopped", "a"), ("stopped", "b")]
    # Not before the lease fell to margin + stop timeout, and within one look (50 ms) of it.
    assert all(low_at - 1e-6 <= t <= low_at + 0.05 + 1e-6 for t in stopped_at), (low_at, stopped_at)
