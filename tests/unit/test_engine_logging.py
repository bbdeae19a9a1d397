"""What the engine logs at which level: routine retries (a coordinator loading the group,
a rebalance under way, a coordinator that moved) at INFO, as Kafka's clients log them;
WARNING only for what needs a person (a problem that lasts, an answer the engine does not
expect, a user callback that failed).

Driven like tests/unit/test_engine.py (scripted transport, manual clock).
"""

from __future__ import annotations

import logging

import pytest

from coordination._protocol.error_codes import ErrorCode as E
from coordination.testing import TransportError
from coordination.testing import messages as m

from .test_engine import NODE, Harness, joined


def records(caplog: pytest.LogCaptureFixture, *texts: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if all(t in r.getMessage() for t in texts)]


def retry_records(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return records(caplog, text, "retrying")


def first_join(h: Harness, *refusals: int) -> None:
    """A new member's first join, refused with each of ``refusals`` first."""
    h.prepare(NODE)
    for code in refusals:
        h.prepare(m.JoinGroupResponse(error_code=code))
    h.prepare(
        m.JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id="m-1"),
        joined("m-1", 1, leader="m-1"),
        m.SyncGroupResponse(error_code=0, protocol_type="test", protocol_name="v2"),
    )
    assert h.engine.join_group_if_needed(deadline=None)


def test_a_first_join_on_a_fresh_broker_logs_its_retry_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A new user's first join: the broker is still loading __consumer_offsets.
    caplog.set_level(logging.DEBUG, logger="coordination")
    first_join(Harness(), E.COORDINATOR_LOAD_IN_PROGRESS)
    (record,) = retry_records(caplog, "JoinGroup returned COORDINATOR_LOAD_IN_PROGRESS")
    assert record.levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_retry_that_keeps_failing_warns_once_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    # Retrying for half a minute is no longer routine: a person may need to look.
    caplog.set_level(logging.DEBUG, logger="coordination")
    h = Harness(retry_backoff_ms=1_000, retry_backoff_max_ms=10_000)
    first_join(h, *[E.COORDINATOR_LOAD_IN_PROGRESS] * 8)
    levels = [r.levelno for r in retry_records(caplog, "COORDINATOR_LOAD_IN_PROGRESS")]
    assert levels[0] == logging.INFO
    assert logging.WARNING in levels


def test_an_answer_the_engine_does_not_expect_is_retried_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="coordination")
    first_join(Harness(), E.UNKNOWN_SERVER_ERROR)
    (record,) = retry_records(caplog, "JoinGroup returned UNKNOWN_SERVER_ERROR")
    assert record.levelno == logging.WARNING


def test_a_heartbeat_answered_by_a_loading_coordinator_logs_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(heartbeat_interval_ms=1000)
    h.join_as_leader()
    caplog.set_level(logging.DEBUG, logger="coordination")
    h.clock.advance(1)
    h.prepare(m.HeartbeatResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS))
    h.engine.heartbeat_once()
    (record,) = retry_records(caplog, "COORDINATOR_LOAD_IN_PROGRESS")
    assert record.levelno == logging.INFO


def test_the_cluster_answering_after_one_failed_lookup_is_not_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A broker restart is routine: the first failure is INFO, and so is its end, unless the
    # member had warned that the cluster was unreachable.
    caplog.set_level(logging.DEBUG, logger="coordination")
    h = Harness()
    h.prepare(TransportError("connection refused"), response_type=m.FindCoordinatorResponse)
    h.prepare(NODE)
    assert h.engine.ensure_coordinator_ready(deadline=None)
    (record,) = records(caplog, "the cluster answers again")
    assert record.levelno == logging.INFO
