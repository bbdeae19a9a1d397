"""One TaskDistribution worker, round by round, against a scripted broker: what it reports.

Each round is led by another member: the test scripts the assignment this worker gets and
reads back the metadata it joined with (what it told the leader it owns). See ``_worker.py``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from coordination.testing import messages as m
from recipes.tasks import StaticTasks, TaskSpec, TaskStopTimeoutError
from recipes.tasks._assignor import AssignmentStatus

from ._worker import LEASE_RUNS_LOW_S, Ticking, Worker, plan

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
        w.d.coordinator.on_join_prepare(-1, "m-w")
        w.rounds(plan("t"))
    else:
        w.clock.advance(LEASE_RUNS_LOW_S)
        assert w.d._runner.check_lease()
        w.rounds(plan("t"))

    assert [type(e) for e in w.errors] == [TaskStopTimeoutError]
    # The rejoin after the stop began told the leader that this worker still owns t ...
    assert "t" in w.joined_with[-1].owned
    # ... and, assigned t again, the worker did not start it while its stop still runs.
    assert w.calls == [("start", "t"), ("stop", "t")]
    assert w.d.running() == frozenset()

    release.set()
    w.wait_for_stops()
    assert w.owned() == frozenset()
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
    assert w.owned() == {"t"}  # what a rejoin meanwhile would report
    release.set()
    closing.join(5)
    assert not closing.is_alive()
    assert stopping_at_leave == [False]


def test_close_does_not_wait_for_an_overrunning_stop_beyond_half_its_timeout() -> None:
    w = Worker({"t": 1.0})
    w.rounds(plan("t"))
    release = w.block_stop("t")
    w.transport.prepare(m.LeaveGroupResponse(error_code=0))
    began = w.clock.now
    with Ticking(w.clock):
        w.d.close(1.0)
    try:
        assert w.clock.now - began < 1.0
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
        during = w.owned()
    finally:
        release.set()
        membership.join(5)
    assert during == {"t"}
    assert w.owned() == {"t"}


def test_a_task_restarted_for_its_new_config_is_reported_throughout(monkeypatch) -> None:
    source = StaticTasks({"t": TaskSpec(1.0, {"n": 1})})
    w = Worker(source)
    w.rounds(plan("t"))
    reported: list[frozenset[str]] = []
    stop_tasks = w.d._runner.stop_tasks

    def stop_then_look(*args: Any, **kw: Any) -> set[str]:
        stopped = stop_tasks(*args, **kw)
        reported.append(w.owned())  # between the stop and the start
        return stopped

    monkeypatch.setattr(w.d._runner, "stop_tasks", stop_then_look)
    w.on_start = lambda task: reported.append(w.owned())
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
    assert w.d.running() == {"a"} and w.owned() == {"a", "b"}
    w.rounds(replace(plan(), status=AssignmentStatus.DUPLICATE_WORKER_ID))
    w.d._group.cancel_rejoin()
    assert w.calls == [("start", "a"), ("stop", "a"), ("stopped", "a")]
    assert not w.errors
    assert w.owned() == frozenset()


# ------------------------------------------------------------------ lease watchdog


def test_the_lease_watchdog_stops_every_task_once_when_the_lease_runs_low() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    # The watchdog waits on the engine's manual clock, which each of its waits moves on.
    floor_s = w.d._runner.lease.floor_s
    low_at = w.clock.now + w.engine.membership_lease() - floor_s
    stopped_at: list[float] = []
    w.on_stop = lambda task: stopped_at.append(w.clock.now)
    w.d._starting()  # the source again, and the watchdog
    try:
        deadline = time.monotonic() + 5
        while len(stopped_at) < 2 or w.d.metrics().stopped < 2:
            assert time.monotonic() < deadline, "the watchdog stopped nothing"
            time.sleep(0.01)
    finally:
        w.d._runner.lease.close()
        w.d._runner.lease.join(5)
    assert w.d.running() == frozenset()
    assert w.d.metrics().lease_expiries == 1
    assert sorted(w.calls[2:]) == [("stop", "a"), ("stop", "b"), ("stopped", "a"), ("stopped", "b")]
    # Not before the lease fell to margin + stop timeout, and within one look (50 ms) of it.
    assert all(low_at - 1e-6 <= t <= low_at + 0.05 + 1e-6 for t in stopped_at), (low_at, stopped_at)
