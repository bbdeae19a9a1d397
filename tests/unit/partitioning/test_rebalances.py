"""ConsumerPartitioning's rebalances without a broker: a real engine on a scripted group.

Each test runs one member's engine on the test thread (as tests/unit/test_engine.py does)
over a ScriptedTransport, a ManualClock and an InMemoryTopicMetadata. The scripted
coordinator builds its JoinGroup answers from the member's own requests, so a leader
assigns from the subscription it really sent; the other members are subscriptions the
test writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from coordination import OffsetAndMetadata
from coordination._protocol.error_codes import ErrorCode as E
from coordination.clock import Event
from coordination.errors import CommitFailedError
from coordination.testing import ManualClock, ScriptedTransport
from coordination.testing import messages as m
from recipes.partitioning import (
    ConsumerPartitioning,
    CooperativeStickyAssignor,
    InMemoryTopicMetadata,
    PartitionAssignor,
    RangeAssignor,
    RebalanceListener,
    TopicPartition,
)
from recipes.partitioning.protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

T = "orders"
ME = "m-1"
NODE = m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)
HEARTBEAT_S = 3.0  # the default heartbeat_interval_ms


def tps(*partitions: int, topic: str = T) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in partitions)


class Calls(RebalanceListener):
    """Records each callback with the number of JoinGroups the member had sent by then."""

    def __init__(self, transport: ScriptedTransport) -> None:
        self.transport = transport
        self.calls: list[tuple[str, frozenset[TopicPartition], int]] = []

    def _record(self, kind: str, partitions: frozenset[TopicPartition]) -> None:
        joins = len(self.transport.requests(m.JoinGroupRequest))
        self.calls.append((kind, partitions, joins))

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._record("assigned", partitions)

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self._record("revoked", partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._record("lost", partitions)

    def kinds(self) -> list[tuple[str, frozenset[TopicPartition]]]:
        return [(kind, partitions) for kind, partitions, _ in self.calls]


class Harness:
    """One ConsumerPartitioning member whose rebalances the test scripts one by one."""

    def __init__(
        self,
        *assignors: PartitionAssignor,
        partitions: Mapping[str, int] | None = None,
        clock: ManualClock | None = None,
        **kw: Any,
    ) -> None:
        self.transport = ScriptedTransport()
        self.clock = clock or ManualClock()
        self.metadata = InMemoryTopicMetadata(partitions or {T: 6})
        self.listener = Calls(self.transport)
        if "pattern" not in kw:
            kw.setdefault("topics", [T])
        self.member = ConsumerPartitioning(
            "g",
            assignors=list(assignors),
            listener=self.listener,
            topic_metadata=self.metadata,
            transport=self.transport,
            clock=self.clock,
            bootstrap_servers="x:1",
            **kw,
        )
        self.engine = self.member._engine
        self.engine.resolve_protocol_type()
        self.transport.prepare(NODE)
        # Every assignment each SyncGroup of this member (as leader) carried.
        self.plans: list[dict[str, Assignment]] = []

    @property
    def protocol(self) -> str:
        return self.member._assignors[0].name

    def follow(self, generation: int, *partitions: int) -> None:
        """A rebalance in which another member leads and gives this one ``partitions``."""
        self.script_follow(generation, *partitions)
        self.join()

    def lead(self, generation: int, others: Mapping[str, Subscription] | None = None) -> None:
        """A rebalance this member leads, with the ``others`` subscribed as given."""
        self.script_lead(generation, others)
        self.join()

    def join(self) -> None:
        """Rejoin until stable, through the rebalances scripted so far."""
        assert self.engine.join_group_if_needed(deadline=None)
        assert self.transport.pending() == 0, "a scripted rebalance did not happen"

    def script_follow(self, generation: int, *partitions: int) -> None:
        self.transport.prepare(
            m.JoinGroupResponse(
                error_code=0,
                generation_id=generation,
                protocol_type="consumer",
                protocol_name=self.protocol,
                leader="m-0",
                member_id=ME,
            )
        )
        self.transport.prepare(
            m.SyncGroupResponse(
                error_code=0,
                protocol_type="consumer",
                protocol_name=self.protocol,
                assignment=encode_assignment(Assignment(tuple(sorted(tps(*partitions))))),
            )
        )

    def script_lead(
        self, generation: int, others: Mapping[str, Subscription] | None = None
    ) -> None:

        def joined(request: m.Request) -> m.JoinGroupResponse:
            assert isinstance(request, m.JoinGroupRequest)
            mine = dict(request.protocols)[self.protocol]
            members = [m.JoinGroupResponseMember(ME, None, mine)]
            members += [
                m.JoinGroupResponseMember(mid, None, encode_subscription(sub))
                for mid, sub in sorted((others or {}).items())
            ]
            return m.JoinGroupResponse(
                error_code=0,
                generation_id=generation,
                protocol_type="consumer",
                protocol_name=self.protocol,
                leader=ME,
                member_id=ME,
                members=tuple(members),
            )

        def synced(request: m.Request) -> m.SyncGroupResponse:
            assert isinstance(request, m.SyncGroupRequest)
            plan = {mid: decode_assignment(raw) for mid, raw in request.assignments}
            self.plans.append(plan)
            return m.SyncGroupResponse(
                error_code=0,
                protocol_type="consumer",
                protocol_name=self.protocol,
                assignment=encode_assignment(plan[ME]),
            )

        self.transport.prepare(joined, response_type=m.JoinGroupResponse)
        self.transport.prepare(synced, response_type=m.SyncGroupResponse)

    def heartbeat(self, code: int) -> None:
        """The next heartbeat, answered with ``code``."""
        self.clock.advance(HEARTBEAT_S)
        self.transport.prepare(m.HeartbeatResponse(error_code=code))
        self.engine.heartbeat_once()

    def last_join(self) -> m.JoinGroupRequest:
        join: m.JoinGroupRequest = self.transport.requests(m.JoinGroupRequest)[-1]
        return join

    def last_subscription(self) -> Subscription:
        return self.subscription(-1)

    def subscription(self, join: int) -> Subscription:
        """The subscription this member sent in its ``join``-th JoinGroup."""
        sent: m.JoinGroupRequest = self.transport.requests(m.JoinGroupRequest)[join]
        return decode_subscription(dict(sent.protocols)[self.protocol])

    def rejoin_pending(self) -> bool:
        return self.engine._rejoin_reason is not None


def owned_by(plan: Mapping[str, Assignment], member_id: str) -> frozenset[TopicPartition]:
    assignment = plan.get(member_id)
    return frozenset(assignment.partitions if assignment is not None else ())


# ------------------------------------------------------------------ EAGER


def test_eager_revokes_everything_before_it_rejoins_then_gets_its_new_assignment() -> None:
    h = Harness(RangeAssignor())
    h.follow(1, 0, 1, 2)
    h.heartbeat(E.REBALANCE_IN_PROGRESS)  # another member joins
    h.follow(2, 1, 2)

    assert h.listener.calls == [
        ("assigned", tps(0, 1, 2), 1),
        ("revoked", tps(0, 1, 2), 1),  # before the second JoinGroup was sent
        ("assigned", tps(1, 2), 2),  # everything it owns now, kept ones included
    ]
    # Nothing was owned any more when it rejoined, so nothing is claimed.
    assert h.last_subscription().owned_partitions == ()
    assert h.member.owned() == tps(1, 2)


def test_eager_leader_assigns_everything_it_revoked() -> None:
    h = Harness(RangeAssignor())
    h.lead(1)
    assert owned_by(h.plans[0], ME) == tps(0, 1, 2, 3, 4, 5)
    h.heartbeat(E.REBALANCE_IN_PROGRESS)
    h.lead(2, {"m-2": Subscription((T,))})
    assert owned_by(h.plans[1], ME) == tps(0, 1, 2)
    assert owned_by(h.plans[1], "m-2") == tps(3, 4, 5)  # at once: EAGER revoked them first
    assert h.listener.kinds() == [
        ("assigned", tps(0, 1, 2, 3, 4, 5)),
        ("revoked", tps(0, 1, 2, 3, 4, 5)),
        ("assigned", tps(0, 1, 2)),
    ]


# ------------------------------------------------------------------ COOPERATIVE


def test_cooperative_keeps_its_partitions_through_the_join_and_revokes_only_what_moved() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1, 2, 3)
    h.heartbeat(E.REBALANCE_IN_PROGRESS)
    h.script_follow(2, 0, 1)
    h.script_follow(3, 0, 1)
    h.join()

    assert h.listener.calls == [
        ("assigned", tps(0, 1, 2, 3), 1),
        ("revoked", tps(2, 3), 2),  # after the rebalance, not before the JoinGroup
        ("assigned", frozenset(), 2),
        ("assigned", frozenset(), 3),
    ]
    first, second, third = (h.subscription(i) for i in range(3))
    assert (first.owned_partitions, first.generation_id) == ((), -1)
    # The second JoinGroup still claimed everything, with the generation it came from...
    assert (frozenset(second.owned_partitions), second.generation_id) == (tps(0, 1, 2, 3), 1)
    # ...then it rejoined at once, claiming only what it kept, to hand the rest over.
    assert (frozenset(third.owned_partitions), third.generation_id) == (tps(0, 1), 2)
    assert "revoked" in (h.last_join().reason or "")
    assert h.member.owned() == tps(0, 1)


def test_cooperative_partitions_revoked_in_one_generation_are_assigned_only_in_the_next() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.lead(1)
    assert h.member.owned() == tps(0, 1, 2, 3, 4, 5)

    # m-2 joins: the leader's plan moves half of the partitions, but withholds them from
    # m-2 while this member still owns them. Having revoked them, this member rejoins at
    # once, and m-2 gets them in the next generation.
    h.heartbeat(E.REBALANCE_IN_PROGRESS)
    h.script_lead(2, {"m-2": Subscription((T,), generation_id=-1)})
    h.script_lead(3, {"m-2": Subscription((T,), generation_id=-1)})
    h.join()
    kept = owned_by(h.plans[1], ME)
    assert len(kept) == 3
    assert owned_by(h.plans[1], "m-2") == frozenset()
    moved = tps(0, 1, 2, 3, 4, 5) - kept
    assert h.listener.calls[1:] == [
        ("revoked", moved, 2),
        ("assigned", frozenset(), 2),
        ("assigned", frozenset(), 3),
    ]
    assert owned_by(h.plans[2], "m-2") == moved
    assert owned_by(h.plans[2], ME) == kept
    assert h.member.owned() == kept
    # No partition was ever in two members' assignments of one generation.
    for plan in h.plans:
        assert not (owned_by(plan, ME) & owned_by(plan, "m-2"))


# ------------------------------------------------------------------ a lost generation


@pytest.mark.parametrize("assignor", [RangeAssignor(), CooperativeStickyAssignor()])
@pytest.mark.parametrize("code", [E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID])
def test_a_fenced_member_loses_its_partitions_without_revoking_them(
    assignor: PartitionAssignor, code: int
) -> None:
    h = Harness(assignor)
    h.follow(1, 0, 1)
    h.heartbeat(code)  # the group moved on without this member
    assert h.member.generation().generation_id == -1
    h.follow(2, 4, 5)

    assert h.listener.kinds() == [
        ("assigned", tps(0, 1)),
        ("lost", tps(0, 1)),  # they may be another member's already: lost, not revoked
        ("assigned", tps(4, 5)),
    ]
    # It rejoined claiming nothing, and (for ILLEGAL_GENERATION) under its member id.
    sub = h.last_subscription()
    assert (sub.owned_partitions, sub.generation_id) == ((), -1)
    expected_id = ME if code == E.ILLEGAL_GENERATION else ""
    assert h.last_join().member_id == expected_id


def test_a_member_closing_after_it_was_fenced_loses_rather_than_revokes() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1)
    h.heartbeat(E.ILLEGAL_GENERATION)
    h.member.close(1.0)
    assert h.listener.kinds()[-1] == ("lost", tps(0, 1))
    assert h.transport.requests(m.LeaveGroupRequest) == []  # no generation, no LeaveGroup


def test_a_member_closing_revokes_before_it_leaves() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1)
    left: list[int] = []

    def leave(request: m.Request) -> m.LeaveGroupResponse:
        left.append(len(h.listener.calls))
        return m.LeaveGroupResponse(error_code=0)

    h.transport.prepare(leave, response_type=m.LeaveGroupResponse)
    h.member.close(1.0)
    assert h.listener.kinds()[-1] == ("revoked", tps(0, 1))
    assert left == [2]  # LeaveGroup was sent after the revocation


# ------------------------------------------------------------------ commits


def committed_ok(request: m.Request) -> m.OffsetCommitResponse:
    assert isinstance(request, m.OffsetCommitRequest)
    return m.OffsetCommitResponse(partitions=tuple((t, p, 0) for t, p, _, _ in request.offsets))


def refused(code: int) -> Callable[[m.Request], m.OffsetCommitResponse]:
    def answer(request: m.Request) -> m.OffsetCommitResponse:
        assert isinstance(request, m.OffsetCommitRequest)
        return m.OffsetCommitResponse(
            partitions=tuple((t, p, code) for t, p, _, _ in request.offsets)
        )

    return answer


def test_commits_carry_the_member_id_and_generation() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(4, 0, 1)
    h.transport.prepare(committed_ok, response_type=m.OffsetCommitResponse)
    h.member.commit_offsets({(T, 0): OffsetAndMetadata(10, "batch-7")})
    (commit,) = h.transport.requests(m.OffsetCommitRequest)
    assert (commit.generation_id, commit.member_id) == (4, ME)
    assert commit.offsets == ((T, 0, 10, "batch-7"),)


def test_a_commit_for_a_generation_the_group_left_behind_is_refused() -> None:
    # Records processed under generation 1 are committed after a rebalance made it 2: the
    # broker refuses (the partitions may have moved), and the member does not reset, since
    # its current generation is fine.
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1)
    processed_in = h.member.generation()
    h.heartbeat(E.REBALANCE_IN_PROGRESS)
    h.follow(2, 0, 1)
    h.transport.prepare(refused(E.ILLEGAL_GENERATION), response_type=m.OffsetCommitResponse)
    with pytest.raises(CommitFailedError):
        h.member.commit_offsets({(T, 0): OffsetAndMetadata(10)}, generation=processed_in)
    (commit,) = h.transport.requests(m.OffsetCommitRequest)
    assert commit.generation_id == 1
    assert h.member.generation().generation_id == 2
    assert h.member.owned() == tps(0, 1)


def test_a_fenced_commit_makes_the_member_lose_its_partitions_and_rejoin() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1)
    h.transport.prepare(refused(E.ILLEGAL_GENERATION), response_type=m.OffsetCommitResponse)
    with pytest.raises(CommitFailedError):
        h.member.commit_offsets({(T, 0): OffsetAndMetadata(10)})
    assert h.member.generation().generation_id == -1
    assert h.rejoin_pending()
    h.follow(2, 1)
    assert h.listener.kinds()[1:] == [("lost", tps(0, 1)), ("assigned", tps(1))]


def test_no_commit_is_sent_without_a_generation() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1)
    h.heartbeat(E.ILLEGAL_GENERATION)
    with pytest.raises(CommitFailedError, match="not sent"):
        h.member.commit_offsets({(T, 0): OffsetAndMetadata(10)})
    assert h.transport.requests(m.OffsetCommitRequest) == []


# ------------------------------------------------------------------ topic metadata


def test_a_partition_count_change_makes_the_leader_rejoin_and_assign_the_new_partitions() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.lead(1)
    h.member._check_metadata()
    assert not h.rejoin_pending()  # nothing changed

    h.metadata.set_partitions(T, 8)
    h.member._check_metadata()
    assert h.rejoin_pending()
    h.lead(2)
    assert "partition count changed for ['orders']" in (h.last_join().reason or "")
    assert owned_by(h.plans[1], ME) == tps(*range(8))
    assert h.listener.kinds()[-1] == ("assigned", tps(6, 7))


def test_a_follower_leaves_partition_counts_to_the_leader() -> None:
    h = Harness(CooperativeStickyAssignor())
    h.follow(1, 0, 1)
    h.metadata.set_partitions(T, 8)
    h.member._check_metadata()
    assert not h.rejoin_pending()


def test_a_pattern_member_rejoins_when_the_matching_topics_change() -> None:
    h = Harness(CooperativeStickyAssignor(), pattern=r"orders(-.*)?", partitions={T: 2, "x": 1})
    h.lead(1)
    assert h.last_subscription().topics == (T,)
    assert h.member.owned() == tps(0, 1)

    h.metadata.set_partitions("orders-eu", 2)
    h.member._check_metadata()
    assert h.rejoin_pending()
    h.lead(2)
    assert "subscribed topics changed (+['orders-eu'] -[])" in (h.last_join().reason or "")
    assert h.last_subscription().topics == (T, "orders-eu")
    assert h.listener.kinds()[-1] == ("assigned", tps(0, 1, topic="orders-eu"))

    # A deleted topic: its partitions are revoked before the JoinGroup, not claimed in it.
    h.metadata.delete_topic(T)
    h.member._check_metadata()
    h.lead(3)
    assert "-['orders']" in (h.last_join().reason or "")
    assert h.last_subscription().topics == ("orders-eu",)
    assert h.last_subscription().owned_partitions == tuple(sorted(tps(0, 1, topic="orders-eu")))
    assert ("revoked", tps(0, 1), 2) in h.listener.calls
    assert not h.rejoin_pending()  # nothing left to hand over after the assignment
    assert h.member.owned() == tps(0, 1, topic="orders-eu")


def test_changing_the_subscription_rejoins_and_revokes_the_unsubscribed() -> None:
    h = Harness(CooperativeStickyAssignor(), partitions={T: 2, "payments": 2})
    h.lead(1)
    h.member.subscribe(topics=["payments"])
    assert h.rejoin_pending()
    h.lead(2)
    assert h.last_join().reason == "subscription changed"
    # Cooperative: what is no longer subscribed is revoked before the JoinGroup.
    assert ("revoked", tps(0, 1), 1) in h.listener.calls
    assert h.member.owned() == tps(0, 1, topic="payments")


class _SteppedEvent:
    """An event whose timed waits move the manual clock on instead of waiting."""

    def __init__(self, clock: SteppedClock) -> None:
        self._clock = clock
        self._set = False

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None, "an untimed wait would block the test thread"
        self._clock.waits.append(timeout)
        if len(self._clock.waits) >= self._clock.max_waits:
            self._set = True
        if not self._set:
            self._clock.now += timeout
        return self._set


class _DeferredThread:
    def __init__(self, target: Callable[[], object], name: str) -> None:
        self.target, self._name = target, name

    @property
    def name(self) -> str:
        return self._name

    def start(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> None:
        pass

    def is_alive(self) -> bool:
        return False


class SteppedClock(ManualClock):
    """A manual clock whose threads the test runs itself, and whose events step time."""

    def __init__(self, max_waits: int) -> None:
        super().__init__()
        self.max_waits = max_waits
        self.waits: list[float] = []
        self.threads: dict[str, _DeferredThread] = {}

    def event(self) -> Event:
        return _SteppedEvent(self)

    def thread(self, target: Callable[[], object], name: str) -> _DeferredThread:
        made = self.threads[name] = _DeferredThread(target, name)
        return made


def test_the_metadata_watcher_is_a_clock_thread_that_waits_on_the_clock() -> None:
    clock = SteppedClock(max_waits=3)
    h = Harness(CooperativeStickyAssignor(), clock=clock, metadata_max_age_ms=60_000)
    h.lead(1)
    h.member.start()  # makes its threads from the clock; this one runs them itself
    watcher = clock.threads["partitioning-metadata|g"]
    assert {"coordination-member|g", "coordination-heartbeat|g"} <= set(clock.threads)

    h.metadata.set_partitions(T, 7)
    start = clock.now
    watcher.target()  # looks twice, 60 s apart on the clock, then is stopped
    assert clock.waits == [60.0, 60.0, 60.0]
    assert clock.now == start + 120.0
    assert h.rejoin_pending()
    assert "partition count changed" in h.engine.metrics().rejoin_reasons[-1]


def leading_a_hand_over() -> tuple[Harness, SteppedClock]:
    """A cooperative leader of generation 1 whose plan withholds what m-2 (which claims every
    partition) must hand over to m-3."""
    clock = SteppedClock(max_waits=100)
    h = Harness(
        CooperativeStickyAssignor(),
        clock=clock,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    claims_all = Subscription((T,), owned_partitions=tuple(sorted(tps(*range(6)))), generation_id=0)
    h.lead(1, {"m-2": claims_all, "m-3": Subscription((T,), generation_id=-1)})
    return h, clock


def test_a_leader_rejoins_when_partitions_it_withheld_for_a_hand_over_stay_withheld() -> None:
    # The leader withholds the partitions m-2 must hand over; m-2 is then replaced by a
    # static restart whose new process owns nothing, revokes nothing and never rejoins.
    # After a session timeout in the same generation, the leader rejoins so the group
    # assigns them (the simulator's seed 1484 of the consumer recipe: partition 4 unowned).
    h, clock = leading_a_hand_over()
    withheld = tps(*range(6)) - {tp for a in h.plans[0].values() for tp in a.partitions}
    assert withheld, "the plan withholds what m-2 must revoke first"
    check = clock.threads["partitioning-handover|g"]
    start = clock.now
    check.target()
    assert clock.now == start + 6.0
    assert h.rejoin_pending()
    assert (
        "withheld in generation 1 for a cooperative hand-over"
        in (h.engine.metrics().rejoin_reasons[-1])
    )


def test_a_hand_over_completed_by_a_rebalance_needs_no_rejoin_from_the_leader() -> None:
    h, clock = leading_a_hand_over()
    check = clock.threads["partitioning-handover|g"]
    h.heartbeat(E.REBALANCE_IN_PROGRESS)  # m-2 revoked and rejoined
    h.lead(2)  # the next generation assigned the rest
    check.target()
    assert not h.rejoin_pending()


def taking_over_as_static_leader(
    stored: Mapping[str, frozenset[TopicPartition]],
) -> tuple[Harness, list[m.DescribedMember]]:
    """A static member's new process that takes its instance's place as leader of a stable
    generation 5 without a rebalance: the broker tells it to skip the assignment (KIP-814)
    and hands it its predecessor's, ``stored[ME]``. ``stored``: the assignment the broker
    keeps, by member (m-2 subscribes to the same topic). Returns the member and the members
    as DescribeGroups describes them in the stable group."""
    clock = SteppedClock(max_waits=100)
    h = Harness(
        CooperativeStickyAssignor(),
        clock=clock,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        group_instance_id="instance-1",
    )
    other = encode_subscription(Subscription((T,), generation_id=4))

    def joined(request: m.Request) -> m.JoinGroupResponse:
        assert isinstance(request, m.JoinGroupRequest)
        mine = dict(request.protocols)[h.protocol]
        return m.JoinGroupResponse(
            error_code=0,
            generation_id=5,
            protocol_type="consumer",
            protocol_name=h.protocol,
            leader=ME,
            skip_assignment=True,
            member_id=ME,
            members=(
                m.JoinGroupResponseMember(ME, "instance-1", mine),
                m.JoinGroupResponseMember("m-2", None, other),
            ),
        )

    def assignment(member_id: str) -> bytes:
        return encode_assignment(Assignment(tuple(sorted(stored.get(member_id, ())))))

    h.transport.prepare(joined, response_type=m.JoinGroupResponse)
    h.transport.prepare(
        m.SyncGroupResponse(
            error_code=0,
            protocol_type="consumer",
            protocol_name=h.protocol,
            assignment=assignment(ME),
        )
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert not h.transport.requests(m.SyncGroupRequest)[0].assignments, "it must not assign"
    members = [
        m.DescribedMember(mid, None, "c", "/h", md, assignment(mid))
        for mid, md in ((ME, h.last_join().protocols[0][1]), ("m-2", other))
    ]
    return h, members


def handover_check(h: Harness) -> Any:
    """The timer thread a leader starts to see that its generation's plan was carried out."""
    assert isinstance(h.clock, SteppedClock)
    return h.clock.threads["partitioning-handover|g"]


