"""The wake-up channel on a real broker: members learn of a join or a leave long before their
next heartbeat, and nothing else wakes them."""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from coordination._transport.wakeups import (
    DEFAULT_TOPIC,
    PARTITIONS,
    TIMELINE_DELAY_S,
    KafkaWakeups,
    timeline_key,
)

from .members import Listing, new_group, settled, wait_until

pytestmark = pytest.mark.integration

# Heartbeats so rare that a rebalance finished within SOON can only have been started by a
# wake-up: the members' next heartbeat is due SLOW after they last joined.
SLOW = {
    "heartbeat_interval_ms": 20_000,
    "session_timeout_ms": 60_000,
    "rebalance_timeout_ms": 60_000,
}
SOON = 8.0


def start(created: list[Listing], kafka: str, group: str, n: int, **kw: Any) -> list[Listing]:
    new = [Listing(group, bootstrap_servers=kafka, **{**SLOW, **kw}) for _ in range(n)]
    created.extend(new)
    for m in new:
        m.start()
    return new


# The rejoin reason of a member told by a sibling (a member of the same group in this
# process, sharing its wake-up listener) that the broker is rebalancing: the listener hands an
# announcement to one member, then to the next; on a loaded machine the first one's heartbeat
# can find the rebalance and tell the second before the second's turn comes, and a member no
# longer stable does not count the wake-up it is then handed.
TOLD_BY_SIBLING = "a member in this process found the group rebalancing"


def woken(member: Listing) -> tuple[int, int]:
    """How often ``member`` was woken by an announcement, and told by a sibling."""
    metrics = member.metrics()
    return metrics.wakeups_received, metrics.rejoin_reasons.count(TOLD_BY_SIBLING)


def woken_once_more(before: tuple[int, int], after: tuple[int, int]) -> bool:
    """Woken once since ``before``: handed the announcement once (its sibling may tell it
    too), or, handed it too late, told by its sibling."""
    wakeups, told = after[0] - before[0], after[1] - before[1]
    return wakeups == 1 or (wakeups == 0 and told >= 1)


def listening(members: list[Listing]) -> bool:
    """Every member's channel reads its partition (on a fresh cluster the first members
    create the topic, and read what is published only from then on)."""
    return all(m._engine._wakeups.stats.working for m in members)  # type: ignore[union-attr]


def test_members_woken_by_a_join_rebalance_long_before_their_next_heartbeat(
    kafka: str, members: list[Listing]
) -> None:
    group = new_group()
    pair = start(members, kafka, group, 2)
    wait_until(lambda: settled(pair, 2) and listening(pair), 30, "two members")
    joined_at = time.monotonic()
    (third,) = start(members, kafka, group, 1)
    wait_until(lambda: settled([*pair, third], 3), SOON, "three members, woken by the join")
    assert time.monotonic() - joined_at < SOON  # their heartbeats were due 20 s after joining
    assert all(sum(woken(m)) >= 1 for m in pair), [woken(m) for m in pair]
    assert any(m.metrics().wakeups_received >= 1 for m in pair)  # the announcement itself
    assert third.metrics().wakeups_received == 0  # its own announcement does not wake it


def test_members_woken_by_a_leave_rebalance_long_before_their_next_heartbeat(
    kafka: str, members: list[Listing]
) -> None:
    group = new_group()
    trio = start(members, kafka, group, 3)
    wait_until(lambda: settled(trio, 3) and listening(trio), 60, "three members")
    time.sleep(1)  # the last join's announcements are read; the group is quiet
    leaver = trio[2]._engine
    channel = leaver._wakeups
    assert isinstance(channel, KafkaWakeups) and channel._route is not None
    assert leaver._coordinator is not None
    coordinator_leads_it = channel._route.leader == leaver._coordinator.node_id
    left_at = time.monotonic()
    trio[2].close()
    wait_until(lambda: settled(trio[:2], 2), SOON, "two members, woken by the leave")
    assert time.monotonic() - left_at < SOON
    # The announcement names the generation left, so they rejoined without a heartbeat first.
    for survivor in trio[:2]:
        reason = survivor.metrics().rejoin_reasons[-1]
        assert reason.endswith("announced: leave; the group is rebalancing"), reason
    # Where the coordinator leads the group's partition (always, with one broker), the
    # departure went on the coordinator's connection right behind the LeaveGroup, and the
    # broker handled it only after the LeaveGroup: still, no survivor found no rebalance.
    assert channel.stats.sent_with_leave == (1 if coordinator_leads_it else 0)


