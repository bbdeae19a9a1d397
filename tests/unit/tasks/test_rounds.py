"""TaskDistribution's state machine, round by round, on a scripted broker and a manual clock.

What each assignment makes a worker start and stop, the cooperative hand-over of a revoked
task, stop timeouts, start failures, lost membership, the lease, and the worker's own
rounds as leader. See ``_worker.py`` for how the rounds are scripted.
"""

from __future__ import annotations

import threading

import pytest

from coordination._protocol.error_codes import ErrorCode as E
from coordination.errors import CoordinationTimeoutError, CoordinatorStateError
from coordination.testing import messages as m
from recipes.tasks import (
    StaticTasks,
    TaskSpec,
    TaskStartError,
    TaskStopError,
    TaskStopTimeoutError,
)
from recipes.tasks._assignor import WorkerState

from ._worker import LEASE_LOW_AFTER_S, Worker, plan

UNKNOWN_MEMBER_ID = 25


# ------------------------------------------------------------------ assignments


def test_a_worker_starts_what_it_is_assigned_and_stops_what_it_no_longer_is() -> None:
    w = Worker({"a": 1.0, "b": 1.0, "c": 1.0})
    w.rounds(plan("a", "b"))
    assert w.calls == [("start", "a"), ("start", "b")]
    assert w.d.running() == {"a", "b"} and w.d.owns("a")

    w.rounds(plan("b", "c"))
    # What is no longer assigned stops before anything new starts; b runs on untouched.
    assert w.calls[2:] == [("stop", "a"), ("stopped", "a"), ("start", "c")]
    assert w.d.running() == {"b", "c"} and not w.d.owns("a")
    metrics = w.d.metrics()
    assert (metrics.rounds, metrics.started, metrics.stopped) == (2, 3, 1)


def test_a_rebalance_alone_stops_nothing() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    w.rounds(plan("a", "b"))
    w.rounds(plan("a", "b"))
    assert w.calls == [("start", "a"), ("start", "b")]
    # Every JoinGroup reported what ran, so that the leader keeps it here.
    assert [s.owned for s in w.joined_with] == [frozenset(), {"a", "b"}, {"a", "b"}]


def test_a_revoked_task_is_stopped_before_the_worker_reports_it_released() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    # Round 2 revokes a (the leader moves it); the worker stops it and rejoins at once, and
    # round 3 is the one that hands a to its new owner.
    w.rounds(plan("b", revoked=("a",)), plan("b"))
    assert w.joined_with[-1].owned == {"b"}  # a released in round 3's JoinGroup ...
    assert ("stopped", "a") in w.calls_at_join[-1]  # ... only once its stop_task returned
    reasons = w.d.coordinator.metrics().rejoin_reasons
    assert "worker w stopped 1 revoked task(s) to hand over" in reasons
    assert w.calls == [("start", "a"), ("start", "b"), ("stop", "a"), ("stopped", "a")]


def test_a_revoked_task_is_reported_as_this_workers_while_its_stop_runs() -> None:
    w = Worker({"a": 1.0})
    w.rounds(plan("a"))
    reported: list[frozenset[str]] = []
    w.on_stop = lambda task: reported.append(w.owned())
    w.rounds(plan(revoked=("a",)), plan())
    assert reported == [{"a"}]
    assert w.owned() == frozenset()


def test_an_assigned_task_waits_for_the_task_set_that_defines_it() -> None:
    source = StaticTasks({"a": 1.0}, version=1)
    w = Worker(source)
    w.rounds(plan("a", "b", version=2))  # the leader has read version 2 already
    # Nothing starts from a task set older than the assignment's; both are this worker's
    # all the same, so nobody else starts them.
    assert w.d.running() == frozenset()
    assert w.owned() == {"a", "b"}
    assert not w.settled()

    source.update({"a": 1.0, "b": TaskSpec(1.0, {"n": 1})}, version=2)
    assert w.calls == [("start", "a"), ("start", "b")]
    assert w.d.running() == {"a", "b"} and w.settled()


# ------------------------------------------------------------------ failures


def test_a_task_whose_start_fails_is_reported_not_owned_and_offered_again() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    failures = iter([RuntimeError("no disk")])

    def fail_once(task: str) -> None:
        if task == "a":
            raise next(failures, None) or AssertionError("a started twice")

    w.on_start = fail_once
    w.rounds(plan("a", "b"))
    assert w.d.running() == {"b"}
    (error,) = w.errors
    assert isinstance(error, TaskStartError) and error.task_id == "a"
    assert isinstance(error.__cause__, RuntimeError)
    assert w.d.metrics().start_failures == 1

    w.on_start = None
    w.rounds(plan("a", "b"))
    assert w.joined_with[-1].owned == {"b"}  # a was not reported as running here
    assert w.d.running() == {"a", "b"}


