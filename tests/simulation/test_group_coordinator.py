"""The classic group coordinator model, rule by rule, on a manual clock (no broker).

Each test drives ``GroupCoordinatorModel`` with requests and moves the clock by hand;
``tests/integration/test_model_vs_broker.py`` checks the same rules against real brokers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import pytest

from coordination._protocol import messages as m
from coordination._protocol.error_codes import ErrorCode as E
from coordination.testing.simulation._group_coordinator import (
    BrokerSettings,
    GroupCoordinatorModel,
    GroupLog,
    GroupRecord,
    GroupTombstone,
    OffsetTombstone,
)

GROUP = "g"


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimers:
    """Simulated seconds and a heap of callbacks; ``run_until`` runs the due ones in order."""

    def __init__(self) -> None:
        self._now = 0.0
        self._heap: list[tuple[float, int, _Handle, Callable[[], None]]] = []
        self._seq = 0

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, fn: Callable[[], None]) -> _Handle:
        handle = _Handle()
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self._now), self._seq, handle, fn))
        return handle

    def next_due(self) -> float | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def run_until(self, until: float) -> None:
        while (due := self.next_due()) is not None and due <= until:
            when, _, _, fn = heapq.heappop(self._heap)
            self._now = when
            fn()
        self._now = max(self._now, until)

    def advance(self, seconds: float) -> None:
        self.run_until(self._now + seconds)


class Answer:
    """The responses one request got (there must be exactly one)."""

    def __init__(self) -> None:
        self.responses: list[m.Response] = []

    def __call__(self, response: m.Response) -> None:
        self.responses.append(response)

    @property
    def done(self) -> bool:
        return bool(self.responses)

    def get(self) -> m.Response:
        assert len(self.responses) == 1, self.responses
        return self.responses[0]

    @property
    def joined(self) -> m.JoinGroupResponse:
        response = self.get()
        assert isinstance(response, m.JoinGroupResponse)
        return response


class Harness:
    def __init__(self, settings: BrokerSettings | None = None, *, log: GroupLog | None = None):
        self.timers = ManualTimers()
        self.log = log or GroupLog()
        self.settings = settings or BrokerSettings()
        self.model = GroupCoordinatorModel(1, self.log, self.timers, self.settings)
        self.model.load()

    def send(self, request: m.Request, model: GroupCoordinatorModel | None = None) -> Answer:
        answer = Answer()
        (model or self.model).handle(request, answer)
        self.timers.run_until(self.timers.now())  # timers due now (the 0 ms initial delay)
        return answer

    def together(self, *requests: m.Request) -> list[Answer]:
        """Requests that all arrive before the clock moves (within a 0 ms initial delay)."""
        answers = [Answer() for _ in requests]
        for request, answer in zip(requests, answers, strict=True):
            self.model.handle(request, answer)
        self.timers.advance(0)
        return answers

    def call(self, request: m.Request) -> m.Response:
        answer = self.send(request)
        assert answer.done, f"{request} parked"
        return answer.get()

    def join(self, member_id: str = "", **kw: Any) -> m.JoinGroupResponse:
        response = self.call(join(member_id, **kw))
        assert isinstance(response, m.JoinGroupResponse)
        return response

    def new_id(self, **kw: Any) -> str:
        response = self.join(**kw)
        assert response.error_code == E.MEMBER_ID_REQUIRED
        return response.member_id

    def state(self) -> str:
        return self.model.describe(GROUP).state

    def stable(self, count: int) -> tuple[list[str], int]:
        """``count`` dynamic members joined and synced in one generation; the leader first."""
        ids = [self.new_id() for _ in range(count)]
        answers = self.together(*(join(i) for i in ids))
        first = answers[0].get()
        assert isinstance(first, m.JoinGroupResponse) and first.error_code == E.NONE
        leader, generation = first.leader, first.generation_id
        assert all(code(a.get()) == E.NONE for a in answers)
        followers = [i for i in ids if i != leader]
        parked = [self.send(sync(i, generation)) for i in followers]
        assignments = tuple((i, f"to-{i}".encode()) for i in ids)
        assert code(self.call(sync(leader, generation, assignments))) == E.NONE
        assert all(code(a.get()) == E.NONE for a in parked)
        return [leader, *followers], generation


def join(
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (("p1", b"m"),),
    protocol_type: str = "sim",
    session_ms: int = 10_000,
    rebalance_ms: int = 5_000,
    group: str = GROUP,
) -> m.JoinGroupRequest:
    return m.JoinGroupRequest(
        group, session_ms, rebalance_ms, member_id, instance, protocol_type, protocols, None
    )


def sync(
    member_id: str,
    generation: int,
    assignments: tuple[tuple[str, bytes], ...] = (),
    *,
    instance: str | None = None,
    protocol_name: str | None = "p1",
) -> m.SyncGroupRequest:
    return m.SyncGroupRequest(
        GROUP, generation, member_id, instance, "sim", protocol_name, assignments
    )


def heartbeat(member_id: str, generation: int, instance: str | None = None) -> m.HeartbeatRequest:
    return m.HeartbeatRequest(GROUP, generation, member_id, instance)


def leave(member_id: str, instance: str | None = None) -> m.LeaveGroupRequest:
    return m.LeaveGroupRequest(GROUP, member_id, instance, "bye")


def commit(
    member_id: str, generation: int, instance: str | None = None, offset: int = 5
) -> m.OffsetCommitRequest:
    return m.OffsetCommitRequest(GROUP, generation, member_id, instance, (("t", 0, offset, "md"),))


def code(response: m.Response) -> int:
    if isinstance(response, m.OffsetCommitResponse):
        (only,) = {c for _, _, c in response.partitions}
        return only
    return response.error_code


# -- joining -----------------------------------------------------------------------------------


def test_a_dynamic_member_gets_an_id_first_then_joins_as_leader_of_generation_1() -> None:
    h = Harness()
    member_id = h.new_id()
    assert h.model.describe(GROUP).pending_member_ids == (member_id,)
    response = h.join(member_id, protocols=(("p1", b"meta"),))
    assert (response.error_code, response.generation_id, response.leader) == (0, 1, member_id)
    assert (response.protocol_type, response.protocol_name) == ("sim", "p1")
    assert response.members == (m.JoinGroupResponseMember(member_id, None, b"meta"),)
    assert h.state() == "CompletingRebalance"


def test_member_ids_never_repeat_across_models_sharing_a_log() -> None:
    h = Harness()
    other = GroupCoordinatorModel(2, h.log, h.timers)
    other.load()
    first = h.new_id()
    second = h.send(join(group="other"), other).joined
    assert first != second.member_id
    assert first.startswith("member-")
    assert h.join(instance="i1").member_id.startswith("i1-")


def test_unknown_member_ids_are_rejected() -> None:
    h = Harness()
    assert h.join("nobody").error_code == E.UNKNOWN_MEMBER_ID  # no group
    h.stable(1)
    assert h.join("nobody").error_code == E.UNKNOWN_MEMBER_ID


def test_a_new_member_makes_the_group_rebalance_and_the_generation_grow() -> None:
    h = Harness()
    (a,), generation = h.stable(1)
    b = h.new_id()
    parked_b = h.send(join(b))
    assert not parked_b.done and h.state() == "PreparingRebalance"
    assert code(h.call(heartbeat(a, generation))) == E.REBALANCE_IN_PROGRESS
    response_a = h.join(a)  # the last member rejoins: the join phase ends at once
    response_b = parked_b.get()
    assert isinstance(response_b, m.JoinGroupResponse)
    assert response_a.generation_id == response_b.generation_id == generation + 1
    assert response_a.leader == response_b.leader == a
    assert {x.member_id for x in response_a.members} == {a, b} and response_b.members == ()


def test_the_join_phase_ends_at_the_rebalance_timeout_without_members_that_did_not_rejoin() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    parked = h.send(join(a, rebalance_ms=3000))  # the group's timeout: b's 5 s
    h.timers.advance(4.9)
    assert not parked.done
    h.timers.advance(0.2)
    response = parked.get()
    assert isinstance(response, m.JoinGroupResponse)
    assert response.generation_id == generation + 1
    assert [x.member_id for x in response.members] == [a]
    assert code(h.call(heartbeat(b, generation))) == E.UNKNOWN_MEMBER_ID


def test_a_static_member_that_does_not_rejoin_stays_in_the_next_generation() -> None:
    h = Harness()
    s = h.join(instance="i1")  # static members join at once, without MEMBER_ID_REQUIRED
    assert s.error_code == E.NONE and s.generation_id == 1
    h.call(sync(s.member_id, 1, instance="i1"))
    a = h.new_id()
    parked = h.send(join(a))
    h.timers.advance(5.1)  # s never rejoins; a waits the rebalance timeout
    response = parked.get()
    assert isinstance(response, m.JoinGroupResponse)
    assert response.generation_id == 2
    assert [x.member_id for x in h.model.describe(GROUP).members] == [s.member_id, a]


def test_a_join_phase_no_member_rejoins_waits_until_sessions_end() -> None:
    h = Harness()
    s = h.join(instance="i1").member_id  # static: a 10 s session, a 5 s rebalance timeout
    d = h.new_id()
    parked = h.send(join(d))
    assert h.join(s, instance="i1").generation_id == 2
    assert parked.done
    h.send(sync(d, 2))
    h.call(sync(s, 2, instance="i1"))
    h.call(leave(d))  # a rebalance that s never rejoins
    h.timers.advance(5.1)
    assert h.state() == "PreparingRebalance"  # nobody rejoined: another timeout
    h.timers.advance(5)  # s's session has ended: the group is empty
    view = h.model.describe(GROUP)
    assert (view.state, view.generation_id, view.members) == ("Empty", 3, ())


def test_a_pending_member_holds_the_join_phase_until_its_session_runs_out() -> None:
    h = Harness()
    (a,), generation = h.stable(1)
    h.new_id(session_ms=1000)  # never comes back with its id
    parked = h.send(join(a))  # a leader's rejoin starts a rebalance
    h.timers.advance(0.9)
    assert not parked.done
    h.timers.advance(0.2)
    assert isinstance(response := parked.get(), m.JoinGroupResponse)
    assert response.generation_id == generation + 1
    assert h.model.describe(GROUP).pending_member_ids == ()


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    response = h.join(b)
    assert (response.error_code, response.generation_id, response.leader) == (0, generation, a)
    assert response.members == () and h.state() == "Stable"
    # Changed metadata, or the leader rejoining, starts a rebalance.
    assert not h.send(join(b, protocols=(("p1", b"new"),))).done
    assert h.state() == "PreparingRebalance"


def test_the_leader_rejoining_a_stable_group_starts_a_rebalance() -> None:
    h = Harness()
    (a, _b), _ = h.stable(2)
    assert not h.send(join(a)).done
    assert h.state() == "PreparingRebalance"


def test_a_repeated_join_while_completing_returns_the_same_generation() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    parked = h.send(join(a))
    h.join(b)
    assert isinstance(first := parked.get(), m.JoinGroupResponse)
    again = h.join(a)  # the leader lost its response
    assert again.generation_id == first.generation_id == generation + 1
    assert {x.member_id for x in again.members} == {a, b}


def test_the_protocol_is_chosen_by_votes_among_protocols_every_member_supports() -> None:
    h = Harness()
    ids = [h.new_id() for _ in range(3)]
    prefs = [(("x", b""), ("y", b"")), (("y", b""), ("x", b"")), (("y", b""), ("z", b""))]
    parked = h.together(*(join(i, protocols=p) for i, p in zip(ids, prefs, strict=True)))
    assert {a.joined.protocol_name for a in parked} == {"y"}


def test_a_tied_vote_is_broken_as_a_java_hash_map_orders_the_protocols() -> None:
    h = Harness()
    a, b = h.new_id(), h.new_id()
    parked, _ = h.together(
        join(a, protocols=(("p2", b""), ("p1", b""))), join(b, protocols=(("p1", b""), ("p2", b"")))
    )
    response = parked.get()
    assert isinstance(response, m.JoinGroupResponse)
    assert response.protocol_name == "p1"  # "p1" hashes to an earlier bucket than "p2"


def test_inconsistent_protocols_are_rejected() -> None:
    h = Harness()
    h.stable(1)
    assert h.join(protocol_type="other").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=(("p9", b""),)).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(group="fresh", protocols=()).error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeouts_outside_the_broker_bounds_are_rejected() -> None:
    h = Harness(BrokerSettings(group_min_session_timeout_ms=500, group_max_session_timeout_ms=9000))
    assert h.join(session_ms=499).error_code == E.INVALID_SESSION_TIMEOUT
    assert h.join(session_ms=9001).error_code == E.INVALID_SESSION_TIMEOUT
    assert h.join(session_ms=9000).error_code == E.MEMBER_ID_REQUIRED


def test_members_beyond_the_max_group_size_are_turned_away() -> None:
    h = Harness(BrokerSettings(group_max_size=1))
    h.stable(1)
    response = h.join()
    assert (response.error_code, response.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")


def test_a_new_empty_group_waits_the_initial_rebalance_delay_for_more_members() -> None:
    h = Harness(BrokerSettings(group_initial_rebalance_delay_ms=3000))
    a, b = h.new_id(), h.new_id()
    first = h.send(join(a))
    h.timers.advance(2.0)
    second = h.send(join(b))  # extends the delay by another 3 s
    h.timers.advance(2.0)
    assert not first.done
    h.timers.advance(1.1)
    assert first.done and second.done
    assert len(h.model.describe(GROUP).members) == 2


# -- syncing -----------------------------------------------------------------------------------


def test_followers_wait_for_the_leaders_sync_and_the_assignment_is_stored() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    parked_a, parked_b = h.send(join(a)), h.send(join(b))
    generation = parked_a.joined.generation_id
    assert parked_b.done
    follower = h.send(sync(b, generation))
    assert not follower.done
    leader = h.call(sync(a, generation, ((a, b"A"), (b, b"B"))))
    assert leader == m.SyncGroupResponse(0, "sim", "p1", b"A")
    assert follower.get() == m.SyncGroupResponse(0, "sim", "p1", b"B")
    assert h.state() == "Stable"
    record = h.log.group(GROUP)
    assert record is not None and record.generation_id == generation
    assert {x.member_id: x.assignment for x in record.members} == {a: b"A", b: b"B"}
    assert h.call(sync(b, generation)) == m.SyncGroupResponse(0, "sim", "p1", b"B")


def test_sync_group_errors() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    assert code(h.call(sync(a, generation + 1))) == E.ILLEGAL_GENERATION
    assert code(h.call(sync("nobody", generation))) == E.UNKNOWN_MEMBER_ID
    assert code(h.call(sync(a, generation, protocol_name="p2"))) == E.INCONSISTENT_GROUP_PROTOCOL
    assert code(h.call(sync(a, generation, protocol_name=None))) == E.INCONSISTENT_GROUP_PROTOCOL
    h.send(join(a))
    assert code(h.call(sync(b, generation))) == E.REBALANCE_IN_PROGRESS
    assert code(h.call(m.SyncGroupRequest("none", 1, a, None, "sim", "p1"))) == E.UNKNOWN_MEMBER_ID


def test_a_rebalance_while_completing_answers_parked_syncs_with_rebalance_in_progress() -> None:
    h = Harness()
    (a, b), _ = h.stable(2)
    parked_a = h.send(join(a))
    h.join(b)
    generation = parked_a.joined.generation_id
    follower = h.send(sync(b, generation))
    h.send(join(h.new_id()))  # a pending member rejoins with its id: a new rebalance
    assert follower.get() == m.SyncGroupResponse(E.REBALANCE_IN_PROGRESS)


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), _ = h.stable(2)
    parked_a = h.send(join(a, rebalance_ms=2000))
    h.join(b, rebalance_ms=2000)
    generation = parked_a.joined.generation_id
    h.call(sync(a, generation, ((a, b"A"), (b, b"B"))))  # b never syncs
    assert code(h.call(heartbeat(b, generation))) == E.NONE
    h.timers.advance(2.1)
    assert h.state() == "PreparingRebalance"
    assert [x.member_id for x in h.model.describe(GROUP).members] == [a]


# -- heartbeats and sessions -------------------------------------------------------------------


def test_heartbeat_answers_in_each_state() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    assert code(h.call(heartbeat(a, generation))) == E.NONE
    assert code(h.call(heartbeat(a, generation - 1))) == E.ILLEGAL_GENERATION
    assert code(h.call(heartbeat("nobody", generation))) == E.UNKNOWN_MEMBER_ID
    assert code(h.call(m.HeartbeatRequest("none", 1, a, None))) == E.UNKNOWN_MEMBER_ID
    parked = h.send(join(a))
    assert code(h.call(heartbeat(b, generation))) == E.REBALANCE_IN_PROGRESS
    h.join(b)
    assert parked.done and h.state() == "CompletingRebalance"
    assert code(h.call(heartbeat(b, generation + 1))) == E.NONE  # between join and sync


def test_a_member_whose_session_runs_out_is_removed_and_the_last_one_empties_the_group() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    for _ in range(2):
        h.timers.advance(4)
        assert code(h.call(heartbeat(a, generation))) == E.NONE
    h.timers.advance(4)  # b's 10 s session ran out
    assert code(h.call(heartbeat(a, generation))) == E.REBALANCE_IN_PROGRESS
    assert h.join(a).generation_id == generation + 1  # a alone
    h.call(sync(a, generation + 1))
    h.timers.advance(10.1)
    view = h.model.describe(GROUP)
    assert (view.state, view.generation_id, view.members) == ("Empty", generation + 2, ())
    assert h.log.group(GROUP) == GroupRecord(GROUP, "sim", generation + 2, None, None, 22_000, ())
    assert code(h.call(heartbeat(b, generation))) == E.UNKNOWN_MEMBER_ID


def test_an_offset_commit_keeps_the_session_alive() -> None:
    h = Harness()
    (a,), generation = h.stable(1)
    for _ in range(4):
        h.timers.advance(4)
        assert code(h.call(commit(a, generation))) == E.NONE
    assert h.state() == "Stable"


# -- static membership -------------------------------------------------------------------------


def static_pair(h: Harness) -> tuple[str, str, int]:
    """Static members i1 (leader) and i2 in a stable generation."""
    s1, s2 = h.together(join(instance="i1"), join(instance="i2"))
    r1, r2 = s1.get(), s2.get()
    assert isinstance(r1, m.JoinGroupResponse) and isinstance(r2, m.JoinGroupResponse)
    follower = h.send(sync(r2.member_id, 1, instance="i2"))
    assignments = ((r1.member_id, b"one"), (r2.member_id, b"two"))
    h.call(sync(r1.member_id, 1, assignments, instance="i1"))
    assert follower.done
    return r1.member_id, r2.member_id, 1


def test_a_static_member_rejoining_without_its_id_replaces_the_old_one_and_keeps_the_group() -> (
    None
):
    h = Harness()
    old1, old2, generation = static_pair(h)
    new1 = h.join(instance="i1")
    assert (new1.error_code, new1.generation_id, new1.leader) == (0, generation, new1.member_id)
    assert new1.skip_assignment and len(new1.members) == 2  # KIP-814: the leader need not assign
    new2 = h.join(instance="i2")
    assert not new2.skip_assignment and new2.members == () and new2.leader == new1.member_id
    assert h.state() == "Stable"
    assert code(h.call(heartbeat(old1, generation, "i1"))) == E.FENCED_INSTANCE_ID
    assert code(h.call(sync(old2, generation, instance="i2"))) == E.FENCED_INSTANCE_ID
    assert code(h.call(commit(old2, generation, "i2"))) == E.FENCED_INSTANCE_ID
    assert h.call(sync(new2.member_id, generation, instance="i2")) == m.SyncGroupResponse(
        0, "sim", "p1", b"two"
    )
    record = h.log.group(GROUP)
    assert record is not None
    assert {x.member_id for x in record.members} == {new1.member_id, new2.member_id}
    assert code(h.call(heartbeat(new2.member_id, generation))) == E.NONE


def test_replacing_a_static_member_fences_its_parked_join_and_rebalances_if_completing() -> None:
    h = Harness()
    old1, old2, _ = static_pair(h)
    parked = h.send(join(old1, instance="i1"))  # the leader rejoins: a rebalance
    assert not parked.done
    new1 = h.send(join(instance="i1"))
    assert parked.get() == m.JoinGroupResponse(E.FENCED_INSTANCE_ID, member_id=old1)
    h.join(old2, instance="i2")
    assert new1.done and h.state() == "CompletingRebalance"
    assert not h.send(join(instance="i2")).done  # replaced while completing: a rebalance
    assert h.state() == "PreparingRebalance"


def test_a_static_member_leaves_by_member_id_or_is_removed_by_instance_id() -> None:
    h = Harness()
    s1, s2, _ = static_pair(h)
    assert h.call(leave("", "i9")) == m.LeaveGroupResponse(0, E.UNKNOWN_MEMBER_ID)
    assert h.call(leave(s2, "i1")) == m.LeaveGroupResponse(0, E.FENCED_INSTANCE_ID)
    assert h.call(leave("", "i2")) == m.LeaveGroupResponse(0, 0)  # an admin removal
    assert [x.member_id for x in h.model.describe(GROUP).members] == [s1]
    assert h.state() == "PreparingRebalance"


# -- leaving -----------------------------------------------------------------------------------


def test_leave_group() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    assert h.call(leave("nobody")) == m.LeaveGroupResponse(0, E.UNKNOWN_MEMBER_ID)
    assert h.call(m.LeaveGroupRequest("none", a, None, None)) == m.LeaveGroupResponse(0, 25)
    pending = h.new_id()
    assert h.call(leave(pending)) == m.LeaveGroupResponse(0, 0)
    assert h.call(leave(b)) == m.LeaveGroupResponse(0, 0)
    assert code(h.call(heartbeat(a, generation))) == E.REBALANCE_IN_PROGRESS
    assert h.join(a).generation_id == generation + 1
    assert h.call(leave(a)) == m.LeaveGroupResponse(0, 0)
    view = h.model.describe(GROUP)
    assert (view.state, view.generation_id) == ("Empty", generation + 2)


def test_a_pending_member_joins_a_rebalance_that_every_member_left() -> None:
    h = Harness()
    (a,), generation = h.stable(1)
    pending = h.new_id()
    # The join phase waits for the pending member, for the rebalance timeout of no members: 0.
    left, other, joined = h.together(
        leave(a), join(protocol_type="other"), join(pending, protocols=(("p9", b""),))
    )
    assert code(left.get()) == E.NONE
    assert code(other.get()) == E.INCONSISTENT_GROUP_PROTOCOL
    assert (joined.joined.generation_id, joined.joined.leader) == (generation + 1, pending)
    assert h.state() == "CompletingRebalance"


def test_the_last_member_leaving_empties_the_group_even_with_a_pending_member() -> None:
    h = Harness()
    (a,), generation = h.stable(1)
    h.new_id()
    h.call(leave(a))
    assert (h.state(), h.model.describe(GROUP).generation_id) == ("Empty", generation + 1)


def test_leaving_while_others_rejoin_completes_the_join_phase() -> None:
    h = Harness()
    (a, b), _ = h.stable(2)
    parked = h.send(join(a))
    h.call(leave(b))
    assert parked.done and h.state() == "CompletingRebalance"


# -- offsets -----------------------------------------------------------------------------------


def test_offset_commit_rules() -> None:
    h = Harness()
    assert code(h.call(commit("m", 3))) == E.GROUP_ID_NOT_FOUND  # no group
    assert code(h.call(commit("", -1))) == E.NONE  # creates a simple group
    assert h.model.committed(GROUP) == {("t", 0): (5, "md")}
    h.model.delete_group(GROUP)
    (a, b), generation = h.stable(2)
    assert code(h.call(commit("", -1))) == E.UNKNOWN_MEMBER_ID  # only members, once not Empty
    assert code(h.call(commit(a, generation - 1))) == E.ILLEGAL_GENERATION
    assert code(h.call(commit("nobody", generation))) == E.UNKNOWN_MEMBER_ID
    assert code(h.call(commit(a, generation, offset=7))) == E.NONE
    parked = h.send(join(a))
    assert code(h.call(commit(b, generation, offset=8))) == E.NONE  # PreparingRebalance
    h.join(b)
    assert parked.done
    assert code(h.call(commit(b, generation + 1))) == E.REBALANCE_IN_PROGRESS  # Completing
    too_long = m.OffsetCommitRequest(GROUP, -1, "", None, (("t", 1, 1, "x" * 4097),))
    h.call(leave(a)), h.call(leave(b))
    assert code(h.call(too_long)) == E.OFFSET_METADATA_TOO_LARGE
    assert h.model.committed(GROUP) == {("t", 0): (8, "md")}


def test_offset_fetch_answers_minus_one_and_empty_metadata_for_no_offset() -> None:
    h = Harness()
    h.call(m.OffsetCommitRequest(GROUP, -1, "", None, (("t", 1, 4, None), ("u", 0, 9, "x"))))
    fetch = m.OffsetFetchRequest(GROUP, (("t", 0), ("u", 0), ("t", 1)))
    assert h.call(fetch) == m.OffsetFetchResponse(
        0, (("t", 0, -1, "", 0), ("t", 1, 4, "", 0), ("u", 0, 9, "x", 0))
    )
    unknown = m.OffsetFetchRequest("none", (("t", 0),))
    assert h.call(unknown) == m.OffsetFetchResponse(0, (("t", 0, -1, "", 0),))


# -- coordinator moves -------------------------------------------------------------------------


def test_a_model_that_is_not_the_coordinator_or_is_loading_says_so() -> None:
    h = Harness()
    h.model.unload()
    assert h.join().error_code == E.NOT_COORDINATOR
    assert code(h.call(commit("", -1))) == E.NOT_COORDINATOR
    assert h.model.delete_group(GROUP) == E.NOT_COORDINATOR
    h.model.load(load_time_s=1.0)
    assert h.join().error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert code(h.call(sync("x", 1))) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert code(h.call(heartbeat("x", 1))) == E.NONE  # Kafka answers heartbeats blindly
    assert h.call(m.OffsetFetchRequest(GROUP, ())) == m.OffsetFetchResponse(14, ())
    h.timers.advance(1.0)
    assert h.join().error_code == E.MEMBER_ID_REQUIRED
    with pytest.raises(TypeError):
        h.model.handle(m.FindCoordinatorRequest(GROUP), lambda r: None)


def test_unload_answers_parked_requests_with_not_coordinator() -> None:
    h = Harness()
    (a, b), _ = h.stable(2)
    parked_join = h.send(join(a))
    h.join(b)
    generation = parked_join.joined.generation_id
    parked_sync = h.send(sync(b, generation))
    pending_join = h.send(join(h.new_id()))  # a rebalance: b's sync is answered
    assert code(parked_sync.get()) == E.REBALANCE_IN_PROGRESS
    h.model.unload()
    assert pending_join.get() == m.JoinGroupResponse(
        E.NOT_COORDINATOR, member_id=pending_join_id(h)
    )
    assert h.timers.next_due() is None  # every timer cancelled


def pending_join_id(h: Harness) -> str:
    return f"member-{h.log.next_member_number() - 1}"


def test_a_new_coordinator_reloads_the_stored_generation() -> None:
    h = Harness()
    (a, b), generation = h.stable(2)
    h.call(commit(a, generation))
    h.model.unload()
    other = GroupCoordinatorModel(2, h.log, h.timers)
    other.load()
    view = other.describe(GROUP)
    assert (view.state, view.generation_id, view.leader_id) == ("Stable", generation, a)
    assert {x.member_id: x.assignment for x in view.members} == {
        a: f"to-{a}".encode(),
        b: f"to-{b}".encode(),
    }
    assert other.committed(GROUP) == {("t", 0): (5, "md")}
    # Fresh sessions: a heartbeats, b does not and is removed.
    for _ in range(2):
        h.timers.advance(4)
        assert code(h.send(heartbeat(a, generation), other).get()) == E.NONE
    h.timers.advance(4)
    assert other.describe(GROUP).state == "PreparingRebalance"
    new_id = h.send(join(), other).joined
    assert new_id.member_id not in (a, b)


def test_after_a_reload_a_rejoin_with_several_protocols_counts_as_changed_metadata() -> None:
    h = Harness()
    ids = [h.new_id(), h.new_id()]
    protocols = (("p1", b"m"), ("p2", b"m"))
    parked = h.together(*(join(i, protocols=protocols) for i in ids))
    leader = parked[0].joined.leader
    follower = next(i for i in ids if i != leader)
    h.send(sync(follower, 1))
    h.call(sync(leader, 1))
    h.model.unload()
    h.model.load()
    assert not h.send(join(follower, protocols=protocols)).done


# -- deletion and expiry -----------------------------------------------------------------------


def test_delete_group() -> None:
    h = Harness()
    assert h.model.delete_group(GROUP) == E.GROUP_ID_NOT_FOUND
    (a,), generation = h.stable(1)
    h.call(commit(a, generation))
    assert h.model.delete_group(GROUP) == E.NON_EMPTY_GROUP
    h.call(leave(a))
    assert h.model.delete_group(GROUP) == E.NONE
    assert h.model.describe(GROUP).state == "Dead"
    assert h.model.committed(GROUP) == {}
    assert isinstance(h.log.entries[-1], GroupTombstone)
    assert OffsetTombstone(GROUP, "t", 0) in h.log.entries
    assert h.join().error_code == E.MEMBER_ID_REQUIRED  # a new group, generation 0


def test_an_empty_group_without_offsets_is_deleted_at_the_next_expiry_check() -> None:
    h = Harness(BrokerSettings(offsets_retention_check_interval_ms=60_000))
    h.new_id()  # creates the group, Empty
    h.timers.advance(59.9)
    assert h.state() == "Empty"
    h.timers.advance(0.2)
    assert h.state() == "Dead"
    assert h.timers.next_due() is None  # no timer while there is nothing to expire


def test_offsets_of_an_empty_group_expire_after_the_retention() -> None:
    settings = BrokerSettings(
        offsets_retention_ms=100_000, offsets_retention_check_interval_ms=60_000
    )
    h = Harness(settings)
    (a,), generation = h.stable(1)
    h.call(commit(a, generation))
    for _ in range(40):
        h.timers.advance(5)
        h.call(heartbeat(a, generation))
    assert h.model.committed(GROUP)  # a live group keeps its offsets
    h.call(leave(a))  # Empty at 200 s: the offsets expire at the check at 300 s
    h.timers.advance(99)
    assert h.model.committed(GROUP)
    h.timers.advance(2)
    assert h.model.committed(GROUP) == {}
    assert h.state() == "Dead"


def test_offsets_committed_without_group_management_expire_by_commit_time() -> None:
    h = Harness(
        BrokerSettings(offsets_retention_ms=100_000, offsets_retention_check_interval_ms=60_000)
    )
    h.call(commit("", -1, offset=1))
    h.timers.advance(50)
    h.call(m.OffsetCommitRequest(GROUP, -1, "", None, (("u", 0, 2, None),)))
    h.timers.advance(70)  # the check at 120 s: only the first commit is 100 s old
    assert h.model.committed(GROUP) == {("u", 0): (2, "")}
    h.timers.advance(60)  # the check at 180 s: the group goes with its last offset
    assert (h.model.committed(GROUP), h.state()) == ({}, "Dead")


def test_a_reload_keeps_groups_that_only_have_offsets_and_a_load_restarts_a_loaded_model() -> None:
    h = Harness()
    h.call(m.OffsetCommitRequest("simple", -1, "", None, (("t", 0, 5, None),)))
    (a,), generation = h.stable(1)
    parked = h.send(join(h.new_id()))  # a rebalance waits for a
    h.model.load()  # again: an unload, then a load
    assert code(parked.get()) == E.NOT_COORDINATOR
    view = h.model.describe("simple")
    assert (view.state, view.protocol_type, h.model.committed("simple")) == (
        "Empty",
        None,
        {("t", 0): (5, "")},
    )
    view = h.model.describe(GROUP)  # the stored generation, without the rebalance
    assert (view.state, view.generation_id, [x.member_id for x in view.members]) == (
        "Stable",
        generation,
        [a],
    )


def test_a_group_over_the_max_size_after_a_reload_rebalances() -> None:
    h = Harness()
    h.stable(2)
    h.model.unload()
    smaller = GroupCoordinatorModel(2, h.log, h.timers, BrokerSettings(group_max_size=1))
    smaller.load()
    assert smaller.describe(GROUP).state == "PreparingRebalance"