def described(
    h: Harness, members: list[m.DescribedMember], state: str = "Stable"
) -> m.DescribeGroupResponse:
    return m.DescribeGroupResponse(0, state, "consumer", h.protocol, tuple(members))


def test_a_static_leader_that_took_over_a_plan_rejoins_if_it_left_partitions_unowned() -> None:
    # Its predecessor withheld partition 2 from itself to hand it to m-2, then was replaced
    # before its follow-up rejoin: nobody owns 2 and nobody rejoins (the simulator's
    # consumer seeds 8000158 and 8000424). A session timeout later, the new process asks
    # the coordinator for the assignment it took over, finds 2 unowned, and rejoins.
    h, stored = taking_over_as_static_leader({ME: tps(0, 1), "m-2": tps(3, 4, 5)})
    assert h.member.owned() == tps(0, 1)
    check = handover_check(h)
    h.transport.prepare(described(h, stored))
    start = h.clock.now
    check.target()
    assert h.clock.now == start + 6.0
    assert h.transport.requests(m.DescribeGroupRequest) == [m.DescribeGroupRequest("g")]
    assert h.rejoin_pending()
    assert (
        "1 partitions are assigned to nobody in generation 5"
        in (h.engine.metrics().rejoin_reasons[-1])
    )


def test_a_static_leader_that_took_over_a_complete_plan_does_not_rejoin() -> None:
    h, stored = taking_over_as_static_leader({ME: tps(0, 1, 2), "m-2": tps(3, 4, 5)})
    check = handover_check(h)
    h.transport.prepare(described(h, stored))
    check.target()
    assert len(h.transport.requests(m.DescribeGroupRequest)) == 1
    assert not h.rejoin_pending()


