"""The error tree: one root, a class per code the user must act on, messages that say what to do."""

from __future__ import annotations

import pytest

from coordination import errors
from coordination._engine import classify
from coordination._protocol.error_codes import ErrorCode


def test_every_error_derives_from_the_root() -> None:
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, errors.CoordinationError), name


def test_broker_error_names_group_member_code_and_what_to_do() -> None:
    e = errors.broker_error(
        ErrorCode.FENCED_INSTANCE_ID, group_id="orders", member_id="w-1-x", api="JoinGroup"
    )
    assert isinstance(e, errors.FencedInstanceError)
    text = str(e)
    for part in ("orders", "w-1-x", "JoinGroup", "FENCED_INSTANCE_ID", "(82)", "its own id"):
        assert part in text
    assert (e.code, e.error_name, e.retriable) == (82, "FENCED_INSTANCE_ID", False)


def test_unknown_codes_map_to_the_base_broker_error() -> None:
    e = errors.broker_error(12345, group_id="g")
    assert type(e) is errors.BrokerError
    assert "UNKNOWN_ERROR_CODE_12345" in str(e)


@pytest.mark.parametrize(
    "table",
    [classify.JOIN_GROUP, classify.SYNC_GROUP, classify.HEARTBEAT, classify.FIND_COORDINATOR],
)
def test_every_fatal_reaction_has_a_fatal_error_class(table: dict[int, classify.Reaction]) -> None:
    for code, reaction in table.items():
        error = errors.broker_error(code, group_id="g")
        if reaction.next is classify.Next.FATAL and code != ErrorCode.INVALID_REQUEST:
            assert isinstance(error, errors.FatalBrokerError), ErrorCode(code).name
        elif reaction.next is not classify.Next.FATAL:
            assert error.retriable, ErrorCode(code).name
