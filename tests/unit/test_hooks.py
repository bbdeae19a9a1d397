"""Hooks: which events the engine reports, with what, and that a failing hook harms nobody.

Driven step by step like tests/unit/test_engine.py (scripted transport, manual clock). The
recipes' events (elected, tasks, commits) and the exporters run on a broker in
tests/integration/test_hooks.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from coordination import CoordinatorConfig, MemberState
from coordination._engine.membership import GroupMembership
from coordination._protocol.error_codes import ErrorCode as E
from coordination.errors import ConfigurationError
from coordination.hooks import (
    CoordinationHooks,
    HeartbeatFailed,
    HookCaller,
    RebalanceFailed,
    RebalanceFinished,
    RebalanceStarted,
)
from coordination.testing import TransportError
from coordination.testing import messages as m

from .test_engine import GROUP, NODE, Harness, joined


class Recorded(CoordinationHooks):
    def __init__(self) -> None:
        self.events: list[object] = []

    def on_rebalance_started(self, event: RebalanceStarted) -> None:
        self.events.append(event)

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        self.events.append(event)

    def on_rebalance_failed(self, event: RebalanceFailed) -> None:
        self.events.append(event)

    def on_heartbeat_failed(self, event: HeartbeatFailed) -> None:
        self.events.append(event)


class HookedHarness(Harness):
    def __init__(self, *hooks: CoordinationHooks, **settings: Any) -> None:
        super().__init__(**settings)
        config = CoordinatorConfig.from_settings(
            GROUP, {"bootstrap_servers": "x:1", "hooks": list(hooks), **settings}
        )
        self.engine = GroupMembership(self.member, config, self.transport, self.clock)
        self.engine.resolve_protocol_type()


def test_a_rebalance_reports_its_start_and_end_with_reason_and_duration() -> None:
    hooks = Recorded()
    h = HookedHarness(hooks)
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-1"),
        joined("m-1", 1, leader="m-1"),
    )

    # The leader's SyncGroup answer comes 0.25 s (engine clock) after its first JoinGroup.
    def late_sync(request: object) -> m.SyncGroupResponse:
        h.clock.advance(0.25)
        return m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2")

    h.transport.prepare(late_sync, response_type=m.SyncGroupResponse)
    assert h.engine.join_group_if_needed(deadline=None)
    started, finished = hooks.events
    assert started == RebalanceStarted(
        group_id=GROUP, member_id="", reason="the member is joining the group for the first time"
    )
    assert isinstance(finished, RebalanceFinished)
    assert (finished.member_id, finished.generation, finished.is_leader) == ("m-1", 1, True)
    assert finished.reason == started.reason
    assert finished.duration_s == pytest.approx(0.25)
    # The same rebalance in the member's timeline.
    (record,) = h.engine.metrics().recent_rebalances
    assert (record.generation, record.reason, record.failed_attempts) == (1, started.reason, 0)
    assert record.duration_s == pytest.approx(0.25)


def test_a_failed_attempt_is_reported_and_counted_in_the_rebalance() -> None:
    hooks = Recorded()
    h = HookedHarness(hooks)
    h.prepare(
        NODE,
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-1"),
        m.JoinGroupResponse(error_code=E.REBALANCE_IN_PROGRESS, member_id="m-1"),
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)
    kinds = [type(e).__name__ for e in hooks.events]
    # One rebalance: started once, one failed attempt, finished once.
    assert kinds == ["RebalanceStarted", "RebalanceFailed", "RebalanceFinished"]
    failed = hooks.events[1]
    assert isinstance(failed, RebalanceFailed)
    assert "REBALANCE_IN_PROGRESS" in failed.error
    assert h.engine.metrics().recent_rebalances[-1].failed_attempts == 1


def stable(hooks: CoordinationHooks) -> HookedHarness:
    h = HookedHarness(hooks, heartbeat_interval_ms=3000)
    h.join_as_leader()
    return h


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (m.HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID), "UNKNOWN_MEMBER_ID"),
        (m.HeartbeatResponse(error_code=E.NOT_COORDINATOR), "NOT_COORDINATOR"),
        (TransportError("timed out"), "no response: timed out"),
    ],
)
def test_a_failed_heartbeat_is_reported(answer: object, error: str) -> None:
    hooks = Recorded()
    h = stable(hooks)
    hooks.events.clear()
    h.clock.advance(3)
    h.prepare(answer, response_type=m.HeartbeatResponse)
    h.engine.heartbeat_once()
    assert hooks.events == [
        HeartbeatFailed(group_id=GROUP, member_id="m-1", generation=1, error=error)
    ]


def test_a_rebalance_under_way_is_not_a_failed_heartbeat() -> None:
    hooks = Recorded()
    h = stable(hooks)
    hooks.events.clear()
    h.clock.advance(3)
    h.prepare(m.HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    h.engine.heartbeat_once()
    assert hooks.events == []
    assert h.engine.state is MemberState.STABLE  # rejoins from the membership thread


class Broken(CoordinationHooks):
    def on_rebalance_started(self, event: RebalanceStarted) -> None:
        raise RuntimeError("exporter down")

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        raise RuntimeError("exporter down")


def test_a_failing_hook_harms_neither_the_member_nor_the_other_hooks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after = Recorded()
    h = HookedHarness(Broken(), after)
    with caplog.at_level(logging.DEBUG, logger="coordination.hooks"):
        h.join_as_leader()
    assert h.engine.state is MemberState.STABLE
    assert [type(e).__name__ for e in after.events] == ["RebalanceStarted", "RebalanceFinished"]
    # Each failing method is logged with its traceback once.
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert sorted(r.getMessage() for r in errors) == [
        "hook Broken.on_rebalance_finished raised; the member carries on",
        "hook Broken.on_rebalance_started raised; the member carries on",
    ]
    assert all(r.exc_info for r in errors)


def test_a_method_that_keeps_failing_is_logged_with_a_traceback_only_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caller = HookCaller([Broken()])
    event = RebalanceStarted(group_id="g", member_id="m", reason="r")
    with caplog.at_level(logging.DEBUG, logger="coordination.hooks"):
        for _ in range(3):
            caller.emit("on_rebalance_started", event)
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.DEBUG, logging.DEBUG]


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        (Recorded(), "hooks must be a list of CoordinationHooks, e.g. hooks=\\[h\\]"),
        ([object()], "hooks must be CoordinationHooks .* got object"),
        (42, "hooks must be a list of CoordinationHooks, got 42"),
    ],
)
def test_bad_hooks_are_refused_with_what_to_give(hooks: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        CoordinatorConfig.from_settings(GROUP, {"bootstrap_servers": "x:1", "hooks": hooks})


def test_no_hooks_may_be_said_with_none_as_with_an_empty_list() -> None:
    config = CoordinatorConfig.from_settings(GROUP, {"bootstrap_servers": "x:1", "hooks": None})
    assert config.hooks == ()


def test_engine_log_records_carry_group_member_and_generation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = HookedHarness()
    with caplog.at_level(logging.INFO, logger="coordination.member"):
        h.join_as_leader()
    stable_record = next(r for r in caplog.records if "stable in generation" in r.getMessage())
    assert (stable_record.group_id, stable_record.member_id, stable_record.generation) == (  # type: ignore[attr-defined]
        GROUP,
        "m-1",
        1,
    )
