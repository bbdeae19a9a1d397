"""The group survives its brokers: a restart of the only broker, the loss of the coordinator.

These tests start brokers of their own (newest Kafka), since they stop and kill them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from coordination.testing import KafkaCluster

from .members import Listing, new_group, settled, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

# A dead broker is noticed by the controller after broker.session.timeout.ms (default 9 s).
FAST_FAILOVER = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def start_pair(
    members: list[Listing], kafka: KafkaCluster, session_timeout_ms: int
) -> list[Listing]:
    """Two members of a new group, started; long sessions so they outlive the broker trouble."""
    group = new_group()
    pair = [
        Listing(
            group,
            bootstrap_servers=kafka.bootstrap_servers,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=500,
        )
        for _ in range(2)
    ]
    members.extend(pair)
    for m in pair:
        m.start()
    return pair


@pytest.fixture
def members() -> Iterator[list[Listing]]:
    created: list[Listing] = []
    yield created
    for m in created:
        m.close(timeout=5)


def test_the_group_recovers_after_its_broker_restarts(members: list[Listing]) -> None:
    with KafkaCluster(1) as kafka:
        pair = start_pair(members, kafka, session_timeout_ms=15_000)
        wait_until(lambda: settled(pair, 2), 30, "two members")
        kafka.stop_broker(1)
        time.sleep(3)
        kafka.start_broker(1)
        restarted = time.monotonic()
        # Heartbeats get through again; both members are stable in one generation of two.
        wait_until(
            lambda: (
                all(
                    (m.metrics().last_heartbeat_age_s or 99) < time.monotonic() - restarted
                    for m in pair
                )
                and settled(pair, 2)
            ),
            60,
            "the group after the restart",
        )
        assert all(m.metrics().coordinator_discoveries >= 2 for m in pair)


def test_the_group_follows_its_coordinator_to_another_broker(members: list[Listing]) -> None:
    with KafkaCluster(3, config=FAST_FAILOVER) as kafka:
        pair = start_pair(members, kafka, session_timeout_ms=20_000)
        wait_until(lambda: settled(pair, 2), 60, "two members")
        coordinator = pair[0]._engine.coordinator
        assert coordinator is not None
        kafka.kill_broker(coordinator.node_id)
        killed = time.monotonic()

        def moved() -> bool:
            nodes = [m._engine.coordinator for m in pair]
            return all(n is not None and n.node_id != coordinator.node_id for n in nodes)

        wait_until(
            lambda: (
                moved()
                and settled(pair, 2)
                and all(
                    (m.metrics().last_heartbeat_age_s or 99) < time.monotonic() - killed
                    for m in pair
                )
            ),
            60,
            "the group on its new coordinator",
        )


def test_the_lean_fetcher_follows_a_partitions_leader_to_another_broker() -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    from coordination.fetching import LeanRecordFetcher
    from recipes.partitioning import TopicPartition

    with KafkaCluster(3, config=FAST_FAILOVER) as kafka:
        servers = kafka.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=servers)
        admin.create_topics([NewTopic("moving", 2, 3)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=servers, acks="all")

        def produce(first: int, count: int) -> None:
            for i in range(first, first + count):
                for p in (0, 1):
                    producer.send("moving", value=f"{p}-{i}".encode(), partition=p)
            producer.flush()

        tps = [TopicPartition("moving", 0), TopicPartition("moving", 1)]
        fetcher = LeanRecordFetcher[TopicPartition](
            bootstrap_servers=servers, auto_offset_reset="earliest", fetch_max_wait_ms=200
        )
        got: list[tuple[int, bytes]] = []
        # KIP-320's check of each moved partition's position, as the new leader answered it.
        cluster = fetcher._engine._cluster
        checked: dict[tuple[str, int], tuple[int, int, int]] = {}
        ask = cluster.epoch_ends

        def spied(node: int, wanted: Any, timeout_s: float) -> Any:
            answers = ask(node, wanted, timeout_s)
            checked.update(answers)
            return answers

        cluster.epoch_ends = spied  # type: ignore[method-assign]

        def read(total: int) -> bool:
            for tp, records in fetcher.poll(100).items():
                got.extend((tp.partition, r.value) for r in records)
            return len(got) >= total

        try:
            fetcher.assign(tps)
            produce(0, 20)
            wait_until(lambda: read(40), 30, "the first 40 records")
            leader = fetcher._engine._cluster.metadata.leaders[("moving", 0)][0]
            kafka.kill_broker(leader)
            produce(20, 20)  # to the new leaders, once elected
            wait_until(lambda: read(80), 60, "the records written after the leader died")
            assert fetcher._engine._cluster.metadata.leaders[("moving", 0)][0] != leader
            # The new leader said where the old epoch's records end: at or past the 20 read.
            code, epoch, end = checked[("moving", 0)]
            assert code == 0 and epoch >= 0 and end >= 20, checked
            for p in (0, 1):
                assert [v for q, v in got if q == p] == [f"{p}-{i}".encode() for i in range(40)]
        finally:
            fetcher.close()
            producer.close()
