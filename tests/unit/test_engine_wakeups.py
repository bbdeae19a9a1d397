"""The engine's side of the wake-up channel: who announces, and what a woken member does.

Driven step by step like tests/unit/test_engine.py (scripted transport, manual clock); the
channel is a recorder. tests/integration/test_wakeups.py runs the real channel on a broker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from coordination import MemberState
from coordination._config import CoordinatorConfig
from coordination._engine.membership import GroupMembership
from coordination._protocol.error_codes import ErrorCode as E
from coordination._transport.base import Wake
from coordination._transport.wakeups import KafkaWakeups, _SharedListener
from coordination.testing import messages as m

from .test_engine import GROUP, NODE, Harness, joined


@dataclass
class Departure:
    """Stands for the prepared departure the channel offers to ride with the LeaveGroup."""

    member_id: str
    generation: int
    leads: bool = False
    broker_id: int = 1

    def request(self) -> Any:
        return None

    def answered(self, response: Any) -> None:
        pass


class RecordedWakeups:
    """A channel that records what the engine asks of it."""

    def __init__(self) -> None:
        self.announced: list[tuple[str, str]] = []
        self.departures: list[Departure] = []
        self.generations: list[int | None] = []
        self.timeouts: list[float | None] = []
        self.flushed: list[float] = []
        self.rebalances: list[Mapping[str, Any]] = []
        self.wake: Wake | None = None
        self.rebalancing_found: list[int] = []
        self.closed = False

    def start(self, wake: Wake, sibling_found: Callable[[int], None]) -> None:
        self.wake = wake

    def rebalancing(self, generation: int) -> None:
        self.rebalancing_found.append(generation)

    def departure(self, member_id: str, generation: int) -> Any:
        self.departures.append(Departure(member_id, generation))
        return self.departures[-1]

    def announce(
        self,
        member_id: str,
        event: str,
        generation: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> None:
        self.announced.append((member_id, event))
        self.generations.append(generation)
        self.timeouts.append(timeout_s)

    def flush(self, timeout_s: float) -> None:
        self.flushed.append(timeout_s)

    def record_rebalance(self, entry: Mapping[str, Any]) -> None:
        self.rebalances.append(entry)

    def close(self, timeout_s: float) -> None:
        self.closed = True


class WakeupHarness(Harness):
    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.wakeups = RecordedWakeups()
        config = CoordinatorConfig.from_settings(GROUP, {"bootstrap_servers": "x:1", **settings})
        self.engine = GroupMembership(self.member, config, self.transport, self.clock, self.wakeups)
        self.engine.resolve_protocol_type()


def stable(**settings: Any) -> WakeupHarness:
    h = WakeupHarness(heartbeat_interval_ms=3000, **settings)
    h.join_as_leader()
    return h


def heartbeats(h: WakeupHarness) -> int:
    return len(h.transport.requests(m.HeartbeatRequest))


# ------------------------------------------------------------------------- announcing


def test_a_new_member_announces_the_join_that_carries_its_member_id() -> None:
    h = stable()
    # The first JoinGroup (no member id) only gets an id; the second can start a rebalance.
    assert h.wakeups.announced == [("m-1", "join")]


def test_a_static_member_announces_its_first_join() -> None:
    h = WakeupHarness(group_instance_id="w-1")
    h.prepare(
        NODE,
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.wakeups.announced == [("w-1", "join")]


def test_a_rejoin_of_its_own_accord_announces_again() -> None:
    h = stable()
    h.engine.request_rejoin("the metadata changed")
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.wakeups.announced == [("m-1", "join"), ("m-1", "join")]


def test_a_member_told_of_a_rebalance_rejoins_without_waking_anyone() -> None:
    # Every member answering a rebalance would otherwise wake every other one.
    h = stable()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.wakeups.announced == [("m-1", "join")]  # the first join only
    # Once stable again, a rejoin of its own accord announces as before.
    h.engine.request_rejoin("the metadata changed")
    h.prepare(
        joined("m-1", 3, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.wakeups.announced[-1] == ("m-1", "join") and len(h.wakeups.announced) == 2


def test_a_told_rejoin_that_lost_its_member_id_announces_its_new_join() -> None:
    # Told of a rebalance, the member answers it quietly; but its JoinGroup is answered
    # UNKNOWN_MEMBER_ID (the broker removed it meanwhile): it joins as a new member, which
    # starts a rebalance of its own that the others must hear of.
    h = stable()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    h.prepare(
        m.JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID),
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-5"),
        joined("m-5", 3, leader="m-5"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.wakeups.announced == [("m-1", "join"), ("m-5", "join")]


def test_a_sync_answered_rebalance_in_progress_rejoins_without_waking_anyone() -> None:
    h = stable()
    h.engine.request_rejoin("the metadata changed")
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS),
        joined("m-1", 3, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.wakeups.announced == [("m-1", "join"), ("m-1", "join")]


def test_leaving_announces_and_waits_for_the_announcement_before_closing() -> None:
    h = stable()
    h.prepare(m.LeaveGroupResponse(error_code=0))
    h.engine.close(timeout_s=5)
    assert h.wakeups.announced[-1] == ("m-1", "leave")
    assert h.wakeups.generations[-1] == 1  # the generation it left, for the others
    # Sent from the closing thread at once, within the time close() allows for it.
    timeout_s = h.wakeups.timeouts[-1]
    assert timeout_s is not None and 0 < timeout_s <= 1.0
    assert h.wakeups.flushed and 0 < h.wakeups.flushed[0] <= 1.0
    assert h.wakeups.closed


def test_a_leaving_members_departure_is_offered_to_ride_behind_its_leave_group() -> None:
    # Where the coordinator leads the wake-up partition, the transport sends it right
    # behind the LeaveGroup on the same connection (the broker handles them in order).
    h = stable()
    h.prepare(m.LeaveGroupResponse(error_code=0))
    h.engine.close(timeout_s=5)
    (leave,) = [s for s in h.transport.sent if isinstance(s.request, m.LeaveGroupRequest)]
    assert h.wakeups.departures == [Departure("m-1", 1)]
    assert leave.then is h.wakeups.departures[0]
    assert not h.wakeups.departures[0].leads  # behind: a rejoin may not start a rebalance
    assert h.wakeups.announced[-1] == ("m-1", "leave")  # sent there unless it rode along


def test_a_departure_goes_ahead_of_the_leave_group_where_every_rejoin_rebalances() -> None:
    h = stable()
    h.member.rejoin_changes_metadata = True
    h.prepare(m.LeaveGroupResponse(error_code=0))
    h.engine.close(timeout_s=5)
    (leave,) = [s for s in h.transport.sent if isinstance(s.request, m.LeaveGroupRequest)]
    assert leave.then is h.wakeups.departures[0] and h.wakeups.departures[0].leads


@pytest.mark.parametrize(
    "refusal", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS]
)
def test_a_leave_group_refused_by_a_moved_coordinator_is_sent_again_where_the_group_is(
    refusal: int,
) -> None:
    # The departure that rode along already made the others rejoin: were this member to
    # stay in the group until its session ended, their JoinGroups would wait for it that
    # long (a sitting leader's lease running out meanwhile).
    h = stable()
    moved = m.FindCoordinatorResponse(error_code=0, node_id=2, host="127.0.0.2", port=9092)
    h.prepare(m.LeaveGroupResponse(error_code=refusal))
    if refusal != E.COORDINATOR_LOAD_IN_PROGRESS:
        h.prepare(moved)
    h.prepare(m.LeaveGroupResponse(error_code=0))
    h.engine.close(timeout_s=5)
    first, second = [s for s in h.transport.sent if isinstance(s.request, m.LeaveGroupRequest)]
    assert first.then is h.wakeups.departures[0] and second.then is None  # sent once
    assert isinstance(second.request, m.LeaveGroupRequest)
    assert second.request.member_id == "m-1"
    assert second.coordinator is not None
    assert second.coordinator.node_id == (1 if refusal == E.COORDINATOR_LOAD_IN_PROGRESS else 2)
    assert h.wakeups.announced[-1] == ("m-1", "leave")


def test_a_leave_group_refused_until_the_close_deadline_is_given_up() -> None:
    h = stable()
    for _ in range(100):
        h.prepare(m.LeaveGroupResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS))
    closing_at = h.clock.monotonic()
    h.engine.close(timeout_s=2)
    assert h.clock.monotonic() - closing_at <= 2.0  # within the time close() allows
    assert len(h.transport.requests(m.LeaveGroupRequest)) > 1
    assert ("m-1", "leave") not in h.wakeups.announced


def test_a_static_member_closing_announces_nothing() -> None:
    # It stays in the group for its session: nothing changes for the others yet.
    h = stable(group_instance_id="w-1")
    h.engine.close(timeout_s=5)
    assert ("w-1", "leave") not in h.wakeups.announced and h.wakeups.closed


# ------------------------------------------------------------------------- being woken


def test_a_woken_stable_member_heartbeats_at_once() -> None:
    h = stable()
    h.clock.advance(0.5)
    assert h.engine.heartbeat_once() == pytest.approx(2.5)  # not due for 2.5 s
    h.engine.wake("member m-2 announced: leave")
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert heartbeats(h) == 1
    assert h.engine._rejoin_reason == "group is already rebalancing"
    assert h.engine.metrics().wakeups_received == 1


def test_a_departure_from_its_own_generation_makes_a_member_rejoin_without_asking() -> None:
    # The broker accepted the LeaveGroup before it was announced, and rebalances whenever a
    # member leaves: the heartbeat that would say so is a round trip saved.
    h = stable()
    h.engine.wake("member m-2 announced: leave", 1)
    assert h.engine._rejoin_reason == "member m-2 announced: leave; the group is rebalancing"
    assert h.engine.heartbeat_once() is not None and heartbeats(h) == 0
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.generation.generation_id == 2
    # It answers a rebalance under way: it wakes nobody.
    assert h.wakeups.announced == [("m-1", "join")]


def test_a_departure_that_overtook_its_leave_group_makes_the_member_ask_until_it_shows() -> None:
    # Announced ahead of the LeaveGroup, it can reach a member whose rejoin then reaches the
    # broker first: a follower rejoining unchanged gets its own generation back at once.
    h = WakeupHarness(heartbeat_interval_ms=3000)
    h.join_as_follower(generation=1)
    h.engine.wake("member m-1 announced: leave", 1)
    h.prepare(
        joined("m-2", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.generation.generation_id == 1  # the broker had not begun the rebalance
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    assert h.engine.heartbeat_once() is not None  # asks now, not 3 s later
    assert heartbeats(h) == 1
    assert h.engine._rejoin_reason == "group is already rebalancing"


def test_a_departure_answered_by_a_new_generation_needs_no_more_asking() -> None:
    h = WakeupHarness(heartbeat_interval_ms=3000)
    h.join_as_follower(generation=1)
    h.engine.wake("member m-1 announced: leave", 1)
    h.prepare(
        joined("m-2", 2, leader="m-3"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2", assignment=b""),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.engine.generation.generation_id == 2
    assert h.engine.heartbeat_once() == pytest.approx(3.0)  # the next is a whole interval away
    assert heartbeats(h) == 0


@pytest.mark.parametrize("left", [0, 2], ids=["older", "newer"])
def test_a_departure_from_another_generation_only_makes_a_member_ask(left: int) -> None:
    # Older: that rebalance is over. Newer: this member may be out already; a heartbeat
    # tells which, and a stray announcement never makes it rejoin.
    h = stable()
    h.engine.wake("member m-2 announced: leave", left)
    assert h.engine._rejoin_reason is None
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert heartbeats(h) == 1 and h.engine._rejoin_reason is None


def test_a_woken_member_that_finds_no_rebalance_heartbeats_thrice_more_then_rests() -> None:
    # The announcement can overtake the change it announces.
    h = stable()
    h.clock.advance(0.5)
    h.engine.wake("member m-2 announced: join")
    h.prepare(*[m.HeartbeatResponse(error_code=0)] * 10)
    sent_at = []
    for _ in range(50):
        before = heartbeats(h)
        delay = h.engine.heartbeat_once()
        if heartbeats(h) > before:
            sent_at.append(round(h.clock.monotonic() - 1000.5, 3))
        assert delay is not None
        h.clock.advance(delay)
        if h.clock.monotonic() - 1000.5 > 4:
            break
    # At once, +10 ms, +50 ms, +250 ms; then the regular interval from the last one.
    assert sent_at[:4] == [0.0, 0.01, 0.05, 0.25]
    assert sent_at[4] == pytest.approx(3.25)


def test_a_woken_member_that_finds_the_rebalance_stops_the_extra_heartbeats() -> None:
    h = stable()
    h.engine.wake("member m-2 announced: join")
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert h.engine._wake_at == []


def test_a_member_that_is_not_stable_ignores_wakeups() -> None:
    h = stable()
    h.engine._state = MemberState.PREPARING_REBALANCE
    h.engine.wake("member m-2 announced: join")
    assert h.engine._wake_at == [] and h.engine.metrics().wakeups_received == 0


def test_a_wakeup_during_a_heartbeat_in_flight_waits_for_its_answer() -> None:
    h = stable()
    h.clock.advance(3)
    h.engine._timers.sent(h.clock.monotonic())  # one in flight
    h.engine.wake("member m-2 announced: leave")
    before = heartbeats(h)
    delay = h.engine.heartbeat_once()
    assert heartbeats(h) == before and delay is not None


# ------------------------------------------------------------------------- siblings in one process


def heartbeat_times(h: WakeupHarness, start: float, until_s: float) -> list[float]:
    """When ``h`` sends heartbeats (seconds after ``start``), driven by the delays it asks for."""
    sent_at = []
    while h.clock.monotonic() - start <= until_s:
        before = heartbeats(h)
        delay = h.engine.heartbeat_once()
        if heartbeats(h) > before:
            sent_at.append(round(h.clock.monotonic() - start, 3))
        assert delay is not None
        h.clock.advance(max(delay, 0.001))
    return sent_at


def test_the_first_member_a_wakeup_reaches_asks_at_once_for_its_generation() -> None:
    h = stable()
    probed: set[int] = set()
    h.engine.wake("member m-2 announced: join", probed=probed)
    assert probed == {1}
    h.prepare(*[m.HeartbeatResponse(error_code=0)] * 5)
    assert heartbeat_times(h, h.clock.monotonic(), 0.3)[:2] == [0.0, 0.01]


def test_a_member_whose_sibling_asks_for_its_generation_waits_for_the_answer() -> None:
    # The sibling's answer (see below) makes it rejoin; it asks itself only in case that
    # answer never comes: one heartbeat per wake-up for a process's members, not one each.
    h = stable()
    h.engine.wake("member m-2 announced: join", probed={1})
    h.prepare(*[m.HeartbeatResponse(error_code=0)] * 5)
    assert heartbeat_times(h, h.clock.monotonic(), 0.35) == [0.1, 0.3]


def test_a_member_of_a_generation_nobody_asks_about_asks_itself() -> None:
    h = stable()
    probed = {7}  # a sibling in another generation: its answer says nothing of this one's
    h.engine.wake("member m-2 announced: join", probed=probed)
    assert probed == {1, 7}
    h.prepare(m.HeartbeatResponse(error_code=0))
    assert heartbeat_times(h, h.clock.monotonic(), 0.0) == [0.0]


def test_a_heartbeat_that_finds_the_rebalance_tells_the_siblings() -> None:
    h = stable()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert h.wakeups.rebalancing_found == []  # nothing to tell
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert h.wakeups.rebalancing_found == [1]


def test_a_heartbeat_of_a_generation_already_left_tells_nobody() -> None:
    h = stable()
    h.clock.advance(3)
    h.engine.request_rejoin("the metadata changed")
    h.engine._state = MemberState.PREPARING_REBALANCE  # its JoinGroup is on the way
    h.engine._timers.sent(h.clock.monotonic())
    coordinator = h.engine._coordinator
    assert coordinator is not None
    h.engine._on_heartbeat_response(
        E.REBALANCE_IN_PROGRESS, h.engine.generation, coordinator, sent_at=h.clock.monotonic()
    )
    assert h.wakeups.rebalancing_found == []


@pytest.mark.parametrize("generation", [0, 2], ids=["older", "newer"])
def test_a_siblings_answer_for_another_generation_changes_nothing(generation: int) -> None:
    h = stable()
    h.engine.sibling_found_rebalance(generation)
    assert h.engine._rejoin_reason is None


def test_a_member_not_stable_ignores_its_siblings_answer() -> None:
    h = stable()
    h.engine._state = MemberState.PREPARING_REBALANCE
    h.engine.sibling_found_rebalance(1)
    assert h.engine._rejoin_reason is None


def test_members_sharing_a_listener_send_one_heartbeat_per_wakeup_and_all_rejoin() -> None:
    # The real listener and channels, two engines: a read wakes both, the first asks, and
    # its answer makes the second rejoin without a heartbeat of its own.
    harnesses = [stable(), stable()]
    listener = _SharedListener(("g", "topic", "settings"), "g")
    for h in harnesses:
        channel = KafkaWakeups(None, group_id=GROUP, request_timeout_ms=1000)  # type: ignore[arg-type]
        channel._wake = h.engine.wake
        channel._sibling_found = h.engine.sibling_found_rebalance
        channel._listener = listener
        listener._members.append(channel)
        h.engine._wakeups = channel
    first, second = harnesses
    listener._received(json.dumps({"sender": "another", "member": "m-9", "event": "join"}).encode())
    assert second.engine.heartbeat_once() == pytest.approx(0.1)  # leaves the asking
    assert heartbeats(second) == 0
    first.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    first.engine.heartbeat_once()
    assert heartbeats(first) == 1
    assert first.engine._rejoin_reason == "group is already rebalancing"
    assert second.engine._rejoin_reason == "a member in this process found the group rebalancing"
    # It counts the wake-up it read, not the sibling's word.
    assert [h.engine.metrics().wakeups_received for h in harnesses] == [1, 1]
    second.clock.advance(0.5)  # past the times it would have asked itself
    second.engine.heartbeat_once()
    assert heartbeats(second) == 0


# ------------------------------------------------------------------------- the timeline


def test_a_completed_rebalance_is_published_after_on_join_complete_with_what_moved() -> None:
    h = WakeupHarness(heartbeat_interval_ms=3000, client_id="svc-1")

    def note(*args: object) -> None:  # the subclass says what changed, in its own words
        h.engine.note_rebalance_change("+3 partitions")

    h.member.on_join_complete = note  # type: ignore[method-assign,assignment]
    h.join_as_leader()
    (entry,) = h.wakeups.rebalances
    assert entry["generation"] == 1
    assert entry["member_id"] == "m-1"
    assert entry["is_leader"] is True
    assert entry["reason"] == "the member is joining the group for the first time"
    assert entry["moved"] == "+3 partitions"
    assert entry["client_id"] == "svc-1"
    assert entry["group_instance_id"] is None
    assert h.engine.metrics().recent_rebalances[-1].moved == "+3 partitions"


def test_no_rebalance_is_published_when_on_join_complete_fails() -> None:
    h = WakeupHarness(heartbeat_interval_ms=3000)

    def fail(*args: object) -> None:
        raise RuntimeError("not ready")

    h.member.on_join_complete = fail  # type: ignore[method-assign,assignment]
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-1"),
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert not h.engine.join_group_if_needed(deadline=h.clock.monotonic() + 0.01)
    assert h.wakeups.rebalances == []