def test_members_of_a_group_sharing_the_partition_are_not_woken(
    kafka: str, members: list[Listing]
) -> None:
    group = new_group()
    partition = zlib.crc32(group.encode()) % PARTITIONS
    neighbour = next(
        g
        for g in (f"{group}-{i}" for i in range(10_000))
        if zlib.crc32(g.encode()) % PARTITIONS == partition
    )
    watched = start(members, kafka, group, 2)
    wait_until(lambda: settled(watched, 2) and listening(watched), 30, "two members")
    time.sleep(1)  # their own joins' announcements are behind them
    before = [m.metrics().wakeups_received for m in watched]
    # The neighbour group's members join and leave: their announcements land on the same
    # partition, under another key. Records that are not wake-ups land there too.
    others = start(members, kafka, neighbour, 2)
    wait_until(lambda: settled(others, 2), 30, "the neighbour group")
    others[1].close()
    wait_until(lambda: settled(others[:1], 1), SOON, "the neighbour group after a leave")
    producer = KafkaProducer(bootstrap_servers=kafka)
    try:
        for value in (b"not json", b"{}", json.dumps({"member": "x"}).encode()):
            producer.send(DEFAULT_TOPIC, key=group.encode(), value=value, partition=partition)
        producer.flush(10)
    finally:
        producer.close(timeout=5)
    time.sleep(1)
    assert [m.metrics().wakeups_received for m in watched] == before
    assert all(m.state.value == "stable" for m in watched)
    generation = watched[0].last()[0]
    assert all(m.last()[0] == generation for m in watched)  # no rebalance of theirs


def test_with_the_channel_off_nothing_is_published(
    kafka: str, members: list[Listing], caplog: pytest.LogCaptureFixture
) -> None:
    group = new_group()
    caplog.set_level(logging.DEBUG, logger="coordination")
    # Heartbeats at their usual pace: without wake-ups, members 20 s apart would learn of
    # a rebalance only after the broker gave up waiting for them.
    pair = start(
        members,
        kafka,
        group,
        2,
        wakeup_topic=None,
        heartbeat_interval_ms=300,
        session_timeout_ms=3000,
        rebalance_timeout_ms=10_000,
    )
    wait_until(lambda: settled(pair, 2), 30, "two members")
    assert all(m._engine._wakeups is None for m in pair)
    assert not any("wakeups" in t.name for m in pair for t in m._engine._threads)
    assert not [r for r in caplog.records if r.name == "coordination.wakeups"]


def test_the_timeline_goes_half_the_topic_away_from_the_groups_wake_ups(
    kafka: str, members: list[Listing]
) -> None:
    # A rebalance of N members publishes N timeline records: on the wake-up partition each
    # would end every member's long poll. describe reads them where they are.
    group = new_group()
    pair = start(members, kafka, group, 2)
    wait_until(lambda: settled(pair, 2) and listening(pair), 30, "two members")
    wake = zlib.crc32(group.encode()) % PARTITIONS
    far = (wake + PARTITIONS // 2) % PARTITIONS
    key = timeline_key(group)

    def timeline_records(partition: int) -> list[dict[str, Any]]:
        consumer = KafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False)
        try:
            tp = TopicPartition(DEFAULT_TOPIC, partition)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end = consumer.end_offsets([tp])[tp]
            found = []
            while consumer.position(tp) < end:
                for records in consumer.poll(timeout_ms=1000).values():
                    found += [json.loads(r.value) for r in records if r.key == key]
            return found
        finally:
            consumer.close()

    # Sent together, TIMELINE_DELAY_S after each member's first.
    wait_until(lambda: len(timeline_records(far)) >= 2, TIMELINE_DELAY_S + 10, "the timeline")
    assert timeline_records(wake) == []
    # Every member's rebalance, each published once.
    recorded = [(r["member_id"], r["generation"]) for r in timeline_records(far)]
    assert len(recorded) == len(set(recorded))
    assert set(recorded) >= {(m.member_id, m.generation().generation_id) for m in pair}
    # Members sharing a listener send their records together, in one batch.
    assert sum(m._engine._wakeups.stats.timeline_sent for m in pair) >= 2  # type: ignore[union-attr]