def test_a_static_leader_that_took_over_leaves_a_rebalance_under_way_to_assign() -> None:
    h, stored = taking_over_as_static_leader({ME: tps(0, 1), "m-2": tps(3, 4, 5)})
    check = handover_check(h)
    # Members of a group that is not Stable come without metadata (Kafka 3 also without
    # assignment; Kafka 4 sends the last one, which the check must not trust).
    bare = [m.DescribedMember(x.member_id, None, "c", "/h", b"", x.assignment) for x in stored]
    h.transport.prepare(described(h, bare, "PreparingRebalance"))
    check.target()
    assert not h.rejoin_pending()


def test_a_member_whose_stored_assignment_cannot_be_read_is_no_evidence_of_an_unowned_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # m-3's assignment (partition 2, say, in a format this client cannot read) does not
    # decode: it may own partition 2, so the leader must not rebalance the group for it.
    h, stored = taking_over_as_static_leader({ME: tps(0, 1), "m-2": tps(3, 4, 5)})
    unreadable = m.DescribedMember("m-3", None, "c", "/h", stored[1].metadata, b"\x00\x09??")
    h.transport.prepare(described(h, [*stored, unreadable]))
    with caplog.at_level("WARNING", logger="recipes.partitioning"):
        handover_check(h).target()
    assert len(h.transport.requests(m.DescribeGroupRequest)) == 1
    assert not h.rejoin_pending()
    assert "the assignment of member m-3 cannot be read" in caplog.text


