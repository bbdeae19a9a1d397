"""recipes.queues.AsyncShareConsumer and the share consumer's hook events on a real broker
(share groups, Kafka 4.2+): records acquired by a poll cancelled mid-fetch are returned by
the next poll, without a fetch; every record is accepted once; what Prometheus scrapes adds up."""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import KafkaProducer
from prometheus_client import CollectorRegistry

from coordination.exporters.prometheus import PrometheusHooks
from coordination.hooks import CoordinationHooks, RebalanceFinished
from recipes.queues import AcknowledgeType, AsyncShareConsumer, ShareRecord

from .test_share_consumer import ON_SHARE_BROKERS, TIMEOUT_S, produced, share_group

pytestmark = pytest.mark.integration


class Assigned(CoordinationHooks):
    def __init__(self) -> None:
        self.assignments: list[RebalanceFinished] = []

    def on_rebalance_finished(self, event: RebalanceFinished) -> None:
        self.assignments.append(event)


def produce(kafka: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka)
    try:
        for value in values:
            producer.send(topic, value=value)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)


@ON_SHARE_BROKERS
def test_a_cancelled_poll_loses_nothing_and_the_hooks_count_every_record(kafka: str) -> None:
    topic = produced(kafka, 0)
    group = share_group(kafka)
    registry = CollectorRegistry()
    assigned = Assigned()

    async def scenario() -> None:
        consumer = AsyncShareConsumer(
            group,
            topics=[topic],
            bootstrap_servers=kafka,
            hooks=[PrometheusHooks(registry), assigned],
        )
        async with consumer as c:
            await c.start(timeout=TIMEOUT_S)
            deadline = time.monotonic() + TIMEOUT_S
            while await c.assignment() != {(topic, 0)}:  # the broker assigns a moment later
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            # A long poll on the empty topic, cancelled while its fetch waits at the broker;
            # the records come after the cancellation, and that poll acquires them.
            poll = asyncio.create_task(c.poll(timeout_ms=15_000))
            await asyncio.sleep(1)
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll
            await asyncio.to_thread(produce, kafka, topic, [b"job-%d" % n for n in range(5)])
            deadline = time.monotonic() + TIMEOUT_S
            while c.metrics().records_acquired == 0:  # nobody polls: the cancelled one took it
                assert time.monotonic() < deadline, c.metrics()
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # (and returned: it holds no more than it acquired)
            acquired = c.metrics().records_acquired
            kept = await c.poll(timeout_ms=0)  # what the cancelled poll took, no fetch
            assert len(kept) == acquired == c.metrics().records_acquired
            while len(kept) < 5:
                assert time.monotonic() < deadline, kept
                kept += await c.poll(timeout_ms=500)
            assert sorted(r.value or b"" for r in kept) == [b"job-%d" % n for n in range(5)]
            assert {r.delivery_count for r in kept} == {1}
            await c.acknowledge(kept[0], AcknowledgeType.RELEASE)
            for record in kept[1:]:
                await c.acknowledge(record, AcknowledgeType.ACCEPT)
            assert await c.commit() == {(topic, 0): None}
            again: list[ShareRecord] = []
            while not again:
                assert time.monotonic() < deadline
                again = await c.poll(timeout_ms=500)
            assert [(r.value, r.delivery_count) for r in again] == [(kept[0].value, 2)]
            await c.acknowledge(again[0], AcknowledgeType.ACCEPT)
            assert await c.commit() == {(topic, 0): None}
            assert await c.poll(timeout_ms=500) == []  # every record accepted

    asyncio.run(scenario())

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"coordination_{name}", {"group": group, **labels})

    assert sample("share_records_acquired_total") == 6
    assert sample("share_records_redelivered_total") == 1
    assert sample("share_records_acknowledged_total", type="ACCEPT") == 5
    assert sample("share_records_acknowledged_total", type="RELEASE") == 1
    assert sample("rebalance_total") is not None and sample("rebalance_total")
    assert assigned.assignments and assigned.assignments[0].group_id == group
