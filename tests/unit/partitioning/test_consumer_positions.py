"""The consumer's positions: where each partition starts, pause and resume, start() errors.

A fake kafka-python fetcher records what it was told (its waits move the manual clock on);
the group's engine runs on the test thread over a scripted transport and a manual clock, as
in tests/unit/test_engine.py.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from coordination import Generation
from coordination._protocol.error_codes import ErrorCode as E
from coordination.clock import Event
from coordination.errors import ConnectionFailedError
from coordination.testing import ManualClock, ScriptedTransport, free_port
from coordination.testing import messages as m
from recipes.partitioning import (
    Consumer,
    CooperativeStickyAssignor,
    InMemoryTopicMetadata,
    PartitionsNotOwnedError,
    RangeAssignor,
    RebalanceListener,
    TopicPartition,
)
from recipes.partitioning import _consumer as consumer_module
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
        self.clock: ManualClock | None = None  # waits for records pass on it
        self.polls: list[int] = []
        self.reset_to = reset_to
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.to_return: dict[TopicPartition, list[Record]] = {}

    def assign(self, partitions: Sequence[Any]) -> None:
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

        self.polls.append(timeout_ms)
        # As kafka-python, only what is assigned; with nothing to return, wait it out.
        self.to_return = {t: r for t, r in self.to_return.items() if t in self.assigned}
        if not self.to_return and self.clock is not None:
            self.clock.advance(timeout_ms / 1000)
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
        # Called with the consumer and the partitions, inside on_partitions_assigned.
        self.then: Callable[[frozenset[TopicPartition]], None] | None = None

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.assigned.append(partitions)
        if self.then is not None:
            self.then(partitions)


class Harness:
    """A Consumer whose group member is driven step by step on the test thread."""

    def __init__(
        self, fetcher: FakeFetcher | None = None, clock: ManualClock | None = None, **settings: Any
    ) -> None:
        self.transport = ScriptedTransport()
        self.clock = clock or ManualClock()
        self.listener = Announced()
        self.fetcher = fetcher or FakeFetcher()
        self.fetcher.clock = self.clock
        settings.setdefault("assignors", [RangeAssignor()])
        self.consumer = Consumer(
            "g",
            topics=[T],
            listener=self.listener,
            topic_metadata=InMemoryTopicMetadata({T: 6}),
            transport=self.transport,
            clock=self.clock,
            bootstrap_servers="x:1",
            fetcher=self.fetcher,
            **settings,
        )
        # The engine is driven step by step on the test thread: poll() must not start its
        # threads.
        self.consumer._started = True
        self.engine = self.consumer.group._engine
        self.engine.resolve_protocol_type()

    def join(self, *partitions: int, generation: int = 1) -> None:
        """Script one rebalance in which this member (a follower) gets ``partitions``."""
        self.script(*partitions, generation=generation)
        self.engine.request_rejoin("test")

    def script(self, *partitions: int, generation: int) -> None:
        """Script the answers of one rebalance, for a rejoin the member asks for itself."""
        member_id = "m-2"
        protocol = self.consumer.group._assignors[0].name
        if self.engine.coordinator is None:
            self.transport.prepare(NODE)
        self.transport.prepare(
            m.JoinGroupResponse(
                error_code=0,
                generation_id=generation,
                protocol_type="consumer",
                protocol_name=protocol,
                leader="m-1",
                member_id=member_id,
            )
        )
        self.transport.prepare(
            m.SyncGroupResponse(
                error_code=0,
                protocol_type="consumer",
                protocol_name=protocol,
                assignment=encode_assignment(Assignment(tuple(tp(p) for p in partitions))),
            )
        )
        if self.engine.generation.generation_id < 0:
            self.engine._generation = Generation(-1, member_id, None)

    def refused_for_good(self) -> None:
        """The broker refuses the member's join for good (no authorization on the group):
        the member stops on GroupAuthorizationError."""
        from coordination.errors import GroupAuthorizationError

        self.transport.prepare(NODE)
        self.transport.prepare(
            m.JoinGroupResponse(
                error_code=E.GROUP_AUTHORIZATION_FAILED,
                generation_id=-1,
                protocol_type="consumer",
                protocol_name="",
                leader="",
                member_id="",
            )
        )
        self.engine.request_rejoin("test")
        with pytest.raises(GroupAuthorizationError):
            self.engine.join_group_if_needed(deadline=None)

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
    servers = f"127.0.0.1:{free_port()}"  # a port where nothing listens
    consumer = Consumer("g", topics=[T], bootstrap_servers=servers, bootstrap_timeout_ms=500)
    with pytest.raises(ConnectionFailedError, match=rf"{servers}.*check that") as e:
        consumer.start()
    assert "KafkaTimeoutError" in str(e.value)
    assert consumer.group.state.name != "STABLE"
    consumer.close(1)


def test_new_partitions_are_not_fetched_until_the_listener_returned_so_it_may_pause_them() -> None:
    # As in Java, where on_partitions_assigned runs inside poll() before anything is fetched.
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    seen: list[object] = []

    def inside(partitions: frozenset[TopicPartition]) -> None:
        seen.append(list(h.fetcher.assigned))
        h.fetcher.to_return = {tp(0): [Record(10)], tp(1): [Record(20)]}
        seen.append(h.consumer.poll(timeout_ms=0))
        seen.append(h.consumer.position(tp(0)))  # established already
        h.consumer.pause(tp(0))

    h.listener.then = inside
    assert h.engine.join_group_if_needed(deadline=None)
    assert seen == [[], {}, 10]
    assert h.fetcher.assigned == [tp(1)]  # fetched once announced, unless paused
    assert h.fetcher.positions[tp(1)] == 20
    h.fetcher.to_return = {tp(1): [Record(20)]}
    assert list(h.consumer.poll(timeout_ms=0)) == [tp(1)]
    h.consumer.resume(tp(0))
    assert h.fetcher.positions[tp(0)] == 10


def test_a_partition_whose_listener_call_failed_is_held_until_the_retry_announces_it() -> None:
    h = Harness()
    h.join(0)
    h.offsets(lambda r: committed(p0=10), 2)  # the retry establishes the position again
    failures = [RuntimeError("the listener is not ready")]

    seen: list[tuple[object, ...]] = []

    def fail_once(partitions: frozenset[TopicPartition]) -> None:
        h.fetcher.to_return = {tp(0): [Record(10)]}
        seen.append((list(h.fetcher.assigned), h.consumer.poll(0), h.consumer.position(tp(0))))
        if failures:
            raise failures.pop()

    h.listener.then = fail_once
    assert h.engine.join_group_if_needed(deadline=None)  # on_join_complete failed, then not
    # Both times, while the listener ran, the partition was positioned but not fetched.
    assert seen == [([], {}, 10), ([], {}, 10)]
    assert h.listener.assigned == [frozenset({tp(0)})] * 2
    assert h.fetcher.assigned == [tp(0)] and h.fetcher.positions[tp(0)] == 10


def test_seek_moves_the_position_and_poll_goes_on_from_there() -> None:
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    h.fetcher.to_return = {tp(0): [Record(10), Record(11), Record(12)]}
    assert [r.offset for r in h.consumer.poll(0)[tp(0)]] == [10, 11, 12]
    assert h.consumer.position(tp(0)) == 13

    h.consumer.seek(tp(0), 11)  # read 11 and 12 again
    assert h.consumer.position(tp(0)) == 11 and h.fetcher.positions[tp(0)] == 11
    h.fetcher.to_return = {tp(0): [Record(11), Record(12)]}
    assert [r.offset for r in h.consumer.poll(0)[tp(0)]] == [11, 12]

    h.consumer.pause(tp(1))
    h.consumer.seek(tp(1), 5)  # stays paused, and resumes from there
    assert h.consumer.paused() == {tp(1)} and tp(1) not in h.fetcher.assigned
    h.consumer.resume(tp(1))
    assert h.fetcher.positions[tp(1)] == 5

    with pytest.raises(PartitionsNotOwnedError, match="orders-4"):
        h.consumer.seek(tp(4), 0)
    with pytest.raises(ValueError, match="offset"):
        h.consumer.seek(tp(0), -1)
    assert h.consumer.position(tp(4)) is None


def test_commits_are_fenced_by_ownership_then_by_generation() -> None:
    h = Harness(assignors=[CooperativeStickyAssignor()])
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    # A cooperative rebalance moves partition 1 away; the member rejoins to hand it over.
    h.join(0, generation=2)
    h.script(0, generation=3)
    assert h.engine.join_group_if_needed(deadline=None)
    assert h.consumer.assignment() == {tp(0)}

    with pytest.raises(PartitionsNotOwnedError, match="orders-1"):
        h.consumer.commit({tp(1): 21, tp(0): 11})
    assert h.transport.requests(m.OffsetCommitRequest) == []  # nothing sent

    def ok(request: m.Request) -> m.OffsetCommitResponse:
        assert isinstance(request, m.OffsetCommitRequest)
        return m.OffsetCommitResponse(partitions=tuple((t, p, 0) for t, p, _, _ in request.offsets))

    h.transport.prepare(ok, response_type=m.OffsetCommitResponse)
    h.consumer.commit()  # the positions of the owned partitions
    (sent,) = h.transport.requests(m.OffsetCommitRequest)
    assert (sent.generation_id, sent.member_id) == (3, "m-2")
    assert sent.offsets == ((T, 0, 10, ""),)


def test_committing_nothing_sends_nothing_even_before_the_first_assignment() -> None:
    # A consume loop commits after every poll; its first polls come before the member
    # has joined (no generation yet): as Java's consumer, that commit is a no-op.
    h = Harness(assignors=[CooperativeStickyAssignor()])
    h.consumer.commit()
    h.consumer.commit({})
    assert h.transport.requests(m.OffsetCommitRequest) == []
    # Offsets named explicitly are still checked: this member owns nothing yet.
    with pytest.raises(PartitionsNotOwnedError, match="orders-0"):
        h.consumer.commit({tp(0): 1})


def test_poll_waits_its_timeout_on_the_clock_in_slices() -> None:
    h = Harness()
    h.join(0)
    h.offsets(lambda r: committed(p0=10), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    start, h.fetcher.polls = h.clock.now, []
    assert h.consumer.poll(timeout_ms=350) == {}
    # In slices (the lock is let go between them), until the deadline; the last may be a
    # millisecond over, as the clock's seconds do not add up exactly.
    assert h.fetcher.polls[:4] == [100, 100, 100, 50] and len(h.fetcher.polls) <= 5
    assert h.clock.now == pytest.approx(start + 0.35, abs=0.0011)


class IdleFetcher(FakeFetcher):
    """Waits out a poll's timeout in real time when it has nothing to return, as
    kafka-python's consumer does (the Consumer holds its lock meanwhile)."""

    def poll(self, timeout_ms: int = 0) -> dict[Any, list[Record]]:
        if not any(t in self.assigned for t in self.to_return):
            time.sleep(timeout_ms / 1000)
        return super().poll(timeout_ms)


