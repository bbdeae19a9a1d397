"""What the wake-up channel makes of the records under its group's key.

Anyone allowed to write to the topic can put anything there: a record that is not what a
member writes is skipped, whatever its bytes, and what reaches the logs is cut short.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordination._transport.wakeups import KafkaWakeups


def channel() -> tuple[KafkaWakeups, list[tuple[str, int | None]]]:
    woken: list[tuple[str, int | None]] = []
    wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]
    wakeups._wake = lambda reason, left: woken.append((reason, left))
    return wakeups, woken


def record(**fields: Any) -> bytes:
    return json.dumps({"sender": "another", "member": "m-2", "event": "join", **fields}).encode()


def test_a_departure_names_the_generation_left() -> None:
    wakeups, woken = channel()
    wakeups._received(record(event="leave", generation=7))
    wakeups._received(record(event="join", generation=7))  # only a departure's counts
    assert woken == [("member m-2 announced: leave", 7), ("member m-2 announced: join", None)]


@pytest.mark.parametrize("generation", [True, 7.0, "7", None, [7]])
def test_a_generation_that_is_not_an_integer_makes_a_plain_wakeup(generation: Any) -> None:
    wakeups, woken = channel()
    wakeups._received(record(event="leave", generation=generation))
    assert woken == [("member m-2 announced: leave", None)]


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"\xff\xfe",
        b"[" * 100_000,  # deep enough for RecursionError in the JSON parser
        b'{"sender": "x", "member": "m"}',
        json.dumps({"sender": "x", "member": {"a": 1}, "event": "leave"}).encode(),
        json.dumps({"sender": 1, "member": "m", "event": "leave"}).encode(),
        b"[1, 2]",
    ],
    ids=["none", "empty", "not-utf8", "deep", "no-event", "member-object", "sender-int", "list"],
)
def test_an_unreadable_record_is_skipped(raw: bytes | None) -> None:
    wakeups, woken = channel()
    wakeups._received(raw)
    assert woken == [] and wakeups.stats.received == 0


def test_what_reaches_the_logs_is_cut_short_and_escaped() -> None:
    wakeups, woken = channel()
    wakeups._received(record(member="m\nFORGED LOG LINE", event="x" * 10_000))
    ((reason, _),) = woken
    assert "\n" not in reason and "m\\nFORGED LOG LINE" in reason
    assert len(reason) < 500 and reason.endswith("...")


def test_its_own_records_do_not_wake_it() -> None:
    wakeups, woken = channel()
    wakeups._received(record(sender=wakeups._sender))
    assert woken == []