def test_a_member_the_stored_plan_left_out_owns_nothing() -> None:
    # The broker stores an empty assignment for a member the leader's SyncGroup omitted:
    # that is "nothing", not "unreadable", so partition 2 is still found unowned.
    h, stored = taking_over_as_static_leader({ME: tps(0, 1), "m-2": tps(3, 4, 5)})
    left_out = m.DescribedMember("m-3", None, "c", "/h", stored[1].metadata, b"")
    h.transport.prepare(described(h, [*stored, left_out]))
    handover_check(h).target()
    assert h.rejoin_pending()
    assert "1 partitions are assigned to nobody" in h.engine.metrics().rejoin_reasons[-1]


def test_a_static_leader_that_cannot_read_the_plan_it_took_over_rejoins() -> None:
    h, _ = taking_over_as_static_leader({ME: tps(0, 1, 2), "m-2": tps(3, 4, 5)})
    check = handover_check(h)
    h.transport.prepare(m.DescribeGroupResponse(E.GROUP_AUTHORIZATION_FAILED))
    check.target()
    assert h.rejoin_pending()
    assert (
        "cannot read the assignment this leader took over"
        in (h.engine.metrics().rejoin_reasons[-1])
    )


def test_a_static_leader_that_cannot_count_the_partitions_it_took_over_rejoins() -> None:
    h, stored = taking_over_as_static_leader({ME: tps(0, 1, 2), "m-2": tps(3, 4, 5)})
    check = handover_check(h)
    h.transport.prepare(described(h, stored))

    def unreachable(topics: Any) -> dict[str, int]:
        raise OSError("metadata unreachable")

    h.metadata.partition_counts = unreachable  # type: ignore[method-assign]
    check.target()  # runs on the timer's thread: nothing may escape it
    assert h.rejoin_pending()
    assert "metadata unreachable" in h.engine.metrics().rejoin_reasons[-1]


def test_a_leader_that_planned_never_asks_the_coordinator_for_its_plan() -> None:
    h, clock = leading_a_hand_over()
    check = clock.threads["partitioning-handover|g"]
    check.target()  # an unscripted DescribeGroups would fail the test here
    assert h.rejoin_pending()
    assert not h.transport.requests(m.DescribeGroupRequest)
