"""AsyncConsumer keeps the consumer's guarantees: a record is handed out only while its
partition is owned and unpaused, at its position, and committed only once handed out; a
getmany cancelled after its poll ran on the fetch thread loses nothing.

The group member is driven on the test thread over a scripted transport and a manual
clock (as in test_consumer_positions.py); the fetch thread is the AsyncConsumer's own.
Each scenario runs on an event loop of its own thread and fails if the loop hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from coordination.testing import ManualClock, ScriptedTransport
from coordination.testing import messages as m
from recipes.partitioning import AsyncConsumer, InMemoryTopicMetadata, RangeAssignor
from recipes.partitioning._consumer import _Delivery

from ..test_async_faces import on_a_loop as run_on_a_loop
from .test_consumer_positions import FakeFetcher, Harness, Record, T, committed, tp


class AsyncHarness(Harness):
    """An AsyncConsumer (no listener: nothing waits for the loop) over Harness's member."""

    def __init__(self, fetcher: FakeFetcher | None = None) -> None:
        self.transport = ScriptedTransport()
        self.clock = ManualClock()
        self.fetcher = fetcher or FakeFetcher()
        self.fetcher.clock = self.clock
        self.aio = AsyncConsumer(
            "g",
            topics=[T],
            assignors=[RangeAssignor()],
            topic_metadata=InMemoryTopicMetadata({T: 6}),
            transport=self.transport,
            clock=self.clock,
            bootstrap_servers="x:1",
            fetcher=self.fetcher,
        )
        self.consumer = self.aio.consumer
        self.consumer._started = True  # the member is driven on the test thread
        self.engine = self.consumer.group._engine
        self.engine.resolve_protocol_type()

    def owning(self, **offsets: int) -> AsyncHarness:
        """Join as owner of these partitions (p0=10: partition 0, committed offset 10)."""
        self.join(*(int(p[1:]) for p in offsets))
        self.offsets(lambda r: committed(**offsets), 1)
        assert self.engine.join_group_if_needed(deadline=None)
        return self

    def commits(self) -> list[tuple[Any, ...]]:
        """The offsets of every commit sent so far."""
        return [r.offsets for r in self.transport.requests(m.OffsetCommitRequest)]

    def accept_commit(self) -> None:
        def ok(request: m.Request) -> m.OffsetCommitResponse:
            assert isinstance(request, m.OffsetCommitRequest)
            return m.OffsetCommitResponse(
                partitions=tuple((t, p, 0) for t, p, _, _ in request.offsets)
            )

        self.transport.prepare(ok, response_type=m.OffsetCommitResponse)


@dataclass(frozen=True)
class KafkaRecord(Record):
    """As kafka-python's ``ConsumerRecord``, as far as these tests look."""

    topic: str = T
    partition: int = 0


def records(partition: int, first: int, count: int) -> dict[Any, list[Record]]:
    return {
        tp(partition): [KafkaRecord(o, partition=partition) for o in range(first, first + count)]
    }


def offsets(batch: dict[Any, list[Any]]) -> dict[Any, list[int]]:
    return {t: [r.offset for r in rs] for t, rs in batch.items()}


def on_a_loop(
    h: AsyncHarness, scenario: Callable[[], Coroutine[Any, Any, None]], within_s: float = 10
) -> None:
    """Run ``scenario`` on an event loop of its own thread; fail if the loop hangs. The
    fetch thread is let go either way."""
    try:
        run_on_a_loop(scenario, within_s)
    finally:
        h.aio._fetching.shutdown(wait=False, cancel_futures=True)


def test_a_commit_after_one_record_of_a_batch_commits_that_record_only() -> None:
    # docs/partitioning.md's loop: handle one record, commit. The fetcher returned 10.
    h = AsyncHarness().owning(p0=10)
    h.fetcher.to_return = records(0, 10, 10)

    async def scenario() -> None:
        first = await h.aio.getone()
        assert first.offset == 10
        assert h.aio.position(tp(0)) == 11
        h.accept_commit()
        await h.aio.commit()
        assert h.commits() == [((T, 0, 11, ""),)]  # not 20: 11..19 were not handed out
        # The rest come next, one by one, without another fetch.
        polls = len(h.fetcher.polls)
        assert [(await h.aio.getone()).offset for _ in range(9)] == list(range(11, 20))
        assert len(h.fetcher.polls) == polls
        assert h.aio.position(tp(0)) == 20

    on_a_loop(h, scenario)