class WaitingClock(ManualClock):
    """A manual clock whose sleeps also wait in real time (until interrupted), so that a
    polling thread does not spin."""

    def sleep(self, seconds: float, interrupt: Event) -> None:
        interrupt.wait(seconds)
        super().sleep(seconds, interrupt)


@contextlib.contextmanager
def polling(h: Harness) -> Iterator[None]:
    """A thread that polls ``h``'s consumer until the block ends."""
    stop = threading.Event()

    def poll_loop() -> None:
        while not stop.is_set():
            h.consumer.poll(timeout_ms=2500)

    poller = threading.Thread(target=poll_loop, daemon=True)
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join(10)


def fetched_within(h: Harness, seconds: float) -> float:
    """Seconds until the fetcher is polled, at most ``seconds`` (then it fails)."""
    started = time.perf_counter()
    while not h.fetcher.polls and time.perf_counter() - started < seconds:
        time.sleep(0.005)
    took = time.perf_counter() - started
    assert h.fetcher.polls, f"no fetch within {seconds}s"
    return took


def test_a_consumer_with_nothing_to_fetch_lets_its_first_partitions_in_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A new member polls with nothing assigned. Its fetcher (kafka-python) waits out each
    # slice when it has no partition, and the consumer holds its lock over a slice: the
    # rebalance callback that gives the member its first partitions waited for the lock at
    # each of its steps (up to 100 ms each; a KIP-848 join took 0.1-0.2 s longer than
    # Java's in benchmarks/rebalance_cost.py). Slices of 2 s here make a wait plain.
    monkeypatch.setattr(consumer_module, "_POLL_SLICE_MS", 2000)
    h = Harness(IdleFetcher(), clock=WaitingClock())
    with polling(h):
        time.sleep(0.3)
        assert h.fetcher.polls == []  # nothing to fetch: no fetch slice, no lock held
        h.fetcher.to_return = {tp(0): [Record(10)]}  # once it is assigned
        h.join(0)
        h.offsets(lambda r: committed(p0=10), 1)
        started = time.perf_counter()
        assert h.engine.join_group_if_needed(deadline=None)
        took = time.perf_counter() - started
        assert h.listener.assigned == [frozenset({tp(0)})]
        assert took < 0.5, f"the assignment waited {took:.3f}s for the polling thread"
        # The idle wait ends with it: the partition is fetched at once, from its committed
        # offset.
        assert fetched_within(h, 5) < 0.5
        assert h.fetcher.assigned == [tp(0)] and (tp(0), 10) in h.fetcher.seeks


