"""LeaderElection's states, round by round, on a scripted broker and a manual clock.

candidate -> leader when a round names this member and its token is stored; leader ->
candidate when leadership moves, the lease runs low, membership is lost, the member steps
down or closes. See ``_member.py`` for how the rounds are scripted.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from coordination.errors import CoordinationTimeoutError, CoordinatorStateError
from coordination.testing import ManualClock, ScriptedTransport, TransportError
from coordination.testing import messages as m
from recipes.election import DuplicateIdentityError, LeaderElection, LeaderInfo, NotLeaderError
from recipes.election._elector import ElectionCallbacks
from recipes.election._leadership import LEASE_RAN_OUT
from recipes.election._wire import Candidate, Outcome, encode_candidate

from ._member import IDENTITY, LEASE_LOW_AFTER_S, ME, Broker, Member

ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
WHERE = ("__consumer_offsets", 0)


def moved_to_b(token: int, duplicates: tuple[str, ...] = ()) -> Outcome:
    """The outcome of a round that makes ``http://b`` (member ``m-b``) leader."""
    members = {ME: IDENTITY, "m-b": "http://b"}
    return Outcome("m-b", "http://b", token, members, duplicates=duplicates)


# ------------------------------------------------------------------ elected


def test_the_elected_member_stores_its_token_before_it_leads() -> None:
    a = Member()
    a.lead(("m-b", Candidate("http://b", priority=-1)))

    assert a.advertised == [Candidate(IDENTITY)]  # eligible, priority 0, no token seen yet
    assert a.broker.commits == [(1, 1)]  # fenced by the generation that elected it
    assert a.stored_when_elected == [{WHERE: 1}]  # stored before on_elected ran
    assert a.events == [("elected", 1), ("leader", (IDENTITY, 1))]
    leadership = a.election.leadership()
    assert leadership is not None and leadership.token == 1 and a.election.is_leader
    assert a.election.leader() == LeaderInfo(IDENTITY, ME, 1)
    assert a.election.members() == {ME: IDENTITY, "m-b": "http://b"}


def test_a_follower_learns_the_leader_and_advertises_its_token() -> None:
    a = Member()
    a.follow(moved_to_b(4))
    assert a.events == [("leader", ("http://b", 4))]
    assert not a.election.is_leader and a.broker.commits == []
    a.follow(moved_to_b(4))
    assert a.advertised[-1].highest_token == 4  # the next new leader's token exceeds it
    assert a.events == [("leader", ("http://b", 4))]  # no change, no callback


def test_every_rejoin_differs_from_the_join_before_so_the_broker_rebalances() -> None:
    # Each JoinGroup names the generation the member holds; the metadata stored with that
    # generation named an older one. A rejoin can therefore start a rebalance in a stable
    # group (a leader's departure need not reach the broker first).
    a = Member()
    a.follow(moved_to_b(4))
    a.follow(moved_to_b(4))
    a.follow(moved_to_b(4))
    assert [c.generation for c in a.advertised] == [-1, 1, 2]
    assert a.election.coordinator.rejoin_changes_metadata  # so its departure goes first


def test_an_observer_never_leads() -> None:
    a = Member(eligible=False)
    a.lead()
    assert a.advertised == [Candidate(IDENTITY, eligible=False)]
    assert a.election.leader() is None and not a.election.is_leader
    assert a.events == []
    with pytest.raises(CoordinationTimeoutError, match="last election named no leader"):
        a.election.wait_for_leader(timeout=0)


def test_a_leader_keeps_leadership_and_token_when_a_better_candidate_joins() -> None:
    a = Member()
    a.lead()
    a.lead(("m-b", Candidate("http://b", priority=100)))
    assert a.advertised[-1].leading_token == 1  # it claims its leadership in the JoinGroup
    assert a.events == [("elected", 1), ("leader", (IDENTITY, 1))]
    assert a.broker.commits == [(1, 1)]  # not stored again


# ------------------------------------------------------------------ deposed, and tokens


def test_a_leader_whose_leadership_moves_is_deposed_and_a_later_one_gets_a_higher_token() -> None:
    a = Member()
    a.lead()
    first = a.election.leadership()
    a.broker.committed[WHERE] = 5  # what b stored when it took over
    a.follow(moved_to_b(5))
    assert first is not None and first.lost.is_set()
    assert first.reason == "leadership moved to http://b"
    assert not a.election.is_leader
    with pytest.raises(NotLeaderError, match="leadership moved to http://b"):
        first.check()

    a.lead()  # b is gone: a free election again
    assert a.advertised[-1].highest_token == 5
    assert a.events == [
        ("elected", 1),
        ("leader", (IDENTITY, 1)),
        ("deposed", "leadership moved to http://b"),
        ("leader", ("http://b", 5)),
        ("elected", 6),
        ("leader", (IDENTITY, 6)),
    ]


def test_tokens_keep_growing_when_the_broker_starts_the_group_again() -> None:
    # Every member stopped and the broker forgot the group: generations restart at 1, but
    # the committed offsets (the stored token) outlive the group's members.
    broker = Broker()
    tokens = []
    for _ in range(3):
        a = Member(broker)
        a.lead()
        leadership = a.election.leadership()
        assert leadership is not None
        tokens.append(leadership.token)
    assert tokens == [1, 2, 3]


