"""The membership engine's error paths, driven step by step with a scripted transport.

No threads and no waiting: each test calls the engine's steps (find the
coordinator, join, heartbeat) on the test thread, with a manual clock, and
checks what the member sent and what state it reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from coordination import (
    Coordinator,
    Member,
    MemberState,
    OffsetAndMetadata,
    ProtocolMetadata,
    errors,
)
from coordination._config import CoordinatorConfig
from coordination._engine import offsets
from coordination._engine.membership import GroupMembership
from coordination._inspection import GroupDescription, group_description
from coordination._protocol.error_codes import ErrorCode as E
from coordination.testing import ManualClock, ScriptedTransport, TransportError
from coordination.testing import messages as m

GROUP = "g"
NODE = m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)


class Recorder(Coordinator):
    """A member that records every callback."""

    def __init__(self, transport: ScriptedTransport, **settings: Any) -> None:
        super().__init__(GROUP, transport=transport, bootstrap_servers="x:1", **settings)
        self.calls: list[tuple[object, ...]] = []
        self.assign_error: Exception | None = None
        self.complete_errors: list[Exception] = []

    def protocol_type(self) -> str:
        return "test"

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [ProtocolMetadata("v2", b"m2"), ProtocolMetadata("v1", b"m1")]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        self.calls.append(("assign", leader_id, protocol, tuple(x.member_id for x in members)))
        if self.assign_error:
            raise self.assign_error
        return {x.member_id: f"to-{x.member_id}".encode() for x in members}

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        self.calls.append(("prepare", generation, member_id))

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self.calls.append(("complete", generation, member_id, protocol, assignment))
        if self.complete_errors:
            raise self.complete_errors.pop(0)

    def on_leave_prepare(self) -> None:
        self.calls.append(("leave",))


class Harness:
    def __init__(self, **settings: object) -> None:
        self.transport = ScriptedTransport()
        self.clock = ManualClock()
        self.member = Recorder(self.transport, **settings)
        config = CoordinatorConfig.from_settings(GROUP, {"bootstrap_servers": "x:1", **settings})
        self.engine = GroupMembership(self.member, config, self.transport, self.clock)
        self.engine.resolve_protocol_type()

    def prepare(self, *answers: object, response_type: type | None = None) -> None:
        for a in answers:
            self.transport.prepare(a, response_type=response_type)  # type: ignore[arg-type]

    def join_as_leader(self, member_id: str = "m-1", generation: int = 1) -> None:
        """Script a full first join in which this member leads a group of one."""
        self.prepare(
            NODE,
            m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id=member_id),
            joined(member_id, generation, leader=member_id),
            m.SyncGroupResponse(
                error_code=0,
                protocol_type="test",
                protocol_name="v2",
                assignment=f"to-{member_id}".encode(),
            ),
        )
        assert self.engine.join_group_if_needed(deadline=None)

    def join_as_follower(self, member_id: str = "m-2", generation: int = 1) -> None:
        self.prepare(NODE, joined(member_id, generation, leader="m-1"))
        if self.engine._config.is_static:
            # A static follower's answer may come from a Stable group that kept it through a
            # phase it missed: it proves its session by a heartbeat before syncing.
            self.prepare(m.HeartbeatResponse(error_code=0))
        self.prepare(
            m.SyncGroupResponse(
                error_code=0, protocol_type="test", protocol_name="v2", assignment=b"mine"
            ),
        )
        self.engine._generation = self.engine.generation.__class__(-1, member_id, None)
        assert self.engine.join_group_if_needed(deadline=None)


def joined(member_id: str, generation: int, leader: str, **kw: object) -> m.JoinGroupResponse:
    members = (m.JoinGroupResponseMember(member_id, None, b"m2"),) if leader == member_id else ()
    fields: dict[str, object] = {
        "error_code": 0,
        "generation_id": generation,
        "protocol_type": "test",
        "protocol_name": "v2",
        "leader": leader,
        "member_id": member_id,
        "members": members,
    }
    fields.update(kw)
    return m.JoinGroupResponse(**fields)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- the happy path


def test_first_join_is_two_steps_and_the_leader_assigns() -> None:
    h = Harness()
    h.join_as_leader()

    joins = h.transport.requests(m.JoinGroupRequest)
    assert [j.member_id for j in joins] == ["", "m-1"]  # KIP-394: join again with the given id
    assert joins[0].protocols == (("v2", b"m2"), ("v1", b"m1"))  # preference order kept
    assert joins[0].reason and "first time" in joins[0].reason  # KIP-800 reason
    assert joins[1].reason and "m-1" in joins[1].reason
    (sync,) = h.transport.requests(m.SyncGroupRequest)
    assert sync.assignments == (("m-1", b"to-m-1"),)
    assert (sync.protocol_type, sync.protocol_name) == ("test", "v2")  # KIP-559
    assert h.member.calls == [
        ("prepare", -1, ""),
        ("assign", "m-1", "v2", ("m-1",)),
        ("complete", 1, "m-1", "v2", b"to-m-1"),
    ]
    assert h.engine.state is MemberState.STABLE
    assert h.engine.generation_if_stable() == h.engine.generation
    assert h.engine.generation.generation_id == 1
    metrics = h.engine.metrics()
    assert (metrics.rebalance_total, metrics.failed_rebalance_total) == (1, 0)


def test_follower_sends_an_empty_sync_and_gets_its_assignment() -> None:
    h = Harness()
    h.join_as_follower()
    (sync,) = h.transport.requests(m.SyncGroupRequest)
    assert sync.assignments == ()
    assert ("complete", 1, "m-2", "v2", b"mine") in h.member.calls
    assert not [c for c in h.member.calls if c[0] == "assign"]


def test_join_group_waits_longer_than_the_rebalance_timeout() -> None:
    h = Harness(rebalance_timeout_ms=40_000, request_timeout_ms=10_000)
    h.join_as_leader()
    join_timeouts = [
        s.timeout_s for s in h.transport.sent if isinstance(s.request, m.JoinGroupRequest)
    ]
    assert join_timeouts == [45.0, 45.0]  # rebalance timeout + 5 s


def test_coordinator_not_available_is_retried_with_growing_backoff() -> None:
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    h.prepare(*[m.FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE)] * 4, NODE)
    assert h.engine.ensure_coordinator_ready(deadline=None)
    assert len(h.clock.sleeps) == 4
    # Doubling with 20% jitter: every wait is longer than the one before.
    assert all(a < b for a, b in zip(h.clock.sleeps, h.clock.sleeps[1:], strict=False))
    assert 0.08 <= h.clock.sleeps[0] <= 0.12 and 0.64 <= h.clock.sleeps[3] <= 0.96


def test_coordinator_lookup_gives_up_at_the_deadline() -> None:
    h = Harness()
    h.prepare(*[TransportError("refused")] * 50, response_type=m.FindCoordinatorResponse)
    assert not h.engine.ensure_coordinator_ready(deadline=h.clock.now + 3)
    assert h.clock.now <= 1003.0 + 1e-9


def test_group_authorization_failure_on_find_coordinator_is_fatal() -> None:
    h = Harness()
    h.prepare(m.FindCoordinatorResponse(error_code=E.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(errors.GroupAuthorizationError, match="READ on the group"):
        h.engine.ensure_coordinator_ready(deadline=None)
    assert h.engine.state is MemberState.CLOSED


# ------------------------------------------------------------------------- JoinGroup errors


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (E.FENCED_INSTANCE_ID, errors.FencedInstanceError),
        (E.INCONSISTENT_GROUP_PROTOCOL, errors.InconsistentGroupProtocolError),
        (E.INVALID_SESSION_TIMEOUT, errors.InvalidSessionTimeoutError),
        (E.INVALID_GROUP_ID, errors.InvalidGroupIdError),
        (E.GROUP_AUTHORIZATION_FAILED, errors.GroupAuthorizationError),
        (E.GROUP_MAX_SIZE_REACHED, errors.GroupMaxSizeReachedError),
        (E.UNSUPPORTED_VERSION, errors.UnsupportedVersionError),
    ],
)
def test_fatal_join_errors_stop_the_member_with_a_typed_error(
    code: int, error_class: type[errors.FatalBrokerError]
) -> None:
    h = Harness()
    h.prepare(NODE, m.JoinGroupResponse(error_code=code))
    with pytest.raises(error_class) as raised:
        h.engine.join_group_if_needed(deadline=None)
    assert raised.value.code == code and raised.value.group_id == GROUP
    assert "group 'g'" in str(raised.value) and raised.value.hint in str(raised.value)
    assert h.engine.state is MemberState.CLOSED
    assert h.engine.fatal_error is raised.value


@pytest.mark.parametrize(
    ("code", "keeps_member_id"),
    [(E.UNKNOWN_MEMBER_ID, False), (E.ILLEGAL_GENERATION, True), (E.REBALANCE_IN_PROGRESS, True)],
)
def test_join_errors_that_rejoin_at_once(code: int, keeps_member_id: bool) -> None:
    h = Harness()
    h.engine._generation = h.engine.generation.__class__(-1, "m-1", None)
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=code),
        joined("m-9", 2, leader="m-9"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    second = h.transport.requests(m.JoinGroupRequest)[1]
    assert second.member_id == ("m-1" if keeps_member_id else "")
    assert h.clock.sleeps == []  # no backoff
    assert h.engine.metrics().failed_rebalance_total == 1


@pytest.mark.parametrize("code", [E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR])
def test_join_errors_that_move_to_a_new_coordinator(code: int) -> None:
    h = Harness()
    moved = m.FindCoordinatorResponse(error_code=0, node_id=2, host="127.0.0.2", port=9093)
    h.prepare(NODE, m.JoinGroupResponse(error_code=code), moved)
    h.prepare(
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert [d.node_id for d in h.transport.disconnects] == [1]
    assert [s.coordinator.node_id for s in h.transport.sent if s.coordinator][-1] == 2


@pytest.mark.parametrize("code", [E.COORDINATOR_LOAD_IN_PROGRESS, E.UNKNOWN_SERVER_ERROR, 9999])
def test_transient_and_unknown_join_errors_back_off_and_retry(code: int) -> None:
    h = Harness()
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=code),
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert len(h.clock.sleeps) == 1
    assert h.transport.disconnects == []


def test_a_join_disconnect_keeps_the_member_id_and_rediscovers() -> None:
    h = Harness()
    h.engine._generation = h.engine.generation.__class__(-1, "m-1", None)
    h.prepare(NODE)
    h.prepare(TransportError("connection reset"), response_type=m.JoinGroupResponse)
    h.prepare(
        NODE,
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert [j.member_id for j in h.transport.requests(m.JoinGroupRequest)] == ["m-1", "m-1"]
    assert len(h.transport.requests(m.FindCoordinatorRequest)) == 2


def test_join_response_of_another_protocol_type_is_fatal() -> None:
    h = Harness()
    h.prepare(NODE, joined("m-1", 1, leader="m-1", protocol_type="consumer"))
    with pytest.raises(errors.InconsistentGroupProtocolError, match="consumer"):
        h.engine.join_group_if_needed(deadline=None)


def test_static_member_joins_in_one_step_with_its_instance_id() -> None:
    h = Harness(group_instance_id="worker-1")
    h.prepare(
        NODE,
        joined("worker-1-abc", 1, leader="worker-1-abc"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    (join,) = h.transport.requests(m.JoinGroupRequest)
    assert (join.member_id, join.group_instance_id) == ("", "worker-1")


def test_returning_static_leader_skips_assignment() -> None:
    """KIP-814: the broker kept the assignment; the leader must not compute another."""
    h = Harness(group_instance_id="worker-1")
    h.prepare(
        NODE,
        joined("w-1", 4, leader="w-1", skip_assignment=True),
        m.SyncGroupResponse(
            error_code=0, protocol_type="test", protocol_name="v2", assignment=b"kept"
        ),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert not [c for c in h.member.calls if c[0] == "assign"]
    assert h.transport.requests(m.SyncGroupRequest)[0].assignments == ()
    assert ("complete", 4, "w-1", "v2", b"kept") in h.member.calls


# ------------------------------------------------------------------------- SyncGroup errors


@pytest.mark.parametrize(
    ("code", "member_id_after"),
    [(E.UNKNOWN_MEMBER_ID, ""), (E.ILLEGAL_GENERATION, "m-1"), (E.REBALANCE_IN_PROGRESS, "m-1")],
)
def test_sync_errors_that_rejoin_at_once(code: int, member_id_after: str) -> None:
    h = Harness()
    h.prepare(
        NODE,
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=code),
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    second = h.transport.requests(m.JoinGroupRequest)[1]
    assert second.member_id == member_id_after
    assert h.engine.generation.generation_id == 2
    # Only the second generation's assignment reached the subclass.
    assert [c[1] for c in h.member.calls if c[0] == "complete"] == [2]


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (E.FENCED_INSTANCE_ID, errors.FencedInstanceError),
        (E.GROUP_AUTHORIZATION_FAILED, errors.GroupAuthorizationError),
    ],
)
def test_fatal_sync_errors(code: int, error_class: type[Exception]) -> None:
    h = Harness()
    h.prepare(NODE, joined("m-1", 1, leader="m-1"), m.SyncGroupResponse(error_code=code))
    with pytest.raises(error_class):
        h.engine.join_group_if_needed(deadline=None)


def test_sync_answering_another_protocol_name_is_fatal() -> None:
    h = Harness()
    h.prepare(
        NODE,
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v1"),
    )
    with pytest.raises(errors.InconsistentGroupProtocolError, match="'v1'"):
        h.engine.join_group_if_needed(deadline=None)


def test_generation_reset_while_sync_in_flight_rejoins_instead_of_completing() -> None:
    h = Harness()

    def sync_while_heartbeat_resets(request: m.Request) -> m.Response:
        # The heartbeat thread learns the generation is gone while SyncGroup is in flight.
        node = h.engine.coordinator
        assert node is not None
        h.engine._on_heartbeat_response(E.ILLEGAL_GENERATION, h.engine.generation, node)
        return m.SyncGroupResponse(
            error_code=0, protocol_type="test", protocol_name="v2", assignment=b"stale"
        )

    h.prepare(NODE, joined("m-1", 1, leader="m-1"))
    h.prepare(sync_while_heartbeat_resets, response_type=m.SyncGroupResponse)
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(
            error_code=0, protocol_type="test", protocol_name="v2", assignment=b"fresh"
        ),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    completes = [c for c in h.member.calls if c[0] == "complete"]
    assert completes == [("complete", 2, "m-1", "v2", b"fresh")]


# ------------------------------------------------------------------------- callbacks that raise


def test_perform_assignment_raising_fails_the_rebalance_and_retries() -> None:
    h = Harness()
    h.member.assign_error = RuntimeError("bug in assignor")
    h.prepare(
        NODE,
        joined("m-1", 1, leader="m-1"),
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )

    def clear_error(seconds: float, interrupt: object) -> None:
        h.member.assign_error = None
        h.clock.now += seconds

    h.clock.sleep = clear_error  # type: ignore[method-assign]
    assert h.engine.join_group_if_needed(deadline=None)
    assert len([c for c in h.member.calls if c[0] == "assign"]) == 2
    assert len(h.transport.requests(m.SyncGroupRequest)) == 1
    assert h.engine.metrics().failed_rebalance_total == 1


def test_a_perform_assignment_past_the_rebalance_timeout_is_reported_while_it_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The broker evicts members that cannot sync in time: say why while it happens (the
    # heartbeat thread watches; it keeps heartbeating through the sync phase).
    h = Harness(rebalance_timeout_ms=6000, heartbeat_interval_ms=1000)
    overdue = "perform_assignment has run for more than rebalance_timeout_ms (6000 ms)"
    warned_while_running: list[bool] = []

    def slow_assignment(leader_id: str, protocol: str, members: Any) -> Mapping[str, bytes]:
        for _ in range(8):  # 8 s, a heartbeat a second
            h.clock.advance(1)
            h.prepare(m.HeartbeatResponse(error_code=0))
            h.engine.heartbeat_once()
            warned_while_running.append(overdue in caplog.text)
        return {x.member_id: b"" for x in members}

    h.member.perform_assignment = slow_assignment  # type: ignore[method-assign]
    h.join_as_leader()
    assert warned_while_running == [False] * 5 + [True] * 3
    assert caplog.text.count(overdue) == 1  # once per assignment
    assert "perform_assignment took 8.0s of a 6.0s rebalance timeout" in caplog.text


@pytest.mark.parametrize(
    "error",
    [
        errors.TopicAuthorizationError(29, group_id=GROUP, api="OffsetFetch of tokens"),
        errors.AuthenticationFailedError("authentication failed: bad password"),
    ],
    ids=["no-acl", "login-refused"],
)
def test_a_callback_meeting_an_error_retrying_cannot_fix_stops_the_member(
    error: errors.CoordinationError,
) -> None:
    # The election reads its stored token in perform_assignment: without DESCRIBE on the
    # token topic, retrying the rebalance forever would leave the group leaderless silently.
    h = Harness()
    h.member.assign_error = error
    h.prepare(NODE, joined("m-1", 1, leader="m-1"))
    with pytest.raises(type(error)) as raised:
        h.engine.join_group_if_needed(deadline=None)
    assert raised.value is error
    assert h.engine.state is MemberState.CLOSED
    assert h.engine.fatal_error is error
    assert h.transport.requests(m.SyncGroupRequest) == []


def test_on_join_complete_raising_is_retried_with_the_same_assignment() -> None:
    h = Harness()
    h.member.complete_errors = [RuntimeError("db down"), RuntimeError("db down")]
    h.join_as_leader()
    completes = [c for c in h.member.calls if c[0] == "complete"]
    assert len(completes) == 3 and len({c[1:] for c in completes}) == 1
    assert len(h.transport.requests(m.JoinGroupRequest)) == 2  # no rejoin because of it
    assert len(h.clock.sleeps) == 2


def test_perform_assignment_to_unknown_member_is_rejected() -> None:
    h = Harness()
    h.member.perform_assignment = lambda *a: {"ghost": b"x"}  # type: ignore[method-assign]
    h.prepare(NODE, joined("m-1", 1, leader="m-1"))
    with pytest.raises(Exception, match="no answer prepared"):
        h.engine.join_group_if_needed(deadline=None)
    assert h.transport.requests(m.SyncGroupRequest) == []
    assert "unknown members ['ghost']" in (h.engine._last_error or "")


# ------------------------------------------------------------------------- heartbeats


def stable_leader(**settings: object) -> Harness:
    h = Harness(**settings)
    h.join_as_leader()
    return h


def test_heartbeat_waits_for_the_interval() -> None:
    h = stable_leader(heartbeat_interval_ms=1000)
    assert h.engine.heartbeat_once() == pytest.approx(1.0)
    h.clock.advance(1.0)
    h.prepare(m.HeartbeatResponse(error_code=0))
    assert h.engine.heartbeat_once() == pytest.approx(1.0)
    (hb,) = h.transport.requests(m.HeartbeatRequest)
    assert (hb.generation_id, hb.member_id) == (1, "m-1")


def test_rebalance_in_progress_while_stable_requests_a_rejoin() -> None:
    h = stable_leader()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert h.engine._rejoin_reason == "group is already rebalancing"
    assert h.engine.generation.generation_id == 1  # generation kept
    assert h.engine.metrics().rejoin_reasons == ("group is already rebalancing",)


def test_rebalance_in_progress_while_completing_is_expected() -> None:
    h = stable_leader()
    h.engine._state = MemberState.COMPLETING_REBALANCE
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert h.engine._rejoin_reason is None


@pytest.mark.parametrize(
    ("code", "member_id_after"), [(E.ILLEGAL_GENERATION, "m-1"), (E.UNKNOWN_MEMBER_ID, "")]
)
def test_heartbeat_membership_errors_reset_and_rejoin(code: int, member_id_after: str) -> None:
    h = stable_leader()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=code))
    h.engine.heartbeat_once()
    assert h.engine.state is MemberState.UNJOINED
    assert h.engine.generation.generation_id == -1
    assert h.engine.generation.member_id == member_id_after
    assert h.engine._rejoin_reason is not None
    # The subclass is told, before the next join, that the old generation is gone.
    h.prepare(
        joined("m-1", 2, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    assert ("prepare", -1, member_id_after) in h.member.calls


def test_heartbeat_error_of_a_stale_generation_is_ignored() -> None:
    h = stable_leader()
    old = h.engine.generation
    h.engine._generation = old.__class__(2, "m-1", "v2")  # rejoined meanwhile
    h.engine._on_heartbeat_response(E.ILLEGAL_GENERATION, old, h.engine.coordinator)  # type: ignore[arg-type]
    assert h.engine.state is MemberState.STABLE
    assert h.engine.generation.generation_id == 2


def test_heartbeat_fenced_instance_is_fatal() -> None:
    h = stable_leader(group_instance_id="w-1")
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.FENCED_INSTANCE_ID))
    with pytest.raises(errors.FencedInstanceError, match="its own id"):
        h.engine.heartbeat_once()
    assert h.engine.state is MemberState.CLOSED


@pytest.mark.parametrize("code", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_heartbeat_coordinator_errors_rediscover(code: int) -> None:
    h = stable_leader()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=code))
    h.engine.heartbeat_once()
    assert h.engine.coordinator is None
    assert h.engine.state is MemberState.STABLE  # the generation stays valid
    assert len(h.transport.disconnects) == 1


def test_heartbeat_without_response_drops_the_coordinator_connection() -> None:
    h = stable_leader()
    h.clock.advance(3)
    h.prepare(TransportError("timed out"), response_type=m.HeartbeatResponse)
    h.engine.heartbeat_once()
    assert h.engine.coordinator is None
    assert [d.node_id for d in h.transport.disconnects] == [1]
    assert h.engine.state is MemberState.STABLE


def test_session_expiry_marks_the_coordinator_unknown() -> None:
    h = stable_leader(session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    h.clock.advance(11)  # e.g. the process was frozen
    assert h.engine.heartbeat_once() is None
    assert h.engine.coordinator is None
    assert "session timed out" in (h.engine._last_error or "")


# ------------------------------------------------------------------------- leaving


def test_close_sends_leave_group_with_a_reason() -> None:
    h = stable_leader()
    h.prepare(m.LeaveGroupResponse(error_code=0))
    h.engine.close(timeout_s=5)
    (leave,) = h.transport.requests(m.LeaveGroupRequest)
    assert (leave.member_id, leave.reason) == ("m-1", "the member is closing")
    assert h.member.calls[-1] == ("leave",)
    assert h.engine.state is MemberState.CLOSED and h.transport.closed


def test_static_member_does_not_leave_on_close() -> None:
    h = stable_leader(group_instance_id="w-1")
    h.engine.close(timeout_s=5)
    assert h.transport.requests(m.LeaveGroupRequest) == []
    assert h.member.calls[-1] == ("leave",)


def test_leave_group_failure_does_not_stop_close() -> None:
    h = stable_leader()
    h.prepare(TransportError("gone"), response_type=m.LeaveGroupResponse)
    h.engine.close(timeout_s=5)
    assert h.engine.state is MemberState.CLOSED


def test_closing_during_a_join_drops_the_parked_connection_first() -> None:
    h = stable_leader()
    h.engine._state = MemberState.PREPARING_REBALANCE
    h.prepare(m.LeaveGroupResponse(error_code=0))
    h.engine.close(timeout_s=5)
    assert len(h.transport.disconnects) == 1
    assert len(h.transport.requests(m.LeaveGroupRequest)) == 1


# ------------------------------------------------------------------------- membership lease


def test_membership_lease_runs_from_the_send_time_of_the_last_confirmation() -> None:
    h = stable_leader(session_timeout_ms=10_000, heartbeat_interval_ms=1000)
    assert h.engine.membership_lease() == pytest.approx(10.0)
    h.clock.advance(4)
    assert h.engine.membership_lease() == pytest.approx(6.0)
    # A successful heartbeat renews it from the moment the heartbeat was sent.
    h.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()
    assert h.engine.membership_lease() == pytest.approx(10.0)


def test_membership_lease_is_bounded_by_the_rebalance_timeout() -> None:
    h = stable_leader(session_timeout_ms=10_000, rebalance_timeout_ms=7_000)
    assert h.engine.membership_lease() == pytest.approx(7.0)


def test_rebalance_in_progress_does_not_renew_the_lease() -> None:
    # The broker may already be timing this member out of the join phase.
    h = stable_leader(session_timeout_ms=10_000)
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert h.engine.membership_lease() == pytest.approx(7.0)


def test_failed_heartbeats_let_the_lease_run_out_while_the_member_is_still_stable() -> None:
    h = stable_leader(session_timeout_ms=10_000, heartbeat_interval_ms=1000)
    h.clock.advance(1)
    h.prepare(TransportError("timed out"), response_type=m.HeartbeatResponse)
    h.engine.heartbeat_once()
    h.clock.advance(5)
    assert h.engine.membership_lease() == pytest.approx(4.0)
    h.clock.advance(5)
    assert h.engine.state is MemberState.STABLE  # the engine has not noticed anything yet
    assert h.engine.membership_lease() == 0.0


@pytest.mark.parametrize(
    ("code", "member_id_after"), [(E.ILLEGAL_GENERATION, "m-1"), (E.UNKNOWN_MEMBER_ID, "")]
)
def test_losing_the_generation_ends_the_lease_at_once(code: int, member_id_after: str) -> None:
    h = stable_leader()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=code))
    h.engine.heartbeat_once()
    assert h.engine.generation.member_id == member_id_after
    assert h.engine.membership_lease() == 0.0


def test_a_member_that_never_joined_has_no_lease() -> None:
    h = Harness()
    assert h.engine.membership_lease() == 0.0


def test_the_lease_holds_while_the_member_rejoins() -> None:
    h = stable_leader(session_timeout_ms=10_000)
    h.engine._state = MemberState.PREPARING_REBALANCE  # JoinGroup in flight
    h.clock.advance(2)
    assert h.engine.membership_lease() == pytest.approx(8.0)


# ------------------------------------------------------------------------- offsets

OFFSETS = {("t", 0): OffsetAndMetadata(10, "batch-a"), ("t", 1): OffsetAndMetadata(20)}


def committed(*codes: int) -> m.OffsetCommitResponse:
    return m.OffsetCommitResponse(partitions=tuple(("t", p, c) for p, c in enumerate(codes)))


def test_commit_carries_the_generation_and_member_id() -> None:
    h = stable_leader()
    h.prepare(committed(0, 0))
    offsets.commit(h.engine, OFFSETS, None, 5)
    (req,) = h.transport.requests(m.OffsetCommitRequest)
    assert (req.generation_id, req.member_id) == (1, "m-1")
    assert req.offsets == (("t", 0, 10, "batch-a"), ("t", 1, 20, ""))


@pytest.mark.parametrize(
    ("code", "member_id_after"),
    [(E.ILLEGAL_GENERATION, "m-1"), (E.UNKNOWN_MEMBER_ID, ""), (E.REBALANCE_IN_PROGRESS, "m-1")],
)
def test_a_fenced_commit_raises_and_makes_the_member_rejoin(
    code: int, member_id_after: str
) -> None:
    h = stable_leader()
    h.prepare(committed(code, code))
    with pytest.raises(errors.CommitFailedError, match="Nothing was committed"):
        offsets.commit(h.engine, OFFSETS, None, 5)
    assert h.engine.generation.member_id == member_id_after
    assert h.engine._rejoin_reason and "OffsetCommit" in h.engine._rejoin_reason


def test_a_member_without_a_generation_commits_nothing() -> None:
    h = Harness()
    with pytest.raises(errors.CommitFailedError, match="not in a generation"):
        offsets.commit(h.engine, OFFSETS, None, 5)
    assert h.transport.requests(m.OffsetCommitRequest) == []


def test_commit_of_an_older_generation_is_refused_without_resetting_the_current_one() -> None:
    h = stable_leader()
    old = h.engine.generation.__class__(0, "m-1", "v2")
    h.prepare(committed(E.ILLEGAL_GENERATION, E.ILLEGAL_GENERATION))
    with pytest.raises(errors.CommitFailedError):
        offsets.commit(h.engine, OFFSETS, old, 5)
    assert h.engine.generation.generation_id == 1  # the current generation is untouched


def test_commit_follows_the_coordinator_and_retries_loading() -> None:
    h = stable_leader()
    h.prepare(committed(E.COORDINATOR_LOAD_IN_PROGRESS, 0), committed(0, 0))
    offsets.commit(h.engine, OFFSETS, None, 5)
    assert len(h.transport.requests(m.OffsetCommitRequest)) == 2
    h.prepare(committed(E.NOT_COORDINATOR, E.NOT_COORDINATOR))
    with pytest.raises(errors.CoordinationTimeoutError):
        offsets.commit(h.engine, OFFSETS, None, 0.05)  # no coordinator to retry on in time
    assert h.engine.coordinator is None


def test_other_commit_errors_name_the_partitions() -> None:
    h = stable_leader()
    h.prepare(committed(0, E.OFFSET_METADATA_TOO_LARGE))
    with pytest.raises(errors.BrokerError, match="t-1: OFFSET_METADATA_TOO_LARGE"):
        offsets.commit(h.engine, OFFSETS, None, 5)


def test_fetch_returns_committed_offsets_and_none_where_nothing_is() -> None:
    h = stable_leader()
    h.prepare(
        m.OffsetFetchResponse(
            error_code=0, partitions=(("t", 0, 10, "batch-a", 0), ("t", 1, -1, "", 0))
        )
    )
    got = offsets.fetch(h.engine, [("t", 1), ("t", 0)], 5)
    assert got == {("t", 0): OffsetAndMetadata(10, "batch-a"), ("t", 1): None}


def test_describe_retries_a_moved_or_loading_coordinator_and_reads_the_group() -> None:
    h = stable_leader()
    member = m.DescribedMember("m-1", None, "c", "/h", b"meta", b"plan")
    h.prepare(
        m.DescribeGroupResponse(E.COORDINATOR_LOAD_IN_PROGRESS),
        m.DescribeGroupResponse(0, "Stable", "test", "p1", (member,)),
    )
    got = offsets.describe(h.engine, 5)
    assert (got.state, got.protocol, got.members) == ("Stable", "p1", (member,))
    assert h.transport.requests(m.DescribeGroupRequest) == [m.DescribeGroupRequest(GROUP)] * 2
    h.prepare(m.DescribeGroupResponse(E.NOT_COORDINATOR))
    with pytest.raises(errors.CoordinationTimeoutError):
        offsets.describe(h.engine, 0.05)  # no coordinator to retry on in time
    assert h.engine.coordinator is None


def test_describe_takes_a_missing_group_as_dead_and_raises_a_refusal() -> None:
    h = stable_leader()
    h.prepare(m.DescribeGroupResponse(E.GROUP_ID_NOT_FOUND))
    answer = offsets.describe(h.engine, 5)
    assert group_description(GROUP, answer) == GroupDescription(GROUP, "Dead", "", "", ())
    h.prepare(m.DescribeGroupResponse(E.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(errors.GroupAuthorizationError, match="DescribeGroups"):
        offsets.describe(h.engine, 5)


def test_log_records_carry_the_group_member_and_generation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="coordination.member")
    h = Harness()
    h.join_as_leader(member_id="m-1", generation=1)
    joined_record = next(r for r in caplog.records if "joined generation 1" in r.getMessage())
    assert (joined_record.group_id, joined_record.member_id, joined_record.generation) == (  # type: ignore[attr-defined]
        GROUP,
        "m-1",
        1,
    )
    first = caplog.records[0]
    assert (first.group_id, first.generation) == (GROUP, -1)  # type: ignore[attr-defined]
