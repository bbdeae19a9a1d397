"""Records a share consumer acquired and could not decode (a corrupt batch): named to
``on_records_unpolled`` (reason ``"undecodable"``) with the offsets and delivery counts of
the answer's acquired ranges, counted in ``metrics().records_undecodable``, exported, and
released with the next request to their leader, against the model broker of
tests/unit/test_share_consumer.py.

Kafka's share consumer (ShareCompletedFetch) rejects the acquired records of a batch that
fails its check, and releases a record it cannot deserialize; this consumer cannot pin the
failure to one batch, and it may be its own (a compression library not installed), so it
releases them all: another delivery, or the broker's archive at the delivery limit.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry

from coordination._protocol import share_group as sg
from coordination.exporters.opentelemetry import OpenTelemetryHooks
from coordination.exporters.prometheus import PrometheusHooks
from coordination.hooks import (
    AcknowledgementFailed,
    RecordsAcknowledged,
    RecordsUnpolled,
)
from recipes.queues import AcknowledgeType

from .test_share_consumer import Broker, make, poll_n
from .test_share_consumer_hooks import Recorded, of

A = AcknowledgeType
_BATCH_HEADER = 61  # a v2 record batch's header: its records follow


def spoiled(records: bytes) -> bytes:
    """``records`` (one v2 batch) with its records overwritten: the header reads, the first
    record's length does not (a varint out of range)."""
    return records[:_BATCH_HEADER] + b"\xff" * (len(records) - _BATCH_HEADER)


class SpoilingBroker(Broker):
    """The model broker, but the records of the answers ``spoil[p]`` names (1: the first
    that acquires records of partition ``p``, ...) are corrupt; acquired all the same, as a
    broker would."""

    def __init__(self, spoil: dict[int, set[int]], **kw: Any) -> None:
        super().__init__(**kw)
        self.spoil = spoil
        self.answered: dict[int, int] = {}

    def _acquire(
        self, member_id: str, p: int, limit: int, acked: int
    ) -> sg.ShareFetchPartitionData:
        data = super()._acquire(member_id, p, limit, acked)
        if not data.acquired_records:
            return data
        self.answered[p] = self.answered.get(p, 0) + 1
        if self.answered[p] in self.spoil.get(p, set()):
            return dataclasses.replace(data, records=spoiled(data.records))
        return data


def acknowledgements_sent(broker: Broker) -> list[tuple[str, int, sg.AcknowledgementBatch]]:
    """Every acknowledgement batch sent, in order: (request kind, partition, batch)."""
    with broker.lock:
        requests = [r for r, _ in broker.sent]
    return [
        (type(r).__name__, p.partition_index, b)
        for r in requests
        if isinstance(r, sg.ShareFetchRequest | sg.ShareAcknowledgeRequest)
        for t in r.topics
        for p in t.partitions
        for b in p.acknowledgement_batches
    ]


def test_a_corrupt_batchs_records_are_named_counted_and_released_with_the_next_fetch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="recipes.queues")
    hooks = Recorded()
    broker = SpoilingBroker({0: {1}}, records=3)
    broker.state[(0, 1)][1] = 2  # delivered twice before: this is its third delivery
    c = make(broker, hooks=[hooks])
    before = c.member.clock.monotonic()
    records = poll_n(c, 3)
    after = c.member.clock.monotonic()
    # Named once, with the offsets and delivery counts of the acquired ranges.
    [event] = of(RecordsUnpolled, hooks.events)
    assert event == RecordsUnpolled(
        group_id="g",
        member_id=c.member_id,
        topic="jobs",
        partition=0,
        offsets=(0, 1, 2),
        delivery_counts=(1, 3, 1),
        reason="undecodable",
        fetched_at=event.fetched_at,
    )
    assert before <= event.fetched_at <= after
    m = c.metrics()
    assert (m.records_undecodable, m.records_expired_unpolled, m.records_acquired) == (3, 0, 3)
    # Released at once, piggy-backed on the next ShareFetch: exactly those offsets, RELEASE.
    spoiled_fetch, releasing, *_ = [
        r for r, _ in broker.sent if isinstance(r, sg.ShareFetchRequest)
    ]
    assert spoiled_fetch.share_session_epoch == 0
    assert acknowledgements_sent(broker) == [
        ("ShareFetchRequest", 0, sg.AcknowledgementBatch(0, 2, (A.RELEASE,)))
    ]
    assert releasing.topics[0].partitions[0].acknowledgement_batches == (
        sg.AcknowledgementBatch(0, 2, (A.RELEASE,)),
    )
    # So they came back at once (not after their 30 s lock), one delivery more.
    assert [(r.offset, r.delivery_count) for r in records] == [(0, 2), (1, 4), (2, 2)]
    # The consumer's release, not the application's: not in its acknowledgement counts.
    assert (
        m.acknowledged == {}
        and not of(RecordsAcknowledged, hooks.events)
        and not of(AcknowledgementFailed, hooks.events)
    )
    # A WARNING names the partition, the offsets and the decoder's error.
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "3 records of jobs[0] (offsets 0..2) could not be decoded" in warning
    assert "varint" in warning, warning
    c.close()