def test_a_stop_that_raises_counts_as_stopped() -> None:
    w = Worker({"a": 1.0})
    w.rounds(plan("a"))

    def fail(task: str) -> None:
        raise RuntimeError("stuck")

    w.on_stop = fail
    w.rounds(plan())
    w.wait_until(lambda: bool(w.errors), "the stop's error")  # reported by the stop's thread
    (error,) = w.errors
    assert isinstance(error, TaskStopError) and not isinstance(error, TaskStopTimeoutError)
    assert w.owned() == frozenset() and w.d.metrics().stop_failures == 1


def test_a_stop_that_overruns_is_reported_and_the_worker_rejoins_when_it_returns() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    release = w.block_stop("a")
    w.rounds(plan())  # both unassigned; b stops in time, a overruns 0.1 s
    (error,) = w.errors
    assert isinstance(error, TaskStopTimeoutError) and error.task_id == "a"
    assert "did not return within 0.1s" in str(error)
    assert w.d.metrics().stop_timeouts == 1
    assert w.owned() == {"a"}

    release.set()
    w.wait_for_stops()
    assert w.owned() == frozenset()
    assert w.d.coordinator.metrics().rejoin_reasons[-1] == "task a finally stopped"


# ------------------------------------------------------------------ membership and lease


def test_a_worker_that_loses_its_membership_stops_every_task_before_it_joins_again() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    w.clock.advance(3.0)
    w.transport.prepare(m.HeartbeatResponse(error_code=UNKNOWN_MEMBER_ID))
    w.engine.heartbeat_once()
    w.rounds(plan("a"))
    # Everything stopped before the JoinGroup: the group may have given it away already.
    assert sorted(w.calls_at_join[-1][2:]) == [
        ("stop", "a"),
        ("stop", "b"),
        ("stopped", "a"),
        ("stopped", "b"),
    ]
    assert w.joined_with[-1].owned == frozenset()
    assert w.calls[-1] == ("start", "a")
    assert w.d.metrics().memberships_lost == 1


def test_owns_is_false_once_the_lease_runs_low_and_the_watchdog_action_stops_everything() -> None:
    w = Worker({"a": 1.0})
    w.rounds(plan("a"))
    w.clock.advance(LEASE_LOW_AFTER_S - 0.01)
    assert w.d.owns("a") and not w.d._runner.check_lease()
    w.clock.advance(0.02)
    assert not w.d.owns("a")  # read from the clock now, before the watchdog acted
    assert w.d._runner.check_lease()  # what the watchdog does when it looks next
    assert w.d.running() == frozenset() and w.d.metrics().lease_expiries == 1
    assert not w.settled()  # the assignment is forgotten until the next one
    assert w.d.coordinator.metrics().rejoin_reasons[-1] == "the membership lease ran out"


def test_a_confirmed_heartbeat_keeps_the_tasks_running() -> None:
    w = Worker({"a": 1.0})
    w.rounds(plan("a"))
    w.clock.advance(3.0)
    w.transport.prepare(m.HeartbeatResponse(error_code=0))
    w.engine.heartbeat_once()
    w.clock.advance(LEASE_LOW_AFTER_S - 0.01)
    assert w.d.owns("a") and not w.d._runner.check_lease()


