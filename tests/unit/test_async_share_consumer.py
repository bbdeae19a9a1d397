"""recipes.queues.AsyncShareConsumer against the model broker of
tests/unit/test_share_consumer.py: the threaded consumer's calls, awaited; a cancelled poll
loses no record; the loop never waits for a fetch."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from coordination._protocol import share_group as sg
from coordination.errors import CoordinatorStateError
from coordination.transport import CoordinatorNode
from recipes.queues import AcknowledgeType, AsyncShareConsumer, ShareRecord

from .test_async_faces import on_a_loop
from .test_share_consumer import Broker, Leaders

A = AcknowledgeType


class GatedBroker(Broker):
    """The model broker, whose ShareFetch waits while ``gate`` is closed (then acquires)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.gate = threading.Event()
        self.gate.set()
        self.fetching = threading.Event()  # a fetch waits at the gate

    def send(
        self,
        request: Any,
        response_type: type[Any],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: Any = None,
    ) -> Any:
        if isinstance(request, sg.ShareFetchRequest) and not self.gate.is_set():
            self.fetching.set()
            self.gate.wait(10)
        return super().send(
            request, response_type, coordinator=coordinator, timeout_s=timeout_s, then=then
        )

    def states(self) -> list[str]:
        with self.lock:
            return [st[0] for _, st in sorted(self.state.items())]


def make(broker: Broker, **kw: Any) -> AsyncShareConsumer:
    return AsyncShareConsumer(
        "g",
        topics=["jobs"],
        transport=broker,
        leaders=Leaders(broker.partitions, broker),
        bootstrap_servers="x:1",
        retry_backoff_ms=10,
        **kw,
    )


async def poll_n(c: AsyncShareConsumer, n: int) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    while len(got) < n:
        got.extend(await asyncio.wait_for(c.poll(timeout_ms=100), 5))
    return got


async def cancelled_after_the_fetch_began(c: AsyncShareConsumer, broker: GatedBroker) -> None:
    """A poll cancelled while its fetch waits at the broker; the fetch then acquires."""
    broker.gate.clear()
    poll = asyncio.create_task(c.poll(timeout_ms=5_000))
    assert await asyncio.to_thread(broker.fetching.wait, 5)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    broker.gate.set()  # acquired after the cancellation


@pytest.mark.parametrize("fetch_ahead", [False, True])
def test_poll_acknowledge_commit_and_close_are_the_threaded_consumers(fetch_ahead: bool) -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=3)
        heard: list[tuple[Any, threading.Thread]] = []

        async def on_acknowledged(partition: Any, offsets: Any, error: Any) -> None:
            heard.append(((partition, offsets, error), threading.current_thread()))

        async with make(broker, on_acknowledged=on_acknowledged, fetch_ahead=fetch_ahead) as c:
            assert await c.assignment() == {("jobs", 0)}
            first, second, _ = await poll_n(c, 3)
            await c.acknowledge(first, A.ACCEPT)
            await c.acknowledge(second, A.REJECT)
            assert await c.commit() == {("jobs", 0): None}
            assert c.metrics().acknowledged == {"ACCEPT": 1, "REJECT": 1}
            with pytest.raises(CoordinatorStateError, match="not held"):
                await c.acknowledge(first, A.ACCEPT)
        # Closing released the record never acknowledged.
        assert broker.states() == ["acknowledged", "archived", "available"]
        loop_thread = threading.current_thread()
        assert [outcome for outcome, _ in heard] == [
            (("jobs", 0), (0, 1), None),
            (("jobs", 0), (2,), None),
        ]
        assert all(thread is loop_thread for _, thread in heard)  # on the loop
        with pytest.raises(CoordinatorStateError, match="closed"):
            await c.poll()

    on_a_loop(scenario)