def test_poll_max_records_moves_the_position_past_what_it_returned_only() -> None:
    h = AsyncHarness().owning(p0=10)
    h.fetcher.to_return = records(0, 10, 10)
    assert offsets(h.consumer.poll(0, max_records=3)) == {tp(0): [10, 11, 12]}
    assert h.consumer.position(tp(0)) == 13
    assert offsets(h.consumer.poll(0)) == {tp(0): list(range(13, 20))}
    with pytest.raises(ValueError, match="max_records"):
        h.consumer.poll(0, max_records=0)


class GatedFetcher(FakeFetcher):
    """Its poll waits, on the fetch thread, until the test lets it return."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.gated = False

    def poll(self, timeout_ms: int = 0) -> dict[Any, list[Record]]:
        if self.gated:
            self.gated = False
            self.entered.set()
            assert self.release.wait(5)
        return super().poll(timeout_ms)


def test_a_getmany_cancelled_while_its_poll_runs_loses_nothing() -> None:
    fetcher = GatedFetcher()
    h = AsyncHarness(fetcher).owning(p0=0)
    fetcher.to_return = records(0, 0, 5)
    fetcher.gated = True

    async def scenario() -> None:
        task = asyncio.create_task(h.aio.getmany(timeout_ms=1000))
        assert await asyncio.to_thread(fetcher.entered.wait, 5)
        task.cancel()
        fetcher.release.set()  # the poll goes on, on the fetch thread, and fetches 0..4
        with pytest.raises(asyncio.CancelledError):
            await task
        h.accept_commit()
        await h.aio.commit()
        assert h.commits() == [((T, 0, 0, ""),)]  # not 5: nobody was handed 0..4
        assert offsets(await h.aio.getmany(timeout_ms=0)) == {tp(0): [0, 1, 2, 3, 4]}

    on_a_loop(h, scenario)


def test_a_getmany_cancelled_after_its_poll_took_the_records_gives_them_back() -> None:
    h = AsyncHarness().owning(p0=0)
    h.fetcher.to_return = records(0, 0, 5)

    async def scenario() -> None:
        task = asyncio.create_task(h.aio.getmany(timeout_ms=1000))
        await asyncio.sleep(0)  # one step of the task: it submits its poll, then waits
        # Wait (blocking the loop on purpose) until the fetch thread has run the poll: its
        # result is on its way to the loop when the task is cancelled.
        h.aio._fetching.submit(lambda: None).result(5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert h.aio.position(tp(0)) == 0
        h.accept_commit()
        await h.aio.commit()
        assert h.commits() == [((T, 0, 0, ""),)]
        assert offsets(await h.aio.getmany(timeout_ms=0)) == {tp(0): [0, 1, 2, 3, 4]}
        assert h.aio.position(tp(0)) == 5

    on_a_loop(h, scenario)


def test_a_lost_partitions_fetched_records_are_not_returned() -> None:
    h = AsyncHarness().owning(p0=10)
    h.fetcher.to_return = records(0, 10, 10)

    async def scenario() -> None:
        assert (await h.aio.getone()).offset == 10
        await asyncio.to_thread(h.consumer.group.on_join_prepare, -1, "")  # membership lost
        assert h.aio.assignment() == frozenset()
        assert await h.aio.getmany(timeout_ms=0) == {}  # 11..19 may be another's now

    on_a_loop(h, scenario)


def test_pause_takes_effect_on_the_next_getone_and_resume_goes_on_from_there() -> None:
    h = AsyncHarness().owning(p0=10, p1=20)
    h.fetcher.to_return = {**records(0, 10, 10), **records(1, 20, 2)}

    async def scenario() -> None:
        first = await h.aio.getone()
        assert first.offset == 10
        h.aio.pause(tp(0))
        assert [(await h.aio.getone()).offset for _ in range(2)] == [20, 21]
        h.aio.resume(tp(0))
        assert h.fetcher.positions[tp(0)] == 11  # fetched again from the record after 10
        h.fetcher.to_return = records(0, 11, 9)
        assert (await h.aio.getone()).offset == 11

    on_a_loop(h, scenario)


def test_seek_takes_effect_on_the_next_getone() -> None:
    h = AsyncHarness().owning(p0=0)
    h.fetcher.to_return = records(0, 0, 10)

    async def scenario() -> None:
        assert [(await h.aio.getone()).offset for _ in range(2)] == [0, 1]
        await h.aio.seek(tp(0), 0)
        h.fetcher.to_return = records(0, 0, 10)  # the fetcher reads from 0 again
        assert (await h.aio.getone()).offset == 0
        assert h.aio.position(tp(0)) == 1

    on_a_loop(h, scenario)


@contextlib.contextmanager
def lock_busy(h: AsyncHarness, lock: Any = None) -> Iterator[None]:
    """The consumer's lock (or ``lock``) held by another thread meanwhile (a commit's round
    trip); fails if the body waited for it (the holder gives up after 5 s)."""
    held, release, outcome = threading.Event(), threading.Event(), []

    def hold() -> None:
        with lock or h.consumer._lock:
            held.set()
            outcome.append(release.wait(5))

    holder = threading.Thread(target=hold, name="committing")
    holder.start()
    assert held.wait(5)
    try:
        yield
    finally:
        release.set()
        holder.join(5)
    assert outcome == [True], "the body waited for the consumer's lock"


def test_the_loops_calls_never_wait_for_the_consumers_lock() -> None:
    h = AsyncHarness().owning(p0=10, p1=20)
    h.fetcher.to_return = {**records(0, 10, 10), **records(1, 20, 2)}
    delivery = _Delivery()  # as getone's, whose result reaches the loop while...
    assert offsets(h.consumer._poll(0, 1, delivery)) == {tp(0): [10]}
    with lock_busy(h):  # ...a commit holds the lock
        h.consumer._deliver(delivery, handed=True)
        assert h.aio.position(tp(0)) == 11
        h.aio.pause(tp(0))
        assert h.aio.paused() == {tp(0)}
        metrics = h.aio.metrics()
        assert metrics.positions == {tp(0): 11, tp(1): 20} and metrics.paused == {tp(0)}
    # Applied before the next poll hands anything out.
    assert offsets(h.consumer._poll(0, None, None)) == {tp(1): [20, 21]}
    assert h.consumer.position(tp(0)) == 11 and h.consumer.paused() == {tp(0)}
    with lock_busy(h):
        h.aio.resume(tp(0))
        assert h.aio.paused() == frozenset()
    h.fetcher.to_return = records(0, 11, 2)
    assert offsets(h.consumer._poll(0, None, None)) == {tp(0): [11, 12]}


def test_assignment_never_waits_for_the_members_lock() -> None:
    # The member holds its lock across a metadata request when its subscription is a
    # pattern (while it joins); the loop asks for the assignment meanwhile.
    h = AsyncHarness().owning(p0=10, p1=20)
    with lock_busy(h, h.consumer.group._lock):
        assert h.aio.assignment() == {tp(0), tp(1)}


def test_async_for_ends_when_another_task_closes_the_consumer() -> None:
    h = AsyncHarness().owning(p0=0)
    h.fetcher.to_return = records(0, 0, 3)

    async def scenario() -> None:
        seen: list[int] = []
        async for record in h.aio:
            seen.append(record.offset)
            if len(seen) == 2:
                h.transport.prepare(m.LeaveGroupResponse(error_code=0))
                await h.aio.close(timeout=0)  # as another task would, between two records
        assert seen == [0, 1]

    on_a_loop(h, scenario)


def test_records_of_a_partition_lost_while_they_travel_to_the_loop_are_not_handed_out() -> None:
    h = AsyncHarness().owning(p0=0, p1=10)
    h.fetcher.to_return = {**records(0, 0, 3), **records(1, 10, 3)}

    async def scenario() -> None:
        task = asyncio.create_task(h.aio.getmany(timeout_ms=1000))
        await asyncio.sleep(0)  # one step of the task: it submits its poll, then waits
        h.aio._fetching.submit(lambda: None).result(5)  # the poll ran (blocking the loop)
        h.consumer.group.on_join_prepare(-1, "")  # then the membership is lost
        assert await task == {}  # its records may be another member's already

    on_a_loop(h, scenario)


def test_getone_getmany_and_async_for_raise_the_error_that_stopped_the_member() -> None:
    from coordination.errors import GroupAuthorizationError

    h = AsyncHarness()
    h.refused_for_good()

    async def scenario() -> None:
        with pytest.raises(GroupAuthorizationError):
            await h.aio.getone()
        with pytest.raises(GroupAuthorizationError):
            await h.aio.getmany(timeout_ms=0)
        with pytest.raises(GroupAuthorizationError):
            async for _ in h.aio:
                pass

    on_a_loop(h, scenario)
