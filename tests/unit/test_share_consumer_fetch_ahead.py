"""``ShareConsumer(fetch_ahead=True)``: the next round of ShareFetches goes out as poll
returns, against the small broker model of test_share_consumer.py (whose share sessions
refuse a request sent out of turn, so two requests at once on a session would show)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from coordination._protocol import share_group as sg
from coordination._protocol.error_codes import ErrorCode as E
from coordination.errors import ConfigurationError, CoordinatorStateError, GroupAuthorizationError
from coordination.hooks import CoordinationHooks, RecordsUnpolled
from recipes.queues import (
    AcknowledgementUncertainError,
    AcknowledgeType,
    AcquisitionLockExpiredError,
    ShareConsumer,
)

from .test_share_consumer import LEADERS, Broker, fetches, make, poll_n

A = AcknowledgeType


class GatedBroker(Broker):
    """The broker model, calling ``on_fetch(request)`` (under its lock) before it answers a
    ShareFetch."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.on_fetch: Any = None

    def _fetch(self, r: sg.ShareFetchRequest, leader: Any) -> sg.ShareFetchResponse:
        if self.on_fetch is not None:
            self.on_fetch(r)
        return super()._fetch(r, leader)


def wait_for(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def listening(broker: Broker, **kw: Any) -> tuple[ShareConsumer, list[tuple[Any, ...]]]:
    """A consumer fetching ahead, and the outcomes its ``on_acknowledged`` hears."""
    heard: list[tuple[Any, ...]] = []
    c = make(broker, fetch_ahead=True, on_acknowledged=lambda *outcome: heard.append(outcome), **kw)
    return c, heard


def acks_of(request: sg.ShareFetchRequest) -> list[sg.AcknowledgementBatch]:
    return [b for t in request.topics for p in t.partitions for b in p.acknowledgement_batches]


def test_the_next_fetch_goes_out_as_poll_returns_and_the_next_poll_hands_its_records_out() -> None:
    broker = Broker(records=4)
    c = make(broker, fetch_ahead=True, max_poll_records=2)
    first = poll_n(c, 2)
    # Acquired for this consumer before it asks again: the round sent ahead, not waiting.
    wait_for(lambda: broker.state[(0, 3)][0] == "acquired")
    assert fetches(broker)[-1].max_wait_ms == 0
    for record in first:
        c.acknowledge(record)
    second = c.poll(timeout_ms=1000)
    assert [r.offset for r in second] == [2, 3]
    # The acknowledgements went with the round this poll sent ahead.
    wait_for(lambda: broker.state[(0, 1)][0] == "acknowledged")
    assert acks_of(fetches(broker)[-1]) == [sg.AcknowledgementBatch(0, 1, (A.ACCEPT,))]
    for record in second:
        c.acknowledge(record)
    assert c.commit() == {("jobs", 0): None}
    assert [st[0] for st in broker.state.values()] == ["acknowledged"] * 4
    # One request at a time on the session: every epoch in turn, none refused.
    epochs = [r.share_session_epoch for r in fetches(broker)]
    epochs += [r.share_session_epoch for r in broker.requests(sg.ShareAcknowledgeRequest)]
    assert sorted(epochs) == list(range(len(epochs)))
    c.close()


def send_ahead(c: ShareConsumer, broker: Broker) -> list[Any]:
    """Poll once more, taking the records fetched ahead: this poll's acknowledgements go
    out in the next round sent ahead, which stays out (untaken) until the next call."""
    wait_for(lambda: broker.state[(0, 3)][0] == "acquired")
    records = c.poll(timeout_ms=1000)
    assert [r.offset for r in records] == [2, 3]
    return records


def test_an_acknowledgement_out_in_the_round_is_final_but_a_renew_out_may_be_followed() -> None:
    broker = Broker(records=4)
    c = make(broker, fetch_ahead=True, max_poll_records=2)
    done, renewed = poll_n(c, 2)
    c.acknowledge(done, A.ACCEPT)
    c.acknowledge(renewed, A.RENEW)
    send_ahead(c, broker)
    with pytest.raises(CoordinatorStateError, match="not held"):
        c.acknowledge(done, A.RELEASE)  # out already: it cannot be taken back
    c.acknowledge(renewed, A.ACCEPT)  # still this consumer's once the RENEW lands
    assert c.commit() == {("jobs", 0): None}
    assert c.metrics().lock_renewals == 1
    assert [broker.state[(0, o)][0] for o in (0, 1)] == ["acknowledged"] * 2
    c.close()


def test_an_acknowledgement_made_after_a_renew_that_failed_is_reported_with_it() -> None:
    broker = Broker(records=4)
    c, heard = listening(broker, max_poll_records=2)
    _, renewed = poll_n(c, 2)
    c.acknowledge(renewed, A.RENEW)
    broker.expire(0, 1)  # too late: the RENEW will be refused
    send_ahead(c, broker)
    c.acknowledge(renewed, A.ACCEPT)  # made while the RENEW is out
    c.commit()
    ((partition, offsets, error),) = heard
    assert (partition, offsets) == (("jobs", 0), (1,))
    assert isinstance(error, AcquisitionLockExpiredError)
    # No ACCEPT was sent: it would have applied to the next delivery, taken by the round.
    assert broker.state[(0, 1)][:2] == ["acquired", 2]
    c.close()


def test_an_acknowledgement_made_while_the_round_delivers_the_record_again_is_not_sent() -> None:
    # The record's lock ran out at the broker while the application worked on it, and the
    # round sent ahead acquired it again for this consumer: the ACCEPT the application made
    # meanwhile was for the delivery that ended; sent, it would apply to the new one, which
    # the application has not seen yet.
    broker = GatedBroker(records=1)

    def expire_the_first_delivery(_: sg.ShareFetchRequest) -> None:
        st = broker.state[(0, 0)]
        if st[0] == "acquired" and st[1] == 1:
            st[0], st[2] = "available", None

    broker.on_fetch = expire_the_first_delivery
    c, heard = listening(broker)
    (first,) = poll_n(c, 1)
    wait_for(lambda: broker.state[(0, 0)][1] == 2)  # delivered again, in the round ahead
    c.acknowledge(first, A.ACCEPT)
    (again,) = c.poll(timeout_ms=1000)
    assert (again.offset, again.delivery_count) == (0, 2)
    ((partition, offsets, error),) = heard
    assert (partition, offsets) == (("jobs", 0), (0,))
    assert isinstance(error, AcquisitionLockExpiredError)
    wait_for(lambda: len(fetches(broker)) >= 3)
    assert broker.state[(0, 0)][0] == "acquired"
    assert not any(acks_of(f) for f in fetches(broker))
    c.close()


def expiring_broker() -> GatedBroker:
    """A broker whose first delivery of record 0 runs out at the next fetch after it (the
    application took longer than the lock): that fetch acquires it again."""
    broker = GatedBroker(records=1)

    def expire_the_first_delivery(_: sg.ShareFetchRequest) -> None:
        st = broker.state[(0, 0)]
        if st[0] == "acquired" and st[1] == 1:
            st[0], st[2] = "available", None

    broker.on_fetch = expire_the_first_delivery
    return broker


def test_an_acknowledgement_made_after_a_commit_took_the_new_delivery_is_not_sent() -> None:
    broker = expiring_broker()
    c, heard = listening(broker)
    (first,) = poll_n(c, 1)
    wait_for(lambda: broker.state[(0, 0)][1] == 2)
    c.commit()  # takes the round (and the new delivery, for the next poll)
    c.acknowledge(first, A.ACCEPT)
    (again,) = c.poll(timeout_ms=1000)
    assert again.delivery_count == 2
    ((_, offsets, error),) = heard
    assert offsets == (0,) and isinstance(error, AcquisitionLockExpiredError)
    wait_for(lambda: len(fetches(broker)) >= 3)
    assert broker.state[(0, 0)][0] == "acquired"
    c.close()


def test_implicit_mode_does_not_accept_a_delivery_that_ended_for_the_new_one() -> None:
    broker = expiring_broker()
    c = make(broker, fetch_ahead=True, acknowledgement_mode="implicit")
    poll_n(c, 1)
    wait_for(lambda: broker.state[(0, 0)][1] == 2)
    (again,) = c.poll(timeout_ms=1000)  # would accept the first delivery's record
    assert again.delivery_count == 2
    wait_for(lambda: len(fetches(broker)) >= 3)
    assert broker.state[(0, 0)][0] == "acquired"  # not accepted: nobody worked on it yet
    c.close()


class StalledFetches(Broker):
    """The broker model, whose ShareFetches wait (outside its lock) while ``stalled`` is set,
    ``STALL_S`` each."""

    STALL_S = 3.0

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.stalled = threading.Event()

    def send(self, request: Any, response_type: type[Any], **kw: Any) -> Any:
        if isinstance(request, sg.ShareFetchRequest) and self.stalled.is_set():
            time.sleep(self.STALL_S)
        return super().send(request, response_type, **kw)


def test_close_does_not_wait_past_its_timeout_for_the_round_nor_release_what_it_carries() -> None:
    broker = StalledFetches(records=4)
    c, heard = listening(broker, max_poll_records=2)
    done, _ = poll_n(c, 2)
    c.acknowledge(done, A.ACCEPT)
    wait_for(lambda: broker.state[(0, 3)][0] == "acquired")
    broker.stalled.set()  # the round the next poll sends (carrying the ACCEPT) stays out
    assert len(c.poll(timeout_ms=1000)) == 2
    began = time.monotonic()
    c.close(timeout=0.2)
    assert time.monotonic() - began < broker.STALL_S - 0.5  # not waiting for the round
    uncertain = [o for _, o, e in heard if isinstance(e, AcknowledgementUncertainError)]
    assert uncertain == [(0,)]
    released = [
        b
        for r in broker.requests(sg.ShareAcknowledgeRequest)
        for t in r.topics
        for p in t.partitions
        for b in p.acknowledgement_batches
        if b.first_offset <= 0 <= b.last_offset
    ]
    assert not released  # the ACCEPT out was not turned into a RELEASE
    # What the round acquires is never named: the metric says a round was given up.
    assert c.metrics().rounds_abandoned == 1


def test_a_round_that_failed_reports_its_acknowledgements_uncertain() -> None:
    broker = Broker(records=4)
    c, heard = listening(broker, max_poll_records=2)
    done, _ = poll_n(c, 2)
    c.acknowledge(done, A.ACCEPT)
    wait_for(lambda: broker.state[(0, 3)][0] == "acquired")
    broker.then(sg.ShareFetchResponse, int(E.GROUP_AUTHORIZATION_FAILED))
    assert len(c.poll(timeout_ms=1000)) == 2  # the round it sends (with the ACCEPT) fails
    with pytest.raises(GroupAuthorizationError):
        c.commit()
    c.close()  # (releases the rest: with the member stopped, uncertain too)
    assert c.metrics().rounds_abandoned == 0  # it came back (failed): not given up
    (_, offsets, error), *rest = heard
    assert offsets == (0,) and isinstance(error, AcknowledgementUncertainError)
    assert all(0 not in later for _, later, _ in rest)  # not released after its ACCEPT


class Unpolled(CoordinationHooks):
    def __init__(self) -> None:
        self.events: list[RecordsUnpolled] = []

    def on_records_unpolled(self, event: RecordsUnpolled) -> None:
        self.events.append(event)


def test_close_releases_the_records_fetched_ahead_and_names_them() -> None:
    broker = Broker(records=4)
    hooks = Unpolled()
    c = make(broker, fetch_ahead=True, max_poll_records=2, hooks=[hooks])
    poll_n(c, 2)
    wait_for(lambda: broker.state[(0, 3)][0] == "acquired")
    c.close()
    assert [st[0] for st in broker.state.values()] == ["available"] * 4
    assert [st[1] for st in broker.state.values()] == [1] * 4
    # Each spent a delivery unseen: the hooks are told which (a checker counts on it).
    [event] = hooks.events
    assert (event.topic, event.partition, event.reason) == ("jobs", 0, "closed")
    assert (event.offsets, event.delivery_counts) == ((2, 3), (1, 1))


def test_records_whose_lock_ran_out_before_the_next_poll_are_not_handed_out() -> None:
    broker = Broker(records=2, lock_ms=300)
    hooks = Unpolled()
    c = make(broker, fetch_ahead=True, max_poll_records=1, hooks=[hooks])
    poll_n(c, 1)
    wait_for(lambda: broker.state[(0, 1)][0] == "acquired")
    time.sleep(0.5)  # the application takes longer than the lock of the record fetched ahead
    later = c.poll(timeout_ms=20)
    assert all(r.delivery_count > 1 or r.offset != 1 for r in later)
    assert c.metrics().records_expired_unpolled == 1
    c.close()
    [event] = hooks.events
    assert (event.offsets, event.delivery_counts, event.reason) == ((1,), (1,), "lock_expired")


class SlowSecondLeader(Broker):
    """The broker model whose second leader answers its ``slow_fetch``-th ShareFetch
    ``slow_s`` late (the wait outside the model's lock: the first leader answers meanwhile)."""

    def __init__(self, slow_fetch: int, slow_s: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.leaders_apart = True
        self.slow_fetch, self.slow_s, self.fetches_to_second = slow_fetch, slow_s, 0

    def send(self, request: Any, response_type: type[Any], **kw: Any) -> Any:
        if isinstance(request, sg.ShareFetchRequest) and kw["coordinator"] == LEADERS[1]:
            self.fetches_to_second += 1
            if self.fetches_to_second == self.slow_fetch:
                time.sleep(self.slow_s)
        return super().send(request, response_type, **kw)


def test_of_a_round_only_the_records_whose_lock_ran_out_are_dropped_and_named() -> None:
    # Partition 0 (first leader) and 1 (second leader), offsets 0 and 1 in each. The round
    # fetched ahead by the first poll is answered by the second leader 0.6 s after the
    # first: 1.3 s later, partition 0's record has outlived its 1 s lock, partition 1's not.
    broker = SlowSecondLeader(slow_fetch=2, slow_s=0.6, records=4, partitions=2, lock_ms=1000)
    hooks = Unpolled()
    c = make(broker, fetch_ahead=True, max_poll_records=1, hooks=[hooks])
    first_began = c.member.clock.monotonic()
    first = poll_n(c, 2)
    assert sorted((r.partition, r.offset) for r in first) == [(0, 0), (1, 0)]
    time.sleep(1.3)
    second_began = c.member.clock.monotonic()
    later = c.poll(timeout_ms=0)
    assert [(r.partition, r.offset, r.delivery_count) for r in later] == [(1, 1, 1)]
    [event] = hooks.events
    assert (event.partition, event.offsets, event.delivery_counts, event.reason) == (
        0,
        (1,),
        (1,),
        "lock_expired",
    )
    # Fetched ahead: the round that acquired it went out during the first poll.
    assert first_began <= event.fetched_at < second_began
    c.close()


def test_records_of_a_round_whose_settling_failed_are_named_at_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = Broker(records=4)
    hooks = Unpolled()
    c = make(broker, fetch_ahead=True, max_poll_records=2, hooks=[hooks])
    poll_n(c, 2)
    wait_for(lambda: broker.state[(0, 3)][0] == "acquired")

    def failing(*args: object, **kw: object) -> None:
        raise CoordinatorStateError("the member stopped")  # as a stopped member's would

    monkeypatch.setattr(c, "_settle", failing)
    with pytest.raises(CoordinatorStateError):
        c.poll(timeout_ms=100)
    monkeypatch.undo()
    c.close()
    [event] = hooks.events
    assert (event.offsets, event.reason) == ((2, 3), "closed")


def test_fetch_ahead_must_be_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="fetch_ahead"):
        ShareConsumer("g", topics=["jobs"], fetch_ahead="yes", bootstrap_servers="x:1")  # type: ignore[arg-type]
