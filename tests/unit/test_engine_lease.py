"""What proves a member's place in the group, and so renews its membership lease.

Each rule here was found by the deterministic simulator (tests/simulation) as a history in
which two members held the same work, each with a lease; the broker behaviours they rest
on are Kafka's, checked against real brokers by tests/integration/test_model_vs_broker.py.
"""

from __future__ import annotations

import pytest

from coordination import MemberState
from coordination._protocol.error_codes import ErrorCode as E
from coordination.testing import TransportError
from coordination.testing import messages as m

from .test_engine import NODE, Harness, joined


def stable_follower(**settings: object) -> Harness:
    h = Harness(session_timeout_ms=10_000, heartbeat_interval_ms=1000, **settings)
    h.join_as_follower("m-2", generation=3)
    return h


def test_a_sync_answer_does_not_renew_the_lease() -> None:
    # A late follower's SyncGroup to a stable group is answered without restarting its
    # session (Kafka 4): only the JoinGroup's send time counts.
    h = Harness(session_timeout_ms=10_000)
    h.engine._generation = h.engine.generation.__class__(-1, "m-2", None)
    h.prepare(NODE)

    def parked_join(request: m.Request) -> m.JoinGroupResponse:
        h.clock.advance(4)  # the join phase waited for the others; the sync leaves after it
        return joined("m-2", 3, leader="m-1")

    h.prepare(parked_join, response_type=m.JoinGroupResponse)
    h.prepare(m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"))
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.membership_lease() == pytest.approx(6.0)


def test_rejoining_into_the_same_generation_keeps_the_lease_as_it_was() -> None:
    # A follower that rejoins a stable group unchanged gets the current generation back at
    # once, its session timer left as it was.
    h = stable_follower()
    h.clock.advance(4)
    h.engine.request_rejoin("metadata unchanged")
    h.prepare(
        joined("m-2", 3, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.membership_lease() == pytest.approx(6.0)


def test_rejoining_into_the_same_generation_keeps_the_heartbeat_due_when_it_was() -> None:
    # The broker's session runs on from the last heartbeat answered: a member whose
    # heartbeat was due (its lease running low) sends it at once after such a rejoin, not an
    # interval later (it could run past its session; the simulator found a task worker
    # rejoining hundreds of times a second while its lease stayed low).
    h = stable_follower()
    h.clock.advance(4)  # four intervals without a heartbeat: one is overdue
    h.engine.request_rejoin("metadata unchanged")
    h.prepare(
        joined("m-2", 3, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    h.prepare(m.HeartbeatResponse(error_code=0))
    assert h.engine.heartbeat_once() == pytest.approx(1.0)  # sent now; the next in 1 s
    assert h.transport.pending() == 0
    assert h.engine.membership_lease() == pytest.approx(10.0)


def test_an_older_generation_from_a_reloaded_coordinator_gives_no_lease() -> None:
    # The coordinator moved and loaded the group as stored, before the rebalance that made
    # generation 3: when it restarted this member's session is unknown.
    # (The heartbeat that could prove a session before SyncGroup is refused.)
    h = stable_follower()
    h.engine.request_rejoin("coordinator moved")
    h.prepare(
        joined("m-2", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
        m.HeartbeatResponse(error_code=E.COORDINATOR_NOT_AVAILABLE),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.generation.generation_id == 2
    assert h.engine.membership_lease() == 0.0


def parked_new_member(waited_s: float, **settings: object) -> Harness:
    """A new member whose JoinGroup waits ``waited_s`` in its phase (the group waits for a
    member that died), with a 6 s session and lease and 1 s heartbeats."""
    h = Harness(session_timeout_ms=6_000, heartbeat_interval_ms=1_000, **settings)
    h.engine._generation = h.engine.generation.__class__(-1, "m-9", None)
    h.prepare(NODE)

    def parked(request: m.Request) -> m.JoinGroupResponse:
        h.clock.advance(waited_s)
        return joined("m-9", 4, leader="m-1")

    h.prepare(parked, response_type=m.JoinGroupResponse)
    h.prepare(m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"))
    return h


def test_a_join_that_waited_longer_than_the_lease_proves_the_session_before_syncing() -> None:
    # The JoinGroup proves a session restart no earlier than its send, 7 s ago: the lease is
    # spent. A heartbeat answered NONE before a SyncGroup answered NONE proves one since the
    # heartbeat left; without it the first heartbeat after the sync would prove nothing and
    # the member would leave and join again, losing the assignment it was just handed.
    h = parked_new_member(7)
    h.prepare(m.HeartbeatResponse(error_code=0))
    assert h.engine.join_group_if_needed(deadline=None)
    kinds = [type(s.request).__name__ for s in h.transport.sent]
    assert kinds[-3:] == ["JoinGroupRequest", "HeartbeatRequest", "SyncGroupRequest"]
    assert h.engine.membership_lease() == pytest.approx(6.0)

    h.clock.advance(1)
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert h.engine.state is MemberState.STABLE
    assert h.engine.generation == h.engine.generation.__class__(4, "m-9", "v2")
    assert h.engine.membership_lease() == pytest.approx(6.0)
    assert h.transport.requests(m.LeaveGroupRequest) == []
    assert [c[0] for c in h.member.calls] == ["prepare", "complete"]


def test_a_heartbeat_refused_before_syncing_proves_nothing() -> None:
    h = parked_new_member(7)
    h.prepare(m.HeartbeatResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.membership_lease() == 0.0


def test_a_join_answered_well_within_the_lease_syncs_at_once() -> None:
    # No heartbeat on the join's path unless the lease would lapse before the heartbeat
    # thread's first (two intervals' margin).
    h = parked_new_member(3)
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.transport.requests(m.HeartbeatRequest) == []
    assert h.engine.membership_lease() == pytest.approx(3.0)


def test_a_new_generation_counts_from_the_join_that_waited_in_its_phase() -> None:
    h = stable_follower()
    h.clock.advance(2)
    h.engine.request_rejoin("a rebalance")

    def parked(request: m.Request) -> m.JoinGroupResponse:
        h.clock.advance(3)  # the join phase waited for the others
        return joined("m-2", 4, leader="m-1")

    h.prepare(parked, response_type=m.JoinGroupResponse)
    h.prepare(m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"))
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.membership_lease() == pytest.approx(7.0)  # from the JoinGroup's send


def test_a_heartbeat_renews_only_a_lease_that_still_held_when_it_left() -> None:
    h = stable_follower()
    h.clock.advance(5)
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert h.engine.membership_lease() == pytest.approx(10.0)


def test_a_heartbeat_answered_after_the_lease_ran_out_makes_the_member_prove_its_place() -> None:
    # A coordinator that is loading the group answers NONE to any heartbeat, even one from a
    # member it removed before it moved: such an answer renews nothing. The member leaves its
    # old id (so that the next join phase need not wait for it) and joins as a new member.
    # The lease lasts min(session, rebalance timeout) = 5 s; the session timer 10 s.
    h = stable_follower(rebalance_timeout_ms=5_000)
    h.clock.advance(6)
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert h.engine.membership_lease() == 0.0
    assert h.engine.state is MemberState.UNJOINED
    assert h.engine.generation.member_id == ""

    h.prepare(
        m.LeaveGroupResponse(error_code=0),
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-7"),
        joined("m-7", 5, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    (leave,) = h.transport.requests(m.LeaveGroupRequest)
    assert leave.member_id == "m-2"
    assert h.engine.generation.member_id == "m-7"
    assert h.engine.membership_lease() == pytest.approx(5.0)
    assert [c[0] for c in h.member.calls][-2:] == ["prepare", "complete"]
    assert ("prepare", -1, "") in h.member.calls  # told that its assignment is gone


def test_a_static_member_proving_its_place_again_waits_out_whoever_it_replaced() -> None:
    # The id its rejoin replaces may not be its own: a restart of it (same instance id) may
    # have taken its place while it was cut off, and act under a lease of its own. Its
    # assignment takes effect only once such a lease has run out (the takeover fence; the
    # simulated history is tests/simulation/test_engine_scenarios.py).
    h = stable_follower(group_instance_id="w-2", rebalance_timeout_ms=5_000)
    h.clock.advance(6)
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    h.prepare(
        joined("w-2-new", 3, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    completed_at: list[float] = []
    h.member.on_join_complete = (  # type: ignore[method-assign]
        lambda *args: completed_at.append(h.clock.monotonic())
    )
    joining_at = h.clock.monotonic()
    assert h.engine.join_group_if_needed(deadline=None)
    rejoin = h.transport.requests(m.JoinGroupRequest)[-1]
    assert (rejoin.member_id, rejoin.group_instance_id) == ("", "w-2")  # takes its place again
    assert h.transport.requests(m.LeaveGroupRequest) == []
    assert h.engine.generation.member_id == "w-2-new"
    assert completed_at and completed_at[0] >= joining_at + 5.0  # the lease it may have ended


def test_a_heartbeat_unanswered_before_syncing_fails_the_join() -> None:
    # A SyncGroup to the same coordinator would wait as long for nothing (and a leader's
    # would hold up every follower): the member looks for the coordinator again.
    h = parked_new_member(7)
    h.prepare(TransportError("timed out"), response_type=m.HeartbeatResponse)
    h.prepare(TransportError("refused"), response_type=m.FindCoordinatorResponse)
    assert not h.engine.join_group_if_needed(deadline=h.clock.monotonic())
    assert h.transport.requests(m.SyncGroupRequest) == []
    assert h.engine.coordinator is None


def static_follower() -> Harness:
    return stable_follower(group_instance_id="w-2")


def test_a_static_join_answered_past_the_next_generation_reports_the_assignment_lost() -> None:
    # Generation 4 completed without this static member's JoinGroup: the broker kept it with
    # the metadata of its previous join, so generation 4 was assigned from claims older than
    # what it holds, and another member may hold part of that now, with a lease. The member
    # reports its assignment lost and joins again. The broker answers the rejoin with
    # generation 5 again, without a new session: that answer gives no lease either, so a
    # heartbeat before SyncGroup proves one.
    h = static_follower()
    h.engine.request_rejoin("a rebalance")
    h.prepare(
        joined("m-2", 5, leader="m-1"),
        joined("m-2", 5, leader="m-1"),
        m.HeartbeatResponse(error_code=0),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.member.calls[-3:] == [
        ("prepare", 3, "m-2"),
        ("prepare", -1, "m-2"),  # told that its assignment is gone, before joining again
        ("complete", 5, "m-2", "v2", b""),
    ]
    kinds = [type(s.request).__name__ for s in h.transport.sent]
    assert kinds[-4:] == [
        "JoinGroupRequest",
        "JoinGroupRequest",
        "HeartbeatRequest",
        "SyncGroupRequest",
    ]
    assert h.engine.generation.generation_id == 5


def test_a_static_follower_answered_the_next_generation_proves_its_session_first() -> None:
    # Generation 4 may have completed without this static member's JoinGroup (the broker
    # keeps a static member that did not rejoin), and a coordinator that loaded the group
    # since then answers its rejoin from Stable at once, its session timer running on from the
    # load. Counting the lease from the JoinGroup let the simulator's task worker run tasks
    # after the broker had expired it and handed them to a new member. A heartbeat answered
    # before the SyncGroup proves the session; the lease counts from it.
    h = static_follower()
    h.clock.advance(2)
    h.engine.request_rejoin("heartbeat returned ILLEGAL_GENERATION")
    h.prepare(
        joined("m-2", 4, leader="m-1"),
        m.HeartbeatResponse(error_code=0),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    kinds = [type(s.request).__name__ for s in h.transport.sent]
    assert kinds[-3:] == ["JoinGroupRequest", "HeartbeatRequest", "SyncGroupRequest"]
    assert h.transport.requests(m.HeartbeatRequest)[-1].generation_id == 4
    assert h.engine.membership_lease() == pytest.approx(10.0)


def test_a_static_follower_answered_the_next_generation_gets_no_lease_from_the_join() -> None:
    h = static_follower()
    h.engine.request_rejoin("heartbeat returned ILLEGAL_GENERATION")
    h.prepare(
        joined("m-2", 4, leader="m-1"),
        m.HeartbeatResponse(error_code=E.COORDINATOR_NOT_AVAILABLE),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.generation.generation_id == 4
    assert h.engine.membership_lease() == 0.0


def test_a_static_leader_answered_the_next_generation_syncs_at_once() -> None:
    # A leader's JoinGroup to a Stable group starts a rebalance, so its answer comes from a
    # join phase it took part in: the broker restarted its session when that phase ended.
    h = static_follower()
    h.clock.advance(2)
    h.engine.request_rejoin("a rebalance")
    h.prepare(
        joined("m-2", 4, leader="m-2"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    kinds = [type(s.request).__name__ for s in h.transport.sent]
    assert kinds[-2:] == ["JoinGroupRequest", "SyncGroupRequest"]
    assert h.engine.membership_lease() == pytest.approx(10.0)


@pytest.mark.parametrize("answered", [4, 5])
def test_a_dynamic_join_keeps_the_assignment_whatever_generation_answers(answered: int) -> None:
    # The next generation (4), or one past it (5): the broker removes a dynamic member that
    # did not rejoin in time, so one answered past the next generation lost the answer to a
    # JoinGroup that carried its claims.
    h = stable_follower()
    h.engine.request_rejoin("a rebalance")
    h.prepare(
        joined("m-2", answered, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert [c[:2] for c in h.member.calls][-2:] == [("prepare", 3), ("complete", answered)]


def parked_sync_follower(waited_s: float) -> Harness:
    """A follower whose JoinGroup is answered at once and whose SyncGroup waits ``waited_s``
    for the leader's (6 s session and lease, 1 s heartbeats)."""
    h = Harness(session_timeout_ms=6_000, heartbeat_interval_ms=1_000)
    h.engine._generation = h.engine.generation.__class__(-1, "m-9", None)
    h.prepare(NODE, joined("m-9", 4, leader="m-1"))

    def parked(request: m.Request) -> m.SyncGroupResponse:
        h.clock.advance(waited_s)
        return m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2")

    h.prepare(parked, response_type=m.SyncGroupResponse)
    return h


def test_a_sync_that_waited_out_the_lease_proves_the_session_before_completing() -> None:
    # The leader took 5.5 s to send its SyncGroup: the lease from the JoinGroup's send has
    # 0.5 s left, less than the heartbeat thread needs. A heartbeat, then the SyncGroup
    # again (a Stable group answers it at once), prove a session since the heartbeat.
    h = parked_sync_follower(5.5)
    h.prepare(
        m.HeartbeatResponse(error_code=0),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    kinds = [type(s.request).__name__ for s in h.transport.sent]
    assert kinds[-3:] == ["SyncGroupRequest", "HeartbeatRequest", "SyncGroupRequest"]
    assert h.transport.requests(m.SyncGroupRequest)[-1].assignments == ()
    assert h.engine.membership_lease() == pytest.approx(6.0)

    h.clock.advance(1)
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert h.engine.state is MemberState.STABLE
    assert h.engine.generation.generation_id == 4
    assert [c[0] for c in h.member.calls] == ["prepare", "complete"]


def test_a_sync_answered_well_within_the_lease_completes_at_once() -> None:
    h = parked_sync_follower(2)
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.transport.requests(m.HeartbeatRequest) == []
    assert len(h.transport.requests(m.SyncGroupRequest)) == 1


def test_a_rebalance_begun_while_proving_the_session_is_joined_instead() -> None:
    h = parked_sync_follower(5.5)
    h.prepare(
        m.HeartbeatResponse(error_code=0),
        m.SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS),
        joined("m-9", 5, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert [c[:2] for c in h.member.calls] == [("prepare", -1), ("complete", 5)]


def test_a_refused_heartbeat_after_a_long_sync_lets_the_repeated_sync_decide() -> None:
    # The heartbeat says the group moved on: the repeated SyncGroup says so too, and the
    # assignment is not handed over; the member joins the new rebalance.
    h = parked_sync_follower(5.5)
    h.prepare(
        m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS),
        m.SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS),
        joined("m-9", 5, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert [c[:2] for c in h.member.calls] == [("prepare", -1), ("complete", 5)]