def test_tasks_waiting_on_a_low_lease_start_once_it_holds_again_without_a_rejoin() -> None:
    # A follower rejoining a stable group unchanged gets its generation back at once, which
    # renews no lease: forgetting tasks that only wait and rejoining again would bring the
    # same assignment straight back, a rejoin storm (found by the simulation: hundreds of
    # JoinGroups a second) until a heartbeat renewed the lease.
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    w.clock.advance(LEASE_LOW_AFTER_S + 0.1)
    assert w.d._runner.check_lease()  # stops both, forgets the assignment, rejoins
    assert w.d.coordinator.metrics().rejoin_reasons[-1] == "the membership lease ran out"
    # The rejoin: the same generation, the same assignment; the lease is still low (the
    # heartbeat that could prove it before SyncGroup is refused).
    w.generation -= 1
    w.transport.prepare(m.HeartbeatResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
    w.rounds(plan("a", "b"))
    assert w.d.running() == frozenset() and w.owned() == {"a", "b"}  # waiting, reported
    rejoins = w.d.coordinator.metrics().rejoin_reasons

    assert w.d._runner.check_lease()  # the watchdog's next look: the lease is still low
    assert w.d.coordinator.metrics().rejoin_reasons == rejoins  # no new rejoin
    assert w.d.metrics().lease_expiries == 1
    assert w.owned() == {"a", "b"}  # the assignment is kept

    w.transport.prepare(m.HeartbeatResponse(error_code=0))
    w.engine.heartbeat_once()  # renews the lease
    w.d._group.lease_held()  # what the watchdog calls when it sees the lease hold again
    assert w.d.running() == {"a", "b"}
    assert w.calls[-2:] == [("start", "a"), ("start", "b")]


# ------------------------------------------------------------------ the leader's rounds


def test_the_leader_assigns_every_task_and_describes_the_whole_group() -> None:
    w = Worker({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    other = WorkerState(member_id="m-x", worker_id="x")
    w.lead(other)
    view = w.d.describe()
    assert view is not None and view.complete and view.leader_worker_id == "w"
    assert sorted(view.workers) == ["w", "x"]
    assert sorted(t for ts in view.workers.values() for t in ts) == ["a", "b", "c", "d"]
    assert w.d.running() == set(view.workers["w"]) and len(w.d.running()) == 2
    assert w.d.wait_stable(timeout=0) == view

    # x leaves: its tasks are held for it (max_delay_ms), nothing else moves.
    w.lead()
    view = w.d.describe()
    assert view is not None and view.held == {"x": tuple(sorted(set("abcd") - w.d.running()))}
    assert view.delay_ms > 0
    w.d._group.cancel_rejoin()


def test_a_scheduled_rebalance_delay_makes_the_worker_rejoin_when_it_elapses() -> None:
    w = Worker({"a": 1.0})
    # The delay runs in real time, so it may elapse before this round's join returns (a
    # loaded machine): then the join loops into the next round at once. That round is
    # answered too, and without a delay; either way the rejoin happens once, for the delay.
    w.rounds(plan("a", delay_ms=20), plan("a"), rejoin_may_follow=True)
    w.wait_until(
        lambda: "the scheduled rebalance delay elapsed" in w.d.coordinator.metrics().rejoin_reasons,
        "the delayed rejoin",
    )


def test_wait_stable_times_out_naming_what_keeps_the_worker_unsettled() -> None:
    w = Worker({"a": 1.0}, max_delay_ms=0)
    with pytest.raises(CoordinationTimeoutError, match="worker 'w' to settle"):
        w.d.wait_stable(timeout=0)
    w.rounds(plan("a", "b"))  # b is not in this worker's task set
    with pytest.raises(CoordinationTimeoutError, match=r"waiting: \['b'\]"):
        w.d.wait_stable(timeout=0)


# ------------------------------------------------------------------ closing


def test_close_stops_every_task_then_leaves_and_nothing_starts_after() -> None:
    w = Worker({"a": 1.0, "b": 1.0})
    w.rounds(plan("a", "b"))
    calls_at_leave: list[list[tuple[str, str]]] = []

    def leave(request: m.Request) -> m.Response:
        calls_at_leave.append(list(w.calls))
        return m.LeaveGroupResponse(error_code=0)

    w.transport.prepare(leave, response_type=m.LeaveGroupResponse)
    w.d.close()
    (at_leave,) = calls_at_leave
    assert sorted(at_leave[2:]) == [
        ("stop", "a"),
        ("stop", "b"),
        ("stopped", "a"),
        ("stopped", "b"),
    ]
    assert w.d.running() == frozenset()
    w.d.close()  # idempotent
    with pytest.raises(CoordinatorStateError, match="task distribution of group 'g' is closed"):
        w.d.start()
    with pytest.raises(CoordinatorStateError):
        w.d.wait_stable(timeout=1)
    assert repr(w.d) == "<TaskDistribution group='g' worker='w' running=0>"


def test_stop_task_runs_on_threads_of_the_clock() -> None:
    w = Worker({"a": 1.0})
    made: list[str] = []
    make_thread = w.clock.thread

    def thread(target, name):
        made.append(name)
        return make_thread(target, name)

    w.clock.thread = thread  # type: ignore[method-assign]
    w.rounds(plan("a"))
    stopped_on: list[str] = []
    w.on_stop = lambda task: stopped_on.append(threading.current_thread().name)
    w.rounds(plan())
    assert made == ["tasks-stop|a"] and stopped_on == ["tasks-stop|a"]