def test_resuming_the_only_paused_partition_from_another_thread_fetches_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(consumer_module, "_POLL_SLICE_MS", 2000)
    h = Harness(IdleFetcher(), clock=WaitingClock())
    h.join(0)
    h.offsets(lambda r: committed(p0=10), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    h.consumer.pause(tp(0))
    with polling(h):
        time.sleep(0.3)
        assert h.fetcher.polls == []  # all paused: nothing to fetch
        h.fetcher.to_return = {tp(0): [Record(10)]}
        h.consumer.resume(tp(0))
        assert fetched_within(h, 5) < 0.5


class WakeableFetcher(IdleFetcher):
    """An idle fetcher whose wait ``wakeup()`` (from another thread) cuts short, as the lean
    fetcher's."""

    def __init__(self) -> None:
        super().__init__()
        self.woken = threading.Event()
        self.wakeups = 0

    def wakeup(self) -> None:
        self.wakeups += 1
        self.woken.set()

    def poll(self, timeout_ms: int = 0) -> dict[Any, list[Record]]:
        if not any(t in self.assigned for t in self.to_return):
            self.woken.wait(timeout_ms / 1000)
        self.woken.clear()
        return FakeFetcher.poll(self, timeout_ms)


def test_a_rebalance_callback_cuts_a_wakeable_fetchers_slice_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The polling thread holds the consumer's lock over a fetch slice of an owned, quiet
    # partition; a rebalance that gives the member another partition waits for that lock
    # at each of its steps. A fetcher with wakeup() (the lean one) ends its slice then:
    # slices of 2 s here, and the rebalance takes far less than one.
    monkeypatch.setattr(consumer_module, "_POLL_SLICE_MS", 2000)
    fetcher = WakeableFetcher()
    h = Harness(fetcher, clock=WaitingClock())
    h.join(0)
    h.offsets(lambda r: committed(p0=10), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    with polling(h):
        fetched_within(h, 5)  # the polling thread is in a slice of partition 0
        time.sleep(0.2)
        h.join(0, 1, generation=2)
        h.offsets(lambda r: committed(p1=20), 1)
        started = time.perf_counter()
        assert h.engine.join_group_if_needed(deadline=None)
        took = time.perf_counter() - started
        assert tp(1) in h.listener.assigned[-1]
        assert took < 1.0, f"the rebalance waited {took:.3f}s for the fetch slice"
        assert fetcher.wakeups >= 1


class PollsWhenLost(RebalanceListener):
    """Polls from inside on_partitions_lost, as another thread may poll meanwhile."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.polled: list[dict[TopicPartition, list[int]]] = []

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.h.fetcher.to_return = {tp(0): [Record(10)], tp(1): [Record(20)]}
        polled = self.h.consumer.poll(0)
        self.polled.append({t: [r.offset for r in rs] for t, rs in polled.items()})


def test_lost_partitions_return_no_records_from_the_moment_the_loss_is_known() -> None:
    # Found by the fault campaign (docs/campaign.md): a consumer frozen past its session
    # learnt on resuming that its partition was lost, and poll() went on returning its
    # records for a while (the membership thread, telling the listener, waited for the
    # consumer's lock, which the polling thread kept taking again), although the partition
    # belonged to another member by then.
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)
    listener = PollsWhenLost(h)
    h.consumer._user_listener = listener

    h.consumer.group.on_join_prepare(-1, "")  # the membership is gone

    assert listener.polled == [{}]
    h.fetcher.to_return = {tp(0): [Record(10)]}
    assert h.consumer.poll(0) == {}


class HighwaterFetcher(FakeFetcher):
    """Knows each partition's end as kafka-python does: only while it is assigned."""

    def __init__(self, ends: dict[TopicPartition, int]) -> None:
        super().__init__()
        self.ends = ends

    def highwater(self, ktp: Any) -> int | None:
        from kafka.errors import IllegalStateError

        t = TopicPartition(ktp.topic, ktp.partition)
        if t not in self.assigned:
            raise IllegalStateError("Partition is not assigned")
        return self.ends.get(t)


def test_metrics_report_paused_and_announcing_partitions_without_raising() -> None:
    fetcher = HighwaterFetcher({tp(0): 15, tp(1): 30})
    h = Harness(fetcher)
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    during: list[object] = []

    def inside(partitions: frozenset[TopicPartition]) -> None:
        # Being announced: positioned, not fetched yet.
        metrics = h.consumer.metrics()
        during.append((metrics.positions, metrics.lag))

    h.listener.then = inside
    assert h.engine.join_group_if_needed(deadline=None)
    assert during == [({tp(0): 10, tp(1): 20}, {tp(0): None, tp(1): None})]
    assert h.consumer.metrics().lag == {tp(0): 5, tp(1): 10}

    h.consumer.pause(tp(0))
    fetcher.ends[tp(0)] = 99  # not fetched: the end its last fetch saw stands
    metrics = h.consumer.metrics()
    assert metrics.paused == {tp(0)}
    assert metrics.positions == {tp(0): 10, tp(1): 20}
    assert metrics.lag == {tp(0): 5, tp(1): 10} and metrics.total_lag == 15
    h.consumer.resume(tp(0))
    assert h.consumer.metrics().lag[tp(0)] == 89


def test_a_listener_that_raises_on_a_loss_still_loses_the_partitions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The recipes' one rule for what a user's callback raises: logged, and the loss
    # happens all the same (no record of a lost partition is returned after it).
    h = Harness()
    h.join(0, 1)
    h.offsets(lambda r: committed(p0=10, p1=20), 1)
    assert h.engine.join_group_if_needed(deadline=None)

    class FailsOnLoss(RebalanceListener):
        def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
            raise RuntimeError("lost failed")

    h.consumer._user_listener = FailsOnLoss()
    with caplog.at_level("ERROR", logger="recipes.partitioning"):
        h.consumer.group.on_join_prepare(-1, "")  # does not raise
    assert "on_partitions_lost raised" in caplog.text
    assert h.consumer.assignment() == frozenset() and h.consumer.position(tp(0)) is None
    h.fetcher.to_return = {tp(0): [Record(10)]}
    assert h.consumer.poll(0) == {}


def test_poll_raises_the_error_that_stopped_the_group_member_at_every_call() -> None:
    # A member the broker refuses for good (here: no authorization on the group) gets no
    # partition ever: poll says so, as Kafka's consumers throw from poll, instead of
    # returning nothing for ever.
    from coordination.errors import GroupAuthorizationError

    h = Harness()
    h.refused_for_good()
    assert isinstance(h.consumer.group.failure, GroupAuthorizationError)
    for _ in range(2):
        with pytest.raises(GroupAuthorizationError):
            h.consumer.poll(timeout_ms=0)
