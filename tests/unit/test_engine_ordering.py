"""The engine's ordering promises under races between its threads and ``close()``.

Each test forces one interleaving with events (never with timing alone): a heartbeat
that resets the generation while ``on_join_prepare`` runs, ``close()`` while a callback
runs, a join that completes while ``on_leave_prepare`` runs, and a static member that may
have replaced an earlier process with the same instance id.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from coordination import Generation, MemberState
from coordination._engine.classify import Reset
from coordination._protocol.error_codes import ErrorCode as E
from coordination.testing import messages as m

from .test_engine import NODE, Harness, joined

SYNCED = m.SyncGroupResponse(
    error_code=0, protocol_type="test", protocol_name="v2", assignment=b"a"
)


def stable_leader(**settings: object) -> Harness:
    h = Harness(**settings)
    h.join_as_leader()
    return h


# ---------------------------------------------------------------- generation reset vs prepare


def test_a_generation_reset_during_on_join_prepare_is_reported_before_joining() -> None:
    """The member must learn in on_join_prepare(-1) that its generation is gone before it
    joins again; otherwise it claims what it owned with a stale generation."""
    h = stable_leader()
    h.engine.request_rejoin("test")
    engine = h.engine
    real_prepare = h.member.on_join_prepare

    def prepare_then_heartbeat_fails(generation: int, member_id: str) -> None:
        real_prepare(generation, member_id)
        if generation == 1:
            # The heartbeat thread answers ILLEGAL_GENERATION while the callback runs.
            sent = engine.generation
            engine._on_heartbeat_response(E.ILLEGAL_GENERATION, sent, engine.coordinator)  # type: ignore[arg-type]

    h.member.on_join_prepare = prepare_then_heartbeat_fails  # type: ignore[method-assign]
    h.prepare(joined("m-1", 2, leader="m-1"), SYNCED)
    assert engine.join_group_if_needed(deadline=None)

    prepares = [c for c in h.member.calls if c[0] == "prepare"]
    assert prepares[-2:] == [("prepare", 1, "m-1"), ("prepare", -1, "m-1")]
    # The JoinGroup went out only after on_join_prepare(-1), with the reset generation.
    rejoin = h.transport.requests(m.JoinGroupRequest)[-1]
    assert rejoin.member_id == "m-1"
    assert h.member.calls[-1][:2] == ("complete", 2)


def test_a_reset_right_after_on_join_prepare_is_also_reported() -> None:
    h = stable_leader()
    h.engine.request_rejoin("test")
    engine = h.engine
    original = engine._rebalance_once
    resets: list[bool] = []

    def reset_first(prepared: Generation) -> object:
        if not resets:
            # Between on_join_prepare and the JoinGroup, a fenced commit resets the generation.
            resets.append(True)
            engine.react_to_fenced_request(engine.generation, Reset.GENERATION, "OffsetCommit", 22)
        return original(prepared)

    engine._rebalance_once = reset_first  # type: ignore[method-assign,assignment]
    h.prepare(joined("m-1", 2, leader="m-1"), SYNCED)
    assert engine.join_group_if_needed(deadline=None)
    prepares = [c for c in h.member.calls if c[0] == "prepare"]
    assert prepares[-2:] == [("prepare", 1, "m-1"), ("prepare", -1, "m-1")]
    assert len(h.transport.requests(m.JoinGroupRequest)) == 3  # the first two-step join + one


class _ReportingLock:
    """A reentrant lock that says when a thread other than its holder waits for it."""

    def __init__(self, waiting: threading.Event) -> None:
        self._lock = threading.RLock()
        self._waiting = waiting
        self.holder: threading.Thread | None = None

    def __enter__(self) -> bool:
        if threading.current_thread() is not self.holder:
            self._waiting.set()
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)


def test_a_generation_reset_while_the_join_waits_for_the_callback_lock_is_not_handed_over() -> None:
    """The heartbeat thread resets the generation while the assignment waits for the callback
    lock (another thread's callback runs): the assignment is stale and must not be handed
    over; the member joins again."""
    h = stable_leader()
    engine = h.engine
    engine.request_rejoin("test")
    synced, go, waiting, release = (threading.Event() for _ in range(4))
    lock = _ReportingLock(waiting)
    engine._callback_lock = lock  # type: ignore[assignment]
    original = engine._complete_join

    def complete_once_the_lock_is_taken(joined: object) -> bool:
        synced.set()
        assert go.wait(10)
        return original(joined)  # type: ignore[arg-type]

    def hold() -> None:
        with lock:
            go.set()
            assert release.wait(10)

    engine._complete_join = complete_once_the_lock_is_taken  # type: ignore[method-assign]
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        SYNCED,
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-3"),
        joined("m-3", 3, leader="m-3"),
        SYNCED,
    )
    done: list[bool] = []
    joiner = threading.Thread(
        target=lambda: done.append(engine.join_group_if_needed(deadline=None)), daemon=True
    )
    joiner.start()
    assert synced.wait(10)
    holder = threading.Thread(target=hold, daemon=True)
    lock.holder = holder
    waiting.clear()
    holder.start()
    assert waiting.wait(10)  # the membership thread waits for the callback lock
    sent = engine.generation
    assert sent.generation_id == 2
    engine._on_heartbeat_response(E.UNKNOWN_MEMBER_ID, sent, engine.coordinator)  # type: ignore[arg-type]
    release.set()
    holder.join(10)
    joiner.join(10)

    assert done == [True]
    completes = [c[:3] for c in h.member.calls if c[0] == "complete"]
    assert ("complete", 2, "m-1") not in completes
    assert completes[-1] == ("complete", 3, "m-3")
    assert ("prepare", -1, "") in h.member.calls  # told that its assignment is gone


# ---------------------------------------------------------------- close vs running callbacks


def _join_on_a_membership_thread(h: Harness) -> threading.Thread:
    """Script a first join as the leader of a group of one (and a leave), and run it on the
    engine's real membership loop, in its own thread."""
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-1"),
        joined("m-1", 1, leader="m-1"),
        SYNCED,
    )
    h.prepare(m.LeaveGroupResponse(error_code=0))
    thread = threading.Thread(target=h.engine._run_membership, daemon=True)
    h.engine._threads = [thread]
    thread.start()
    return thread


