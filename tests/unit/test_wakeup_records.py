"""What the wake-up channel makes of the records under its group's key.

Anyone allowed to write to the topic can put anything there: a record that is not what a
member writes is skipped, whatever its bytes, and what reaches the logs is cut short.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords

from coordination._transport import wakeups as wakeups_module
from coordination._transport.wakeups import KafkaWakeups, _Route, _SharedListener
from coordination.transport import TransportError


def channel() -> tuple[KafkaWakeups, list[tuple[str, int | None]]]:
    woken: list[tuple[str, int | None]] = []
    wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]

    def wake(
        reason: str, left_generation: int | None = None, *, probed: set[int] | None = None
    ) -> None:
        woken.append((reason, left_generation))

    wakeups._wake = wake
    return wakeups, woken


def record(**fields: Any) -> bytes:
    return json.dumps({"sender": "another", "member": "m-2", "event": "join", **fields}).encode()


def read(wakeups: KafkaWakeups, raw: bytes | None) -> None:
    """``raw`` as the listener ``wakeups`` shares hands it over when its fetch reads it."""
    listener = _SharedListener(("g", "topic", "settings"), "g")
    listener._members = [wakeups]
    listener._received(raw)


def test_a_departure_names_the_generation_left() -> None:
    wakeups, woken = channel()
    read(wakeups, record(event="leave", generation=7))
    read(wakeups, record(event="join", generation=7))  # only a departure's counts
    assert woken == [("member m-2 announced: leave", 7), ("member m-2 announced: join", None)]


@pytest.mark.parametrize("generation", [True, 7.0, "7", None, [7]])
def test_a_generation_that_is_not_an_integer_makes_a_plain_wakeup(generation: Any) -> None:
    wakeups, woken = channel()
    read(wakeups, record(event="leave", generation=generation))
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
    read(wakeups, raw)
    assert woken == [] and wakeups.stats.received == 0


def test_what_reaches_the_logs_is_cut_short_and_escaped() -> None:
    wakeups, woken = channel()
    read(wakeups, record(member="m\nFORGED LOG LINE", event="x" * 10_000))
    ((reason, _),) = woken
    assert "\n" not in reason and "m\\nFORGED LOG LINE" in reason
    assert len(reason) < 500 and reason.endswith("...")


def test_its_own_records_do_not_wake_it() -> None:
    wakeups, woken = channel()
    read(wakeups, record(sender=wakeups._sender))
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


@pytest.mark.parametrize("first_lookup", ["finds it", "fails"])
def test_the_publisher_looks_up_the_partition_before_the_first_wake_up(first_lookup: str) -> None:
    # A joining member announces its join right after its JoinGroup: with the partition
    # already known, no metadata round trip comes first. A failed early lookup is left to
    # the first wake-up, which looks it up again.
    wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]
    lookups: list[str] = []
    produced: list[str] = []
    route = _Route(partition=3, leader=1, produce_node=1, fetch_node="wakeups-in-1")

    def locate(*, create: bool = True, timeline: bool = False) -> _Route:
        lookups.append(threading.current_thread().name)
        if first_lookup == "fails" and len(lookups) == 1:
            raise TransportError("no answer")
        return route

    def produce(where: Any, items: list[Any], timeout_s: float | None = None) -> None:
        produced.append(",".join(item.value["event"] for item in items))

    wakeups._locate = locate  # type: ignore[method-assign]
    wakeups._produce = produce  # type: ignore[method-assign,assignment]
    publisher = threading.Thread(target=wakeups._publish, name="publisher", daemon=True)
    wakeups._threads.append(publisher)
    publisher.start()
    deadline = time.monotonic() + 5
    while not lookups and time.monotonic() < deadline:
        time.sleep(0.001)
    assert lookups == ["publisher"]  # before anything was announced
    wakeups.announce("m-1", "join")
    deadline = time.monotonic() + 5
    while not produced and time.monotonic() < deadline:
        time.sleep(0.001)
    assert produced == ["join"]
    assert lookups == ["publisher"] * (1 if first_lookup == "finds it" else 2)
    wakeups.close(1)
    assert not publisher.is_alive()


def sharing(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[KafkaWakeups], list[tuple[str, list[Any]]]]:
    """``count`` members sharing one listener, their publishers running, the timeline's
    delay cut to 0.3 s; what they produce: (the publisher's name, the records' generations
    or events)."""
    monkeypatch.setattr(wakeups_module, "TIMELINE_DELAY_S", 0.3)
    listener = _SharedListener(("g", "topic", "settings"), "g")
    listener._thread = threading.Thread(target=lambda: None)  # nothing to read here
    listener._thread.start()
    produced: list[tuple[str, list[Any]]] = []
    members = []
    for i in range(count):
        wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]

        def produce(
            route: Any, items: list[Any], timeout_s: float | None = None, member: Any = wakeups
        ) -> None:
            if items[0].timeline:
                time.sleep(0.1)  # a close that does not wait for the batch would miss it
            if member._transport.closed:
                member.failed_sends += 1
                raise TransportError("transport is closed")
            what = [item.value.get("event", item.value.get("generation")) for item in items]
            produced.append((threading.current_thread().name, what))

        wakeups._produce = produce  # type: ignore[method-assign]
        wakeups.failed_sends = 0  # type: ignore[attr-defined]

        def send_kafka(*args: Any, member: Any = wakeups, **kwargs: Any) -> Any:
            # A retry looks the partition up again: a closed transport refuses it too.
            if member._transport.closed:
                raise TransportError("transport is closed")
            raise AssertionError("only a closed transport's lookups are expected here")

        wakeups._transport = SimpleNamespace(  # type: ignore[assignment]
            closed=False, send_kafka=send_kafka
        )
        wakeups._route = _Route(partition=3, leader=1, produce_node=1, fetch_node="in")
        wakeups._timeline_route = wakeups._route
        wakeups._listener = listener
        listener._members.append(wakeups)
        publisher = threading.Thread(target=wakeups._publish, name=f"publisher-{i}", daemon=True)
        wakeups._threads.append(publisher)
        publisher.start()
        members.append(wakeups)
    return members, produced


def wait_for(produced: list[Any], count: int) -> None:
    deadline = time.monotonic() + 5
    while len(produced) < count and time.monotonic() < deadline:
        time.sleep(0.005)


def test_members_sharing_a_listener_send_their_timeline_records_in_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rebalance of 50 members in one process: one Produce, not 50 (each costs the
    # process about a millisecond of CPU, the rebalance's own cost).
    members, produced = sharing(3, monkeypatch)
    started = time.monotonic()
    for generation, wakeups in enumerate(members):
        wakeups.record_rebalance({"generation": generation})
    wait_for(produced, 1)
    assert time.monotonic() - started >= 0.3  # the delay still holds
    time.sleep(0.4)  # a second batch would be out by now
    assert produced == [("publisher-0", [0, 1, 2])]  # the first member's publisher
    assert members[0].stats.timeline_sent == 3
    for wakeups in members:
        wakeups.close(1)


@pytest.mark.parametrize("route_known", [True, False], ids=["route known", "route not known"])
def test_a_leaving_member_sends_the_shared_timeline_and_close_waits_for_it(
    monkeypatch: pytest.MonkeyPatch, route_known: bool
) -> None:
    members, produced = sharing(2, monkeypatch)
    leaving = members[1]
    if not route_known:  # the departure is queued for the publisher, which looks it up
        route = leaving._route
        leaving._route = None
        leaving._locate = lambda create=True, timeline=False: route  # type: ignore[method-assign,assignment,misc]
    members[0].record_rebalance({"generation": 1})
    leaving.record_rebalance({"generation": 2})
    # The second member leaves: its departure first, then the batch (its own record in it).
    leaving.announce("m-2", "leave", 2, timeout_s=1.0)
    leaving.flush(5)
    departed_by = "MainThread" if route_known else "publisher-1"
    assert produced == [(departed_by, ["leave"]), ("publisher-1", [1, 2])]
    leaving.close(1)
    time.sleep(0.5)  # the first member's delay is over: nothing is left to send
    assert produced == [(departed_by, ["leave"]), ("publisher-1", [1, 2])]
    members[0].close(1)


def test_a_member_closing_without_leaving_hands_the_shared_timeline_to_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    members, produced = sharing(3, monkeypatch)
    members[0].record_rebalance({"generation": 1})
    members[1].record_rebalance({"generation": 1})
    members[0].close(1)  # it was to send the batch; a static member leaves no departure
    wait_for(produced, 1)
    assert produced == [("publisher-1", [1, 1])]
    members[2].record_rebalance({"generation": 2})  # a new batch, a new sender
    wait_for(produced, 2)
    assert produced == [("publisher-1", [1, 1]), ("publisher-2", [2])]
    for wakeups in members[1:]:
        wakeups.close(1)


def test_a_handed_over_batch_goes_out_when_it_was_due_not_a_delay_after_the_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    members, produced = sharing(2, monkeypatch)
    monkeypatch.setattr(wakeups_module, "TIMELINE_DELAY_S", 2.0)
    started = time.monotonic()
    members[0].record_rebalance({"generation": 1})
    time.sleep(1.8)
    members[0].close(1)  # 0.2 s before its batch falls due
    wait_for(produced, 1)
    elapsed = time.monotonic() - started
    assert produced == [("publisher-1", [1])]
    assert 2.0 <= elapsed < 3.0  # due 2 s after the record, not 2 s after the close
    members[1].close(1)


def test_records_of_others_that_arrive_while_a_departure_goes_out_stay_for_their_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The leaving member's flush() returns once its departure is out (it held no records):
    # its transport closes next, so it must not take records that arrive meanwhile.
    members, produced = sharing(2, monkeypatch)
    leaving, staying = members[1], members[0]
    route = leaving._route
    leaving._route = None  # the departure goes to the publisher, which looks it up

    def locate(create: bool = True, timeline: bool = False) -> Any:
        staying.record_rebalance({"generation": 5})  # arrives during the lookup
        return route

    leaving._locate = locate  # type: ignore[method-assign]
    leaving.announce("m-2", "leave", 4, timeout_s=1.0)
    leaving.flush(5)
    leaving._transport.closed = True  # type: ignore[misc]
    leaving.close(1)
    wait_for(produced, 2)
    assert produced == [("publisher-1", ["leave"]), ("publisher-0", [5])]
    staying.close(1)


def test_a_sender_stopping_before_its_batch_went_out_gives_it_to_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    members, produced = sharing(2, monkeypatch)
    sender, other = members
    sender.record_rebalance({"generation": 1})
    other.record_rebalance({"generation": 1})
    sender._transport.closed = True  # type: ignore[misc]  # closing: its sends fail
    # Its batch fell due and failed; it retries after a backoff (its lookups fail too).
    deadline = time.monotonic() + 5
    while sender.failed_sends == 0 and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.01)
    sender.close(1)
    wait_for(produced, 1)
    assert produced == [("publisher-1", [1, 1])]
    other.close(1)


def test_a_batch_too_big_for_one_request_goes_out_whole_in_several() -> None:
    wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]
    route = _Route(partition=3, leader=1, produce_node=1, fetch_node="in")
    wakeups._locate = lambda create=True, timeline=False: route  # type: ignore[method-assign,misc]
    sent: list[int] = []
    requests: list[int] = []

    def send(request: Any, node: Any, timeout_s: float | None = None) -> Any:
        (topic,) = request.topic_data
        (partition,) = topic.partition_data
        records = [r for batch in MemoryRecords(partition.records) for r in batch]
        requests.append(len(records))
        if len(requests) == 3:  # the third request is lost: what it held is sent again
            raise TransportError("no answer")
        sent.extend(json.loads(r.value)["generation"] for r in records)
        return _answer(0)

    wakeups._send = send  # type: ignore[method-assign]
    entry = {"reason": "x" * 300}
    items = [
        wakeups_module._Announcement(b"g\x00timeline", {**entry, "generation": i}, timeline=True)
        for i in range(400)
    ]
    assert wakeups._produce_retried(items)
    assert len(requests) >= 4 and max(requests) < 400  # several, the lost one again
    assert sorted(sent) == list(range(400))  # every record once, none twice


def _answer(error_code: int) -> Any:
    """A ProduceResponse as the channel reads it."""
    partition = SimpleNamespace(error_code=error_code)
    return SimpleNamespace(responses=[SimpleNamespace(partition_responses=[partition])])


def routed() -> tuple[KafkaWakeups, list[tuple[str, str]]]:
    """A channel that knows its partition (3, led by broker 1) and records what it produces."""
    wakeups = KafkaWakeups(None, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]
    produced: list[tuple[str, str]] = []

    def produce(route: Any, items: list[Any], timeout_s: float | None = None) -> None:
        events = ",".join(item.value.get("event", "timeline") for item in items)
        produced.append((events, threading.current_thread().name))

    wakeups._produce = produce  # type: ignore[method-assign]
    wakeups._route = _Route(partition=3, leader=1, produce_node=1, fetch_node="wakeups-in-1")
    return wakeups, produced


def test_a_departure_that_rode_behind_the_leave_is_not_sent_again() -> None:
    wakeups, produced = routed()
    departure = wakeups.departure("m-1", 7)
    assert departure is not None and departure.broker_id == 1  # the partition's leader
    request = departure.request()
    (topic,) = request.topic_data
    (partition,) = topic.partition_data
    assert (topic.name, partition.index) == ("coordination.wakeups", 3)
    ((record,),) = [list(batch) for batch in MemoryRecords(partition.records)]
    assert record.key == b"g"
    assert json.loads(record.value) == {
        "member": "m-1",
        "event": "leave",
        "generation": 7,
        "sender": wakeups._sender,
    }
    departure.answered(_answer(0))
    wakeups.announce("m-1", "leave", 7, timeout_s=1.0)
    assert produced == []
    assert (wakeups.stats.sent, wakeups.stats.sent_with_leave) == (1, 1)
    # What is queued tells the publisher to send the pending timeline: close() waits for it.
    assert wakeups._last is not None and wakeups._last.flush_timeline


@pytest.mark.parametrize(
    "answer",
    [_answer(6), TransportError("no answer")],
    ids=["refused (NOT_LEADER_OR_FOLLOWER)", "unanswered"],
)
def test_a_departure_that_did_not_get_through_behind_the_leave_is_sent_after_it(
    answer: Any,
) -> None:
    wakeups, produced = routed()
    departure = wakeups.departure("m-1", 7)
    assert departure is not None
    departure.request()
    departure.answered(answer)
    assert not departure.delivered and wakeups.stats.sent_with_leave == 0
    wakeups._located = lambda timeline=False: None  # type: ignore[method-assign,assignment,misc]
    publisher = threading.Thread(target=wakeups._publish, name="publisher", daemon=True)
    wakeups._threads.append(publisher)
    publisher.start()
    wakeups.announce("m-1", "leave", 7, timeout_s=1.0)
    wakeups.flush(5)
    # A refusal means the partition's leader moved: it is queued and sent once located again.
    assert [event for event, _ in produced] == ["leave"]
    assert wakeups.stats.sent == 1
    wakeups.close(1)


def test_without_its_partition_known_a_departure_cannot_ride_along() -> None:
    wakeups, _ = channel()
    assert wakeups.departure("m-1", 7) is None


def test_one_read_wakes_every_member_sharing_the_listener_but_the_one_that_sent_it() -> None:
    members = [channel() for _ in range(3)]
    listener = _SharedListener(("g", "topic", "settings"), "g")
    listener._members = [wakeups for wakeups, _ in members]
    sender = members[1][0]._sender
    listener._received(record(sender=sender, event="leave", generation=4))
    listener._received(b"not json")
    woken = [w for _, w in members]
    assert woken == [[("member m-2 announced: leave", 4)], [], [("member m-2 announced: leave", 4)]]
    assert [wakeups.stats.received for wakeups, _ in members] == [1, 0, 1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() exists only on POSIX")
def test_a_forked_child_starts_listeners_of_its_own() -> None:
    # The child has none of its parent's threads: a listener found in the registry there
    # would never read.
    key = ("g", "topic", "settings")
    _SharedListener._registry[key] = _SharedListener(key, "g")
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if not _SharedListener._registry else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert key in _SharedListener._registry  # the parent's are untouched
    finally:
        _SharedListener._registry.pop(key, None)


def test_the_shared_listener_reads_on_through_the_next_member_when_its_transport_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # However the closed transport fails the read in progress, the listener moves to the next
    # member's at once: no error logged, no backoff that would leave the others unwoken.
    woken: list[str] = []
    ready = threading.Event()

    def member(name: str) -> KafkaWakeups:
        transport = SimpleNamespace(closed=False, sharing_key="same settings")
        wakeups = KafkaWakeups(transport, group_id="g", request_timeout_ms=1000)  # type: ignore[arg-type]
        wakeups._wake = lambda reason, ended=None, probed=None: woken.append(name)
        wakeups._located = lambda timeline=False: "route"  # type: ignore[method-assign,assignment,misc]
        wakeups._end_offset = lambda route, timestamp=-1: 0  # type: ignore[method-assign]

        def fetch(route: Any, position: int, **kw: Any) -> int:
            time.sleep(0.01)  # a long poll
            if transport.closed:
                raise RuntimeError("a socket torn down under the read")
            if name == "b" and ready.is_set():
                ready.clear()
                kw["received"](record())
                return position + 1
            return position

        wakeups._fetch = fetch  # type: ignore[method-assign]
        return wakeups

    a, b = member("a"), member("b")
    listener = _SharedListener.join(a)
    assert _SharedListener.join(b) is listener
    try:
        time.sleep(0.05)  # reading through a's transport
        a._transport.closed = True  # type: ignore[misc]
        ready.set()
        deadline = time.monotonic() + 2.5  # the listener's backoff after an error is 5 s
        while "b" not in woken and time.monotonic() < deadline:
            time.sleep(0.005)
        assert "b" in woken
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        listener.leave(a)
        stopped = listener.leave(b)
        assert stopped is not None
        stopped.join(2)
        assert not stopped.is_alive()