def test_a_refused_token_commit_means_no_leadership() -> None:
    a = Member()
    a.broker.refuse_commits = ILLEGAL_GENERATION
    a.script_lead()
    # The member rejoins by itself at once (the commit said its generation is gone), and
    # the next round makes b leader.
    a.script_follow(moved_to_b(2))
    a.rebalance()
    assert any("ILLEGAL_GENERATION" in r for r in a.rejoin_reasons())
    assert not a.election.is_leader
    # Its generation was gone: it knew no leader until the next round.
    assert a.events == [("leader", (IDENTITY, 1)), ("leader", None), ("leader", ("http://b", 2))]


# ------------------------------------------------------------------ the lease


def test_a_leader_is_deposed_once_its_lease_runs_low() -> None:
    a = Member()
    a.lead()
    leadership = a.election.leadership()
    assert leadership is not None
    a.clock.advance(LEASE_LOW_AFTER_S - 0.01)
    assert a.election.is_leader
    a.clock.advance(0.02)
    assert not a.election.is_leader  # read from the clock now, nothing else happened
    assert leadership.lost.is_set() and leadership.reason == LEASE_RAN_OUT
    assert a.events[-1] == ("deposed", LEASE_RAN_OUT)
    # The group still names it leader: it rejoins so that the group elects again.
    assert a.rejoin_reasons()[-1] == f"leader deposed itself: {LEASE_RAN_OUT}"


def test_a_confirmed_heartbeat_renews_the_lease() -> None:
    a = Member()
    a.lead()
    a.clock.advance(3.0)  # a heartbeat is due (heartbeat_interval_ms)
    a.broker.prepare(m.HeartbeatResponse(error_code=0))
    a.engine.heartbeat_once()
    a.clock.advance(LEASE_LOW_AFTER_S - 0.01)  # 9.99 s after the election, 6.99 after the beat
    assert a.election.is_leader
    a.clock.advance(0.02)
    assert not a.election.is_leader


def test_check_on_a_stale_leader_raises_and_deposes_it_once() -> None:
    a = Member()
    a.lead()
    leadership = a.election.leadership()
    assert leadership is not None
    leadership.check()
    a.clock.advance(LEASE_LOW_AFTER_S + 1)
    for _ in range(2):
        with pytest.raises(NotLeaderError, match="membership lease ran out"):
            leadership.check()
    assert not leadership.is_valid()
    assert [e for e in a.events if e[0] == "deposed"] == [("deposed", LEASE_RAN_OUT)]


def test_the_lease_watchdog_deposes_the_leader_in_time_when_nothing_else_happens() -> None:
    a = Member()
    a.lead()
    low_at = a.clock.now + LEASE_LOW_AFTER_S
    deposed_at: list[float] = []
    deposed = threading.Event()

    def on_deposed(leadership: object) -> None:
        deposed_at.append(a.clock.now)
        deposed.set()

    a.election._elector.callbacks = ElectionCallbacks(on_deposed=on_deposed)
    a.election._starting()  # the watchdog; its waits move the manual clock on
    try:
        assert deposed.wait(5), "the watchdog deposed nobody"
    finally:
        a.election._elector.lease.close()
        a.election._elector.lease.join(5)
    # Not before the lease ran low, and within one look (0.25 s) of it.
    (t,) = deposed_at
    assert low_at - 1e-6 <= t <= low_at + 0.25 + 1e-6, (low_at, t)
    assert not a.election.is_leader


def test_a_member_that_loses_its_membership_is_deposed_before_it_joins_again() -> None:
    a = Member()
    a.lead()
    a.clock.advance(3.0)
    a.broker.prepare(m.HeartbeatResponse(error_code=UNKNOWN_MEMBER_ID))
    a.engine.heartbeat_once()  # the broker no longer knows the member: its generation is gone
    assert a.election.coordinator.membership_lease() == 0.0  # no lease without a generation

    a.lead()  # it joins again as a new member, and is elected again, with a higher token
    assert a.events == [
        ("elected", 1),
        ("leader", (IDENTITY, 1)),
        ("deposed", "this member lost its place in the group"),
        ("leader", None),
        ("elected", 2),
        ("leader", (IDENTITY, 2)),
    ]


# ------------------------------------------------------------------ stepping down, closing


def test_run_calls_its_function_while_leading_then_steps_down() -> None:
    a = Member()
    a.lead()
    assert a.election.run(lambda leadership: (leadership.token, a.election.is_leader)) == (1, True)
    assert a.events[-1] == ("deposed", "this member withdrew from the election")
    assert a.rejoin_reasons()[-1] == "member withdrew from the election"
    a.lead()
    assert a.advertised[-1] == Candidate(
        IDENTITY, eligible=False, highest_token=1, member_id="m-a", generation=1
    )
    assert not a.election.is_leader