def test_close_does_not_leave_while_a_callback_runs_and_prepares_the_leave_after_it() -> None:
    h = Harness()
    in_callback, release = threading.Event(), threading.Event()

    def slow_complete(generation: int, member_id: str, protocol: str, assignment: bytes) -> None:
        h.member.calls.append(("complete", generation))
        in_callback.set()
        release.wait(10)
        h.member.calls.append(("complete returned", generation))

    h.member.on_join_complete = slow_complete  # type: ignore[method-assign]
    thread = _join_on_a_membership_thread(h)
    assert in_callback.wait(10)

    h.engine.close(timeout_s=0.4)  # gives up waiting for the callback

    # The member's work (the callback) may still run: no LeaveGroup, no on_leave_prepare yet.
    assert h.transport.requests(m.LeaveGroupRequest) == []
    assert ("leave",) not in h.member.calls
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    # on_leave_prepare ran on the membership thread, after the callback returned.
    assert h.member.calls[-2:] == [("complete returned", 1), ("leave",)]
    assert h.transport.requests(m.LeaveGroupRequest) == []


def test_a_join_completing_while_on_leave_prepare_runs_never_calls_on_join_complete() -> None:
    h = Harness()
    engine = h.engine
    synced, leaving, leave_release = threading.Event(), threading.Event(), threading.Event()
    original = engine._complete_join

    def complete_after_close_began(joined: object) -> bool:
        # The sync has answered and the assignment is about to be handed over when close()
        # begins and runs on_leave_prepare.
        synced.set()
        assert leaving.wait(10)
        return original(joined)  # type: ignore[arg-type]

    def slow_leave() -> None:
        h.member.calls.append(("leave",))
        leaving.set()
        leave_release.wait(10)

    engine._complete_join = complete_after_close_began  # type: ignore[method-assign]
    h.member.on_leave_prepare = slow_leave  # type: ignore[method-assign]
    thread = _join_on_a_membership_thread(h)
    assert synced.wait(10)

    closer = threading.Thread(target=engine.close, args=(10,), daemon=True)
    closer.start()
    assert leaving.wait(10)
    time.sleep(0.3)  # let the membership thread reach the callback lock (either way: same result)
    leave_release.set()
    closer.join(10)
    thread.join(10)

    assert not [c for c in h.member.calls if c[0] == "complete"]
    assert h.member.calls[-1] == ("leave",)
    assert engine.state is MemberState.CLOSED


# ---------------------------------------------------------------- static takeover


def test_a_static_member_with_a_new_member_id_waits_out_an_earlier_process_lease() -> None:
    """KIP-345 replaces a static member at once; the earlier process may act until its lease
    (min(session, rebalance timeout) past its last confirmed request) ends."""
    h = Harness(group_instance_id="w-1", session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    joined_at = h.clock.now
    h.prepare(NODE, joined("w-1-abc", 7, leader="w-1-abc"), SYNCED)
    assert h.engine.join_group_if_needed(deadline=None)

    (complete,) = [c for c in h.member.calls if c[0] == "complete"]
    assert complete[1] == 7
    # on_join_complete ran no earlier than a full lease after the join was answered.
    assert h.clock.now - joined_at >= 10.0


def test_a_static_member_keeping_its_member_id_does_not_wait_again() -> None:
    h = Harness(group_instance_id="w-1", session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    h.prepare(NODE, joined("w-1-abc", 7, leader="w-1-abc"), SYNCED)
    assert h.engine.join_group_if_needed(deadline=None)
    h.engine.request_rejoin("test")
    before = h.clock.now
    h.prepare(joined("w-1-abc", 8, leader="w-1-abc"), SYNCED)
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.member.calls[-1][:2] == ("complete", 8)
    assert h.clock.now - before < 1.0


def test_a_dynamic_member_does_not_wait() -> None:
    h = Harness(session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    before = h.clock.now
    h.join_as_leader()
    assert h.clock.now - before < 1.0