@pytest.mark.parametrize("mode", ["explicit", "implicit"])
def test_a_cancelled_poll_loses_no_record_the_next_poll_returns_it(mode: str) -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=2)
        async with make(broker, acknowledgement_mode=mode) as c:
            await c.start(timeout=5)
            await cancelled_after_the_fetch_began(c, broker)
            got = await asyncio.wait_for(c.poll(timeout_ms=1_000), 5)
            assert [(r.offset, r.delivery_count) for r in got] == [(0, 1), (1, 1)]
            # Held by this consumer, and not accepted unseen (implicit mode would have).
            assert broker.states() == ["acquired", "acquired"]
            if mode == "explicit":
                for record in got:
                    await c.acknowledge(record, A.ACCEPT)
            await c.commit()
            assert broker.states() == ["acknowledged", "acknowledged"]

    on_a_loop(scenario)


def test_records_a_cancelled_poll_kept_are_released_at_close() -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=2)
        c = make(broker)
        await c.start(timeout=5)
        await cancelled_after_the_fetch_began(c, broker)
        await c.close()
        assert broker.states() == ["available", "available"]

    on_a_loop(scenario)


def test_the_loop_runs_on_while_a_poll_waits_for_the_broker() -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=1)
        async with make(broker) as c:
            await c.start(timeout=5)
            broker.gate.clear()
            poll = asyncio.create_task(c.poll(timeout_ms=5_000))
            assert await asyncio.to_thread(broker.fetching.wait, 5)
            ticks = 0
            for _ in range(5):
                await asyncio.sleep(0.01)
                ticks += 1
            assert ticks == 5 and not poll.done()
            assert c.metrics().records_acquired == 0  # answers at once, mid-fetch
            broker.gate.set()
            (record,) = await poll
            await c.acknowledge(record)

    on_a_loop(scenario)


def test_lag_is_asked_on_the_consumers_thread_after_a_poll_in_flight() -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=3)
        async with make(broker) as c:
            await c.start(timeout=5)
            first, *_ = await poll_n(c, 3)
            await c.acknowledge(first, A.ACCEPT)
            broker.gate.clear()
            poll = asyncio.create_task(c.poll(timeout_ms=5_000))  # carries the ACCEPT
            assert await asyncio.to_thread(broker.fetching.wait, 5)
            lag = asyncio.create_task(c.lag(timeout=5))
            await asyncio.sleep(0.05)
            assert not lag.done()  # it waits for the poll, whose fetch waits at the broker
            broker.gate.set()
            await poll
            assert await lag == {("jobs", 0): 2}  # asked after the ACCEPT took effect
            assert c.metrics().lag == {("jobs", 0): 2}
        with pytest.raises(CoordinatorStateError, match="closed"):
            await c.lag()

    on_a_loop(scenario)


def test_async_for_yields_records_and_keeps_the_rest_when_left_early() -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=3)
        async with make(broker) as c:
            await c.start(timeout=5)
            seen: list[int] = []
            iterator = c.__aiter__()
            async for record in iterator:
                seen.append(record.offset)
                await c.acknowledge(record)
                break
            await iterator.aclose()  # (a loop left early is closed by the collector)
            rest = await poll_n(c, 2)
            assert seen == [0] and [r.offset for r in rest] == [1, 2]
            for record in rest:
                await c.acknowledge(record)
            await c.commit()
            assert broker.states() == ["acknowledged"] * 3

    on_a_loop(scenario)


def test_on_acknowledged_may_not_await_the_consumer_it_would_wait_for_itself() -> None:
    async def scenario() -> None:
        broker = GatedBroker(records=1)
        refused: list[BaseException] = []

        async def on_acknowledged(partition: Any, offsets: Any, error: Any) -> None:
            try:
                await c.commit()  # queued behind the thread that waits for this callback
            except CoordinatorStateError as e:
                refused.append(e)

        async with make(broker, on_acknowledged=on_acknowledged) as c:
            (record,) = await poll_n(c, 1)
            await c.acknowledge(record)
            assert await asyncio.wait_for(c.commit(), 5) == {("jobs", 0): None}
        assert len(refused) == 1 and "on_acknowledged" in str(refused[0])

    on_a_loop(scenario)
