"""``Consumer.poll`` stops handing out records when the membership lease is about to end.

A member whose heartbeats go unanswered may be removed from the group, and its partitions
given to another member, one session after the last answered one. Within
``lease_margin_ms`` of that moment ``poll()`` returns nothing (and fetches nothing); once a
heartbeat is answered the records held come out, none skipped. Both protocols: the classic
one driven step by step on a manual clock (as tests/unit/partitioning/
test_consumer_positions.py), the KIP-848 one on real time over a small model of the broker
(as tests/unit/test_consumer_group_membership.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from coordination._protocol import messages as m
from coordination.errors import ConfigurationError
from coordination.transport import CoordinatorNode, TransportError
from recipes.partitioning import Consumer, TopicPartition
from tests.unit.partitioning.test_consumer_positions import (
    FakeFetcher,
    Harness,
    Record,
    committed,
    tp,
)
from tests.unit.test_consumer_group_membership import ORDERS, Broker


def offsets(records: Mapping[TopicPartition, list[Any]]) -> dict[TopicPartition, list[int]]:
    return {t: [r.offset for r in rs] for t, rs in records.items()}


def joined(**settings: Any) -> Harness:
    """A classic consumer owning partition 0 from offset 10; its lease just proven."""
    h = Harness(session_timeout_ms=10_000, heartbeat_interval_ms=1_000, **settings)
    h.join(0)
    h.offsets(lambda r: committed(p0=10), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    return h


def test_classic_poll_returns_nothing_within_the_margin_and_resumes_once_renewed() -> None:
    h = joined()
    h.fetcher.to_return = {tp(0): [Record(10)]}
    assert offsets(h.consumer.poll(0)) == {tp(0): [10]}

    # No heartbeat answered for 9.5 s of a 10 s session: 0.5 s left, under the margin
    # (lease_margin_ms defaults to heartbeat_interval_ms, 1 s).
    h.clock.advance(9.5)
    assert h.consumer.group.membership_lease() < 1.0
    h.fetcher.to_return = {tp(0): [Record(11)]}
    fetches, start = len(h.fetcher.polls), h.clock.now
    assert h.consumer.poll(timeout_ms=300) == {}
    assert len(h.fetcher.polls) == fetches  # not even fetched: nothing piles up
    assert h.clock.now >= start + 0.3  # it waited its timeout: a polling loop never spins
    assert h.consumer.position(tp(0)) == 11

    h.transport.prepare(m.HeartbeatResponse(error_code=0))
    h.engine.heartbeat_once()  # answered: the lease is renewed
    assert h.consumer.group.membership_lease() > 5.0
    assert offsets(h.consumer.poll(0)) == {tp(0): [11]}  # nothing skipped


def test_classic_poll_goes_on_to_the_lease_end_when_told_not_to_stop() -> None:
    h = joined(stop_at_lease_end=False)
    h.clock.advance(9.5)
    h.fetcher.to_return = {tp(0): [Record(10)]}
    assert offsets(h.consumer.poll(0)) == {tp(0): [10]}


def test_a_lease_margin_that_leaves_no_room_is_refused_with_the_way_out() -> None:
    with pytest.raises(ConfigurationError, match="stop_at_lease_end=False"):
        Harness(session_timeout_ms=2_000, heartbeat_interval_ms=1_000)
    Harness(session_timeout_ms=2_000, heartbeat_interval_ms=1_000, stop_at_lease_end=False)


class SilentBroker(Broker):
    """The model broker, which also answers OffsetFetch and can stop answering at all."""

    def __init__(self) -> None:
        super().__init__()
        self.target = frozenset({(ORDERS, 0)})
        self.silent = threading.Event()

    def send(
        self,
        request: Any,
        response_type: type[Any],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: Any = None,
    ) -> Any:
        if self.silent.is_set() and not isinstance(request, m.FindCoordinatorRequest):
            raise TransportError("no answer")
        if isinstance(request, m.OffsetFetchRequest):
            return m.OffsetFetchResponse(error_code=0, partitions=(("orders", 0, 10, "", 0),))
        return super().send(
            request, response_type, coordinator=coordinator, timeout_s=timeout_s, then=then
        )


class TopicIds:
    def topic_ids(self) -> Mapping[uuid.UUID, str]:
        return {ORDERS: "orders"}

    def close(self) -> None:
        pass


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_kip848_poll_returns_nothing_within_the_margin_and_resumes_once_renewed() -> None:
    broker = SilentBroker()
    fetcher = FakeFetcher()
    consumer = Consumer(
        "g",
        topics=["orders"],
        group_protocol="consumer",
        topic_metadata=TopicIds(),  # type: ignore[arg-type]
        transport=broker,
        fetcher=fetcher,
        bootstrap_servers="h:1",
        session_timeout_ms=3_000,
        heartbeat_interval_ms=100,
        rebalance_timeout_ms=2_000,
        lease_margin_ms=1_500,
    )
    try:
        consumer.start()
        wait_for(lambda: consumer.assignment() == {TopicPartition("orders", 0)})
        fetcher.to_return = {TopicPartition("orders", 0): [Record(10)]}
        got: dict[TopicPartition, list[int]] = {}
        wait_for(lambda: polled(consumer, got, 10))

        broker.silent.set()  # heartbeats go unanswered: 1.5 s later the lease is in its margin
        fetcher.to_return = {TopicPartition("orders", 0): [Record(11)]}
        wait_for(lambda: consumer._group.membership_lease() < 1.5)
        assert consumer.poll(200) == {}
        assert consumer.assignment() == {TopicPartition("orders", 0)}  # still owned

        broker.silent.clear()
        wait_for(lambda: consumer._group.membership_lease() > 2.0)
        wait_for(lambda: polled(consumer, got, 11))
        assert got == {TopicPartition("orders", 0): [10, 11]}  # each once, none skipped
    finally:
        broker.silent.clear()
        consumer.close(5)


def polled(consumer: Consumer, got: dict[TopicPartition, list[int]], offset: int) -> bool:
    """Poll once, adding what came to ``got``: whether ``offset`` has come by now."""
    for t, rs in offsets(consumer.poll(50)).items():
        got.setdefault(t, []).extend(rs)
    return offset in got.get(TopicPartition("orders", 0), [])
