"""What the wake-up channel makes of the records under its group's key.

Anyone allowed to write to the topic can put anything there: a record that is not what a
member writes is skipped, whatever its bytes, and what reaches the logs is cut short.
"""

from __future__ import annotations

import json
import threading
import time
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


@pytest.mark.parametrize("route_known", [True, False], ids=["from-the-caller", "queued"])
def test_a_leaving_members_wake_up_goes_out_before_its_timeline_and_close_waits_for_both(
    route_known: bool,
) -> None:
    # The others rejoin on the wake-up; the member's timeline (rebalances it completed, sent
    # TIMELINE_DELAY_S late) can come second, but close() must not cut it off. With the
    # partition known, the closing thread sends the wake-up itself, before announce returns.
    wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]
    produced: list[tuple[str, str]] = []
    timeline_may_go = threading.Event()

    def produce(route: Any, items: list[Any], timeout_s: float | None = None) -> None:
        if items[0].timeline:
            assert timeline_may_go.wait(5)
        events = ",".join(item.value.get("event", "timeline") for item in items)
        produced.append((events, threading.current_thread().name))

    wakeups._produce = produce  # type: ignore[method-assign]
    wakeups._located = lambda timeline=False: None  # type: ignore[method-assign,assignment,misc]
    if route_known:
        wakeups._route = object()  # type: ignore[assignment]
    publisher = threading.Thread(target=wakeups._publish, name="publisher", daemon=True)
    wakeups._threads.append(publisher)
    publisher.start()
    wakeups.record_rebalance({"generation": 3})
    wakeups.announce("m-1", "leave", 3, timeout_s=1.0)
    sender = threading.current_thread().name if route_known else "publisher"
    deadline = time.monotonic() + 5
    while not produced and time.monotonic() < deadline:
        time.sleep(0.001)
    assert produced == [("leave", sender)]  # not held up by the timeline
    wakeups.flush(0.1)
    assert wakeups._last is not None and not wakeups._last.done.is_set()  # close() waits on
    timeline_may_go.set()
    wakeups.flush(5)
    assert wakeups._last.done.is_set()
    assert produced == [("leave", sender), ("timeline", "publisher")]
    wakeups.close(1)
    assert not publisher.is_alive()
