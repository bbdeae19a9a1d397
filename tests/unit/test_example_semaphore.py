"""The example semaphore's choice of holders (examples/semaphore.py's ``grant``)."""

from __future__ import annotations

import json

import pytest

from coordination import Member
from coordination.errors import ConfigurationError
from examples.semaphore import Semaphore, grant


def member(member_id: str, *, permits: int = 2, want: bool = True, held: bool = False) -> Member:
    ask = {"permits": permits, "want": want, "held": held}
    return Member(member_id, None, json.dumps(ask).encode())


def test_at_most_n_of_the_members_that_want_one_get_a_permit_by_member_id() -> None:
    members = [member("c"), member("a"), member("b", want=False), member("d")]
    assert grant(members) == {"a": True, "b": False, "c": True, "d": False}


def test_the_members_that_held_a_permit_keep_it() -> None:
    members = [member("a"), member("b"), member("c", held=True), member("d", held=True)]
    assert grant(members) == {"a": False, "b": False, "c": True, "d": True}


def test_the_smallest_number_of_permits_advertised_wins() -> None:
    members = [member("a", permits=3), member("b", permits=1), member("c", permits=3)]
    assert grant(members) == {"a": True, "b": False, "c": False}


def test_unreadable_metadata_asks_for_nothing_and_gives_out_nothing() -> None:
    members = [member("a"), Member("b", None, b"\xff")]
    assert grant(members) == {"a": False, "b": False}


@pytest.mark.parametrize("permits", [0, -1, True, 1.5])
def test_permits_must_be_a_positive_int(permits: object) -> None:
    with pytest.raises(ConfigurationError, match="permits must be an int >= 1"):
        Semaphore("g", permits=permits, bootstrap_servers="localhost:9092")  # type: ignore[arg-type]
