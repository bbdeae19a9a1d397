"""The share consumer's hook events (records acquired, acknowledged by type, failed) and
their export by the Prometheus and OpenTelemetry exporters, against the model broker of
tests/unit/test_share_consumer.py."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry

from coordination._protocol import share_group as sg
from coordination.exporters.opentelemetry import GROUP_ATTRIBUTE, OpenTelemetryHooks
from coordination.exporters.prometheus import PrometheusHooks
from coordination.hooks import (
    AcknowledgementFailed,
    CoordinationHooks,
    RecordsAcknowledged,
    RecordsAcquired,
    RecordsUnpolled,
    ShareLagRead,
)
from coordination.testing import TransportError
from recipes.queues import AcknowledgeType

from .test_share_consumer import Broker, make, poll_n

A = AcknowledgeType


class Recorded(CoordinationHooks):
    def __init__(self) -> None:
        self.events: list[object] = []

    def on_records_acquired(self, event: RecordsAcquired) -> None:
        self.events.append(event)

    def on_records_acknowledged(self, event: RecordsAcknowledged) -> None:
        self.events.append(event)

    def on_acknowledgement_failed(self, event: AcknowledgementFailed) -> None:
        self.events.append(event)

    def on_share_lag_read(self, event: ShareLagRead) -> None:
        self.events.append(event)

    def on_records_unpolled(self, event: RecordsUnpolled) -> None:
        self.events.append(event)


def of(kind: type, events: list[object]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_acquired_acknowledged_by_type_renewed_and_redelivered_are_reported() -> None:
    hooks = Recorded()
    c = make(Broker(records=4), hooks=[hooks])
    before = c.member.clock.monotonic()
    records = poll_n(c, 4)
    after = c.member.clock.monotonic()
    member = c.member_id
    [acquired] = of(RecordsAcquired, hooks.events)
    assert acquired == RecordsAcquired(
        group_id="g", member_id=member, count=4, redelivered=0, fetched_at=acquired.fetched_at
    )
    assert before <= acquired.fetched_at <= after  # the fetch that acquired them was sent then
    c.acknowledge(records[0], A.ACCEPT)
    c.acknowledge(records[2], A.RELEASE)
    c.acknowledge(records[3], A.RENEW)  # a lock renewal: still held
    c.commit()
    acknowledged = of(RecordsAcknowledged, hooks.events)
    assert sorted((e.ack_type, e.count) for e in acknowledged) == [
        ("ACCEPT", 1),
        ("RELEASE", 1),
        ("RENEW", 1),
    ]
    assert {(e.group_id, e.member_id, e.topic, e.partition) for e in acknowledged} == {
        ("g", member, "jobs", 0)
    }
    # The model broker acquires from the partitions a fetch names: one that carries an
    # acknowledgement gets the released record back, delivered a second time.
    c.acknowledge(records[1], A.ACCEPT)
    (again,) = poll_n(c, 1)
    assert again.offset == 2 and again.delivery_count == 2
    assert of(RecordsAcquired, hooks.events)[-1].redelivered == 1
    c.close()
    # The events add up to the consumer's own counts.
    m = c.metrics()
    assert sum(e.count for e in of(RecordsAcquired, hooks.events)) == m.records_acquired == 5
    assert sum(e.redelivered for e in of(RecordsAcquired, hooks.events)) == 1
    by_type: dict[str, int] = {}
    for e in of(RecordsAcknowledged, hooks.events):
        by_type[e.ack_type] = by_type.get(e.ack_type, 0) + e.count
    assert by_type == m.acknowledged
    assert by_type["RENEW"] == m.lock_renewals == 1
    assert not of(AcknowledgementFailed, hooks.events)


def test_an_expired_lock_and_an_unanswered_request_are_reported_as_failed() -> None:
    hooks = Recorded()
    broker = Broker(records=3)
    c = make(broker, hooks=[hooks])
    first, second, third = poll_n(c, 3)
    broker.expire(0, 0)
    c.acknowledge(first)
    c.acknowledge(second)
    c.commit()  # refused as a whole, then one by one: only the first had run out
    assert of(AcknowledgementFailed, hooks.events) == [
        AcknowledgementFailed(
            group_id="g",
            member_id=c.member_id,
            topic="jobs",
            partition=0,
            count=1,
            reason="lock_expired",
            error="INVALID_RECORD_STATE",
        )
    ]
    assert [(e.ack_type, e.count) for e in of(RecordsAcknowledged, hooks.events)] == [("ACCEPT", 1)]
    c.acknowledge(third)
    broker.then(sg.ShareAcknowledgeResponse, TransportError("timed out"))
    c.commit()
    last = of(AcknowledgementFailed, hooks.events)[-1]
    assert (last.reason, last.error, last.count) == ("uncertain", "no response", 1)
    assert c.metrics().acknowledgements_failed == 2
    c.close()


def test_a_record_past_its_lock_by_the_consumers_clock_is_reported_without_a_request() -> None:
    hooks = Recorded()
    c = make(Broker(records=1, lock_ms=30), hooks=[hooks])
    (record,) = poll_n(c, 1)
    time.sleep(0.05)
    c.acknowledge(record)
    c.commit()
    (failed,) = of(AcknowledgementFailed, hooks.events)
    assert failed.reason == "lock_expired"
    c.close()


def test_prometheus_and_opentelemetry_export_the_share_consumers_counts() -> None:
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    exporters = [PrometheusHooks(registry), OpenTelemetryHooks(MeterProvider([reader]))]
    broker = Broker(records=4)
    c = make(broker, hooks=exporters)
    first, second, third, fourth = poll_n(c, 4)
    c.acknowledge(first, A.ACCEPT)
    c.acknowledge(second, A.RENEW)
    c.acknowledge(third, A.RELEASE)
    c.commit()
    c.acknowledge(fourth, A.ACCEPT)  # the fetch carrying it gets the released one again
    poll_n(c, 1)
    broker.expire(0, 1)
    c.acknowledge(second, A.ACCEPT)
    c.commit()
    # Not done: the third (redelivered, held) and the second (its lock ran out).
    assert c.lag() == {("jobs", 0): 2}
    c.close()

    def prom(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"coordination_{name}", {"group": "g", **labels})

    assert prom("share_records_acquired_total") == 5
    assert prom("share_records_redelivered_total") == 1
    assert prom("share_records_acknowledged_total", type="ACCEPT") == 2
    assert prom("share_records_acknowledged_total", type="RENEW") == 1
    assert prom("share_records_acknowledged_total", type="RELEASE") == 2  # one at close
    assert prom("share_acknowledgement_failed_total", reason="lock_expired") == 1
    assert prom("share_partition_lag", topic="jobs", partition="0") == 2

    data = reader.get_metrics_data()
    assert data is not None
    otel: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if not metric.name.startswith("coordination.share."):
                    continue  # the membership's (a rebalance's duration is a histogram)
                for point in metric.data.data_points:
                    attributes = tuple(sorted((point.attributes or {}).items()))
                    assert isinstance(point, NumberDataPoint)
                    otel[(metric.name, attributes)] = point.value
    group = (GROUP_ATTRIBUTE, "g")
    assert otel[("coordination.share.records.acquired", (group,))] == 5
    assert otel[("coordination.share.records.redelivered", (group,))] == 1
    assert otel[("coordination.share.records.acknowledged", (group, ("type", "RENEW")))] == 1
    assert otel[("coordination.share.records.acknowledged", (group, ("type", "RELEASE")))] == 2
    failed = ("coordination.share.acknowledgement.failures", (group, ("reason", "lock_expired")))
    assert otel[failed] == 1
    lag = ("coordination.share.partition.lag", (group, ("partition", 0), ("topic", "jobs")))
    assert otel[lag] == 2


def test_prometheus_and_opentelemetry_count_the_records_no_poll_handed_out() -> None:
    registry = CollectorRegistry()
    reader = InMemoryMetricReader()
    exporters = [PrometheusHooks(registry), OpenTelemetryHooks(MeterProvider([reader]))]
    broker = Broker(records=8, lock_ms=1000)
    c = make(broker, hooks=exporters, fetch_ahead=True, max_poll_records=2)
    poll_n(c, 2)
    time.sleep(1.3)  # the records fetched ahead (2, 3) outlive their lock before the next poll
    assert [r.offset for r in poll_n(c, 2)] == [4, 5]
    # The round that poll sent ahead acquires 6 and 7, which close releases unseen.
    deadline = time.monotonic() + 5
    while broker.state[(0, 7)][0] != "acquired" and time.monotonic() < deadline:
        time.sleep(0.01)
    c.close()
    labels = {"group": "g"}
    expired = registry.get_sample_value(
        "coordination_share_records_unpolled_total", {**labels, "reason": "lock_expired"}
    )
    closed = registry.get_sample_value(
        "coordination_share_records_unpolled_total", {**labels, "reason": "closed"}
    )
    assert (expired, closed) == (2, 2)
    assert c.metrics().records_expired_unpolled == 2
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
    assert otel == {"lock_expired": 2, "closed": 2}


def test_each_lag_reading_is_reported_by_poll_and_by_lag() -> None:
    hooks = Recorded()
    broker = Broker(records=4, partitions=2)
    c = make(broker, hooks=[hooks], lag_refresh_ms=100)
    try:
        poll_n(c, 4)
        deadline = time.monotonic() + 5
        while not of(ShareLagRead, hooks.events):  # read by a poll
            assert time.monotonic() < deadline
            c.poll(timeout_ms=50)
        assert c.lag() == {("jobs", 0): 2, ("jobs", 1): 2}
        last = of(ShareLagRead, hooks.events)[-1]
        assert last == ShareLagRead(
            group_id="g", member_id=c.member_id, lag={("jobs", 0): 2, ("jobs", 1): 2}
        )
    finally:
        c.close()