def test_waits_name_what_they_waited_for_and_a_duplicate_identity_is_raised() -> None:
    a = Member()
    with pytest.raises(CoordinationTimeoutError, match="waiting for a leader to be elected"):
        a.election.wait_for_leader(timeout=0)
    a.follow(moved_to_b(3, duplicates=(IDENTITY,)))
    with pytest.raises(DuplicateIdentityError, match="http://a"):
        a.election.wait_for_leader(timeout=0)
    with pytest.raises(DuplicateIdentityError):
        a.election.run(lambda leadership: None, timeout=0)


def test_waiting_for_a_leader_of_an_unreachable_cluster_names_the_servers_and_the_cause() -> None:
    transport = ScriptedTransport()
    clock = ManualClock()
    election = LeaderElection(
        "g", identity="a", bootstrap_servers="x:1", transport=transport, clock=clock
    )
    engine = election.coordinator._engine
    engine.resolve_protocol_type()
    election._started = True  # the test drives the member's steps: no threads
    setattr(engine, "start", lambda: None)  # noqa: B010
    cause = "cannot reach bootstrap servers ['x:1']: x:1: connection refused"
    for _ in range(50):  # more than fit in the deadline
        transport.prepare(TransportError(cause), response_type=m.FindCoordinatorResponse)
    assert not engine.ensure_coordinator_ready(deadline=clock.now + 2)

    with pytest.raises(CoordinationTimeoutError) as raised:
        election.wait_for_leader(timeout=0)
    assert str(raised.value) == (
        "election of group 'g': timed out after 0s waiting for a leader to be elected: this "
        "member is not in the group yet: the bootstrap servers x:1 could not be reached "
        f"(FindCoordinator failed: {cause}); the member keeps trying"
    )


def test_close_deposes_the_leader_then_leaves_the_group() -> None:
    a = Member()
    a.lead()
    deposed_before_leaving: list[bool] = []

    def leave(request: m.Request) -> m.Response:
        deposed_before_leaving.append(a.events[-1][0] == "deposed")
        return m.LeaveGroupResponse(error_code=0)

    a.broker.prepare(leave, response_type=m.LeaveGroupResponse)
    began = time.monotonic()
    a.election.close()
    assert time.monotonic() - began < 5
    assert deposed_before_leaving == [True]
    assert a.events[-1] == ("deposed", "this member is leaving the group")
    a.election.close()  # idempotent
    assert "is_leader=False" in repr(a.election)
    with pytest.raises(CoordinatorStateError, match="election of group 'g' is closed"):
        a.election.start()
    with pytest.raises(CoordinatorStateError):
        a.election.wait_for_leader(timeout=1)


def test_a_deposition_is_a_warning_only_when_the_leader_did_not_choose_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Closing is routine: a WARNING at every deploy would teach operators to ignore the
    # one a lost lease logs.
    caplog.set_level(logging.INFO, logger="recipes.election")
    a = Member()
    a.lead()
    a.broker.prepare(m.LeaveGroupResponse(error_code=0))
    a.election.close()
    b = Member()
    b.lead()
    b.clock.advance(LEASE_LOW_AFTER_S + 0.1)
    assert b.election.leadership() is None
    levels = {
        r.getMessage().split("): ", 1)[1]: r.levelname
        for r in caplog.records
        if "deposed" in r.getMessage()
    }
    assert levels == {
        "this member is leaving the group": "INFO",
        LEASE_RAN_OUT: "WARNING",
    }


def test_a_member_missing_from_the_outcome_rejoins_with_metadata_the_broker_sees_changed() -> None:
    # A static member that took its instance's place without a rebalance (KIP-345) gets the
    # outcome computed for its former member id. It rejoins to be counted; as a follower
    # whose metadata is unchanged the broker would hand back the same generation and
    # outcome, again and again (the simulator found such a storm, with nobody leading).
    # Its metadata names the member id it has, so the rejoin differs from the takeover join.
    a = Member()
    a.script_follow(Outcome("m-old", IDENTITY, 1, {"m-old": IDENTITY, "m-b": "http://b"}))
    a.script_follow(Outcome("m-b", "http://b", 2, {ME: IDENTITY, "m-b": "http://b"}))
    a.rebalance()
    assert any(r.startswith("the election's outcome predates") for r in a.rejoin_reasons())
    took_over_with, rejoined_with = a.advertised
    assert took_over_with.member_id == "" and rejoined_with.member_id == ME
    assert encode_candidate(rejoined_with) != encode_candidate(took_over_with)


def test_metrics_count_leaderships_and_name_the_token() -> None:
    a = Member()
    before = a.election.metrics()
    assert (before.is_leader, before.token, before.times_elected) == (False, None, 0)
    a.lead()
    leadership = a.election.leadership()
    assert leadership is not None
    led = a.election.metrics()
    assert (led.is_leader, led.token, led.times_elected) == (True, leadership.token, 1)
    assert (led.leader, led.leader_token) == (IDENTITY, leadership.token)
    assert led.highest_token >= leadership.token and led.leader_changes == 1
    a.clock.advance(LEASE_LOW_AFTER_S + 0.01)
    assert not a.election.is_leader
    lost = a.election.metrics()
    assert (lost.is_leader, lost.token, lost.times_deposed) == (False, None, 1)
    assert lost.member.rebalance_total >= 1
