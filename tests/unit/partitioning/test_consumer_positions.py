"""The consumer's positions: where each partition starts, pause and resume, start() errors.

A fake kafka-python fetcher records what it was told; the group's engine runs on the test
thread over a scripted transport and a manual clock, as in tests/unit/test_engine.py.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from coordination import Generation
from coordination._engine.membership import GroupMembership
from coordination._protocol.error_codes import ErrorCode as E
from coordination.errors import ConnectionFailedError
from coordination.testing import ManualClock, ScriptedTransport
from coordination.testing import messages as m
from recipes.partitioning import Consumer, RangeAssignor, RebalanceListener, TopicPartition
from recipes.partitioning.protocol import Assignment, encode_assignment

T = "orders"
NODE = m.FindCoordinatorResponse(error_code=0, node_id=1, host="127.0.0.1", port=9092)


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


@dataclass(frozen=True)
class Record:
    offset: int


class FakeFetcher:
    """kafka-python's KafkaConsumer as far as the Consumer uses it."""

    def __init__(self, reset_to: int = 0) -> None:
        self.reset_to = reset_to
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.to_return: dict[TopicPartition, list[Record]] = {}

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [TopicPartition(k.topic, k.partition) for k in partitions]
        self.positions = {k: v for k, v in self.positions.items() if k in self.assigned}
        self.paused &= set(self.assigned)

    def seek(self, ktp: Any, offset: int) -> None:
        t = TopicPartition(ktp.topic, ktp.partition)
        assert t in self.assigned, "seek of an unassigned partition"
        self.seeks.append((t, offset))
        self.positions[t] = offset

    def position(self, ktp: Any, timeout_ms: int | None = None) -> int:
        t = TopicPartition(ktp.topic, ktp.partition)
        assert t in self.assigned
        return self.positions.setdefault(t, self.reset_to)

    def pause(self, *ktps: Any) -> None:
        self.paused |= {TopicPartition(k.topic, k.partition) for k in ktps}

    def resume(self, *ktps: Any) -> None:
        self.paused -= {TopicPartition(k.topic, k.partition) for k in ktps}

    def poll(self, timeout_ms: int = 0) -> dict[Any, list[Record]]:
        from kafka import TopicPartition as KafkaTopicPartition

        out = {KafkaTopicPartition(t.topic, t.partition): r for t, r in self.to_return.items()}
        for t, records in self.to_return.items():  # kafka-python moves past what it returns
            self.positions[t] = records[-1].offset + 1
        self.to_return = {}
        return out

    def close(self) -> None:
        pass


class Announced(RebalanceListener):
    def __init__(self) -> None:
        self.assigned: list[frozenset[TopicPartition]] = []

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.assigned.append(partitions)


class Harness:
    """A Consumer whose group member is driven step by step on the test thread."""

    def __init__(self, fetcher: FakeFetcher | None = None, **settings: Any) -> None:
        self.transport = ScriptedTransport()
        self.clock = ManualClock()
        self.listener = Announced()
        self.fetcher = fetcher or FakeFetcher()
        self.consumer = Consumer(
            "g",
            topics=[T],
            assignors=[RangeAssignor()],
            listener=self.listener,
            transport=self.transport,
            bootstrap_servers="x:1",
            **settings,
        )
        self.consumer._fetcher = self.fetcher
        group = self.consumer.group
        self.engine = GroupMembership(group, group.config, self.transport, self.clock)
        self.engine.resolve_protocol_type()
        group._engine = self.engine

    def join(self, *partitions: int, generation: int = 1) -> None:
        """Script one rebalance in which this member (a follower) gets ``partitions``."""
        member_id = "m-2"
        if self.engine.coordinator is None:
            self.transport.prepare(NODE)
        self.transport.prepare(
            m.JoinGroupResponse(
                error_code=0,
                generation_id=generation,
                protocol_type="consumer",
                protocol_name="range",
                leader="m-1",
                member_id=member_id,
            )
        )
        self.transport.prepare(
            m.SyncGroupResponse(
                error_code=0,
                protocol_type="consumer",
                protocol_name="range",
                assignment=encode_assignment(Assignment(tuple(tp(p) for p in partitions))),
            )
        )
        if self.engine.generation.generation_id < 0:
            self.engine._generation = Generation(-1, member_id, None)
        self.engine.request_rejoin("test")

    def offsets(self, answer: Callable[[m.Request], m.OffsetFetchResponse], times: int) -> None:
        for _ in range(times):
            self.transport.prepare(answer, response_type=m.OffsetFetchResponse)


def committed(**offsets: int) -> m.OffsetFetchResponse:
    return m.OffsetFetchResponse(
        error_code=0,
        partitions=tuple((T, int(p[1:]), o, "", 0) for p, o in offsets.items()),
    )