def test_only_the_corrupt_partitions_records_are_named_and_released() -> None:
    hooks = Recorded()
    broker = SpoilingBroker({1: {1}}, records=4, partitions=2)
    c = make(broker, hooks=[hooks])
    records = poll_n(c, 4)
    assert [
        (e.partition, e.offsets, e.delivery_counts, e.reason)
        for e in of(RecordsUnpolled, hooks.events)
    ] == [(1, (0, 1), (1, 1), "undecodable")]
    assert sorted((r.partition, r.offset, r.delivery_count) for r in records) == [
        (0, 0, 1),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 2),
    ]
    assert acknowledgements_sent(broker) == [
        ("ShareFetchRequest", 1, sg.AcknowledgementBatch(0, 1, (A.RELEASE,)))
    ]
    assert c.metrics().records_undecodable == 2
    c.close()


def test_a_release_whose_lock_ran_out_is_not_sent_and_fails_nothing() -> None:
    hooks = Recorded()
    broker = SpoilingBroker({0: {1}}, records=2, lock_ms=200)
    c = make(broker, hooks=[hooks])
    deadline = time.monotonic() + 5
    while not of(RecordsUnpolled, hooks.events):  # a poll of timeout 0 fetches once, and returns
        assert time.monotonic() < deadline
        c.poll(timeout_ms=0)
    assert of(RecordsUnpolled, hooks.events)[0].offsets == (0, 1)
    # No poll for longer than the lock: the broker takes the records back.
    time.sleep(0.3)
    broker.expire(0, 0)
    broker.expire(0, 1)
    records = poll_n(c, 2)
    assert [(r.offset, r.delivery_count) for r in records] == [(0, 2), (1, 2)]
    # The RELEASE was dropped: sent, it would fail (and with it any acknowledgement of the
    # partition sent along).
    assert acknowledgements_sent(broker) == []
    for r in records:
        c.acknowledge(r, A.ACCEPT)
    assert c.commit() == {("jobs", 0): None}
    assert not of(AcknowledgementFailed, hooks.events)
    c.close()


def test_fetched_ahead_they_are_named_when_a_poll_takes_the_round_and_ride_with_acks() -> None:
    hooks = Recorded()
    # The first answer (offsets 0, 1) reads; the round fetched ahead (2, 3) does not.
    broker = SpoilingBroker({0: {2}}, records=4)
    c = make(broker, hooks=[hooks], fetch_ahead=True, max_poll_records=2)
    before = c.member.clock.monotonic()
    first = poll_n(c, 2)
    sent_ahead_by = c.member.clock.monotonic()  # that poll sent the round before returning
    assert [r.offset for r in first] == [0, 1] and not of(RecordsUnpolled, hooks.events)
    for r in first:
        c.acknowledge(r, A.ACCEPT)
    later = poll_n(c, 2)
    [event] = of(RecordsUnpolled, hooks.events)
    assert (event.offsets, event.delivery_counts, event.reason) == ((2, 3), (1, 1), "undecodable")
    assert before <= event.fetched_at <= sent_ahead_by  # the round's fetch, not this poll's
    # The release went with the application's acknowledgements, in the next fetch.
    assert acknowledgements_sent(broker) == [
        ("ShareFetchRequest", 0, sg.AcknowledgementBatch(0, 1, (A.ACCEPT,))),
        ("ShareFetchRequest", 0, sg.AcknowledgementBatch(2, 3, (A.RELEASE,))),
    ]
    [carrying] = [
        r
        for r in broker.requests(sg.ShareFetchRequest)
        if r.topics and r.topics[0].partitions[0].acknowledgement_batches
    ]
    assert len(carrying.topics[0].partitions[0].acknowledgement_batches) == 2
    assert [(r.offset, r.delivery_count) for r in later] == [(2, 2), (3, 2)]
    assert c.metrics().records_undecodable == 2
    assert c.metrics().acknowledged == {"ACCEPT": 2}
    c.close()


def test_prometheus_and_opentelemetry_count_them_by_reason() -> None:
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    exporters = [PrometheusHooks(registry), OpenTelemetryHooks(MeterProvider([reader]))]
    c = make(SpoilingBroker({0: {1}}, records=3), hooks=exporters)
    poll_n(c, 3)
    c.close()
    assert (
        registry.get_sample_value(
            "coordination_share_records_unpolled_total", {"group": "g", "reason": "undecodable"}
        )
        == 3
    )
    data = reader.get_metrics_data()
    assert data is not None
    otel = {
        point.attributes["reason"]: point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "coordination.share.records.unpolled"
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint) and point.attributes
    }
    assert otel == {"undecodable": 3}