def test_a_member_closes_at_once_while_its_listener_long_polls(
    kafka: str, members: list[Listing]
) -> None:
    # The listener's fetch waits up to 10 s for a record; closing must not wait for it. Without
    # a LeaveGroup no departure is announced, which would end the fetch by itself.
    (member,) = start(members, kafka, new_group(), 1)
    wait_until(lambda: settled([member], 1) and listening([member]), 30, "one member")
    time.sleep(1.5)  # its own join announcement is read; its next fetch is parked
    started = time.monotonic()
    member.close(timeout=20.0, leave_group=False)
    assert time.monotonic() - started < 3.0
    wakeups = member._engine._wakeups
    threads = wakeups._threads  # type: ignore[union-attr]
    assert not any(t.is_alive() for t in threads)


def listener_threads(group: str) -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.name == f"coordination-wakeups-listener|{group}" and t.is_alive()
    ]


def test_the_members_of_one_process_read_their_wake_ups_through_one_listener(
    kafka: str, members: list[Listing]
) -> None:
    # 50 members of a group in one process would otherwise make 50 fetches of every wake-up.
    group = new_group()
    trio = start(members, kafka, group, 3)
    wait_until(lambda: settled(trio, 3) and listening(trio), 30, "three members")
    assert len(listener_threads(group)) == 1
    # Another client id connects differently (quotas, logs): it reads for itself.
    (apart,) = start(members, kafka, group, 1, client_id="apart")
    wait_until(lambda: settled([*trio, apart], 4), SOON, "four members, woken by the join")
    assert len(listener_threads(group)) == 2
    assert all(sum(woken(m)) >= 1 for m in trio)
    time.sleep(1)  # the last join's announcements are read; the group is quiet
    before = [woken(m) for m in trio]
    (fifth,) = start(members, kafka, group, 1)
    wait_until(lambda: settled([*trio, apart, fifth], 5), SOON, "five, woken by the join")
    # One read woke every member of the process, each once (by the announcement or through
    # a sibling that heard it first), but not the one that sent it.
    after = [woken(m) for m in trio]
    assert all(woken_once_more(b, a) for b, a in zip(before, after, strict=True)), (before, after)
    assert any(a[0] == b[0] + 1 for b, a in zip(before, after, strict=True))
    assert fifth.metrics().wakeups_received == 0
    assert len(listener_threads(group)) == 2


def test_the_shared_listener_reads_on_when_the_member_it_reads_through_closes(
    kafka: str, members: list[Listing]
) -> None:
    group = new_group()
    trio = start(members, kafka, group, 3)
    wait_until(lambda: settled(trio, 3) and listening(trio), 30, "three members")
    # It fetches through the transport of the first member started: close that one.
    trio[0].close()
    wait_until(lambda: settled(trio[1:], 2), SOON, "two members, woken by the leave")
    time.sleep(1)  # the survivors' listener has moved to another member's transport
    joined_at = time.monotonic()
    (newcomer,) = start(members, kafka, group, 1)
    wait_until(lambda: settled([*trio[1:], newcomer], 3), SOON, "three, woken by the join")
    assert time.monotonic() - joined_at < SOON  # their heartbeats were due 20 s later
    assert len(listener_threads(group)) == 1
    for m in [*trio[1:], newcomer]:
        m.close()
    wait_until(lambda: not listener_threads(group), 5, "the listener to stop with the last")