def test_a_retried_join_completion_starts_the_partitions_at_their_committed_offsets() -> None:
    # The first OffsetFetch of on_partitions_assigned times out (the coordinator is still
    # loading the group's offsets for longer than the request may wait); the engine then
    # retries on_join_complete with the same assignment, which must still seek.
    h = Harness()
    h.join(0, 1, 2)
    started: list[float] = []

    def loading_then_committed(request: m.Request) -> m.OffsetFetchResponse:
        if not started:
            started.append(h.clock.now)
        if h.clock.now < started[0] + 31:  # longer than one call waits (30 s)
            return m.OffsetFetchResponse(error_code=E.COORDINATOR_LOAD_IN_PROGRESS, partitions=())
        return committed(p0=7, p1=3, p2=-1)  # nothing committed for partition 2

    h.offsets(loading_then_committed, 400)
    assert h.engine.join_group_if_needed(deadline=None)

    assert sorted(h.fetcher.assigned) == [tp(0), tp(1), tp(2)]
    assert dict(h.fetcher.seeks) == {tp(0): 7, tp(1): 3, tp(2): 0}  # 2: auto_offset_reset
    assert h.consumer._positions == {tp(0): 7, tp(1): 3, tp(2): 0}
    assert h.clock.now >= started[0] + 31  # so on_join_complete failed, and was retried
    fetches = h.transport.requests(m.OffsetFetchRequest)
    assert all(len(f.partitions) == 3 for f in fetches)
    assert h.listener.assigned == [frozenset({tp(0), tp(1), tp(2)})]  # told once, when ready


def test_partitions_are_not_fetched_before_their_start_position_is_known() -> None:
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: m.OffsetFetchResponse(error_code=E.UNKNOWN_SERVER_ERROR, partitions=()), 5)
    assert not h.engine.join_group_if_needed(deadline=h.clock.now + 0.05)  # still failing
    assert h.consumer.assignment() == {tp(0), tp(1)}  # owned...
    assert h.fetcher.assigned == []  # ...but not fetched from wherever the fetcher would start
    h.fetcher.to_return = {tp(0): [Record(0)]}  # even if the fetcher had records
    assert h.consumer.poll(timeout_ms=0) == {}


def test_resume_goes_on_after_the_last_record_returned() -> None:
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)

    h.fetcher.to_return = {tp(0): [Record(10), Record(11)], tp(1): [Record(20)]}
    assert {t: [r.offset for r in rs] for t, rs in h.consumer.poll(0).items()} == {
        tp(0): [10, 11],
        tp(1): [20],
    }
    h.consumer.pause(tp(0))
    assert h.fetcher.assigned == [tp(1)]  # the fetch itself stops
    # Even records that would still come back while paused are not returned.
    h.fetcher.to_return = {tp(0): [Record(12), Record(13)], tp(1): [Record(21)]}
    assert list(h.consumer.poll(0)) == [tp(1)]
    assert h.consumer._positions[tp(0)] == 12
    h.consumer.resume(tp(0))
    assert sorted(h.fetcher.assigned) == [tp(0), tp(1)]
    assert h.fetcher.positions[tp(0)] == 12  # from there: 12 and 13 are fetched again
    h.fetcher.to_return = {tp(0): [Record(12), Record(13)]}
    assert [r.offset for r in h.consumer.poll(0)[tp(0)]] == [12, 13]


def test_a_rebalance_keeps_the_fetcher_at_the_kept_partitions_positions() -> None:
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    h.fetcher.positions[tp(0)] = 15  # (were it ever) past records never returned
    # Cooperative: partition 0 is kept, partition 1 goes.
    h.consumer._revoked(frozenset({tp(1)}), lost=False)
    assert h.fetcher.assigned == [tp(0)]
    assert h.fetcher.positions[tp(0)] == 10


def test_a_paused_partition_stays_paused_and_unfetched_through_a_cooperative_rebalance() -> None:
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    h.consumer.pause(tp(0), tp(5))  # 5 is not owned: ignored
    assert h.consumer.paused() == {tp(0)}
    h.consumer._revoked(frozenset({tp(1)}), lost=False)
    assert h.fetcher.assigned == []
    assert h.consumer.paused() == {tp(0)}
    h.consumer.resume(tp(0))
    assert h.fetcher.assigned == [tp(0)] and h.fetcher.positions[tp(0)] == 10


def test_start_against_an_unreachable_broker_says_where_and_what_to_do() -> None:
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    servers = f"127.0.0.1:{port}"
    consumer = Consumer("g", topics=[T], bootstrap_servers=servers, bootstrap_timeout_ms=500)
    with pytest.raises(ConnectionFailedError, match=rf"{servers}.*check that") as e:
        consumer.start()
    assert "KafkaTimeoutError" in str(e.value)
    assert consumer.group.state.name != "STABLE"
    consumer.close(1)
