"""recipes.queues.AsyncShareWorker against the fake share consumer of the ShareWorker's own
tests: async handlers' outcomes become the ShareWorker's acknowledgements, cancelling the
task that runs the worker drains it, the loop stays free while the worker drains, a handler
cancelled by the worker's close (past the drain timeout) or whose loop is closed has its
record released, never accepted or dead-lettered, and a handler cancelled by anyone else
fails its record, retried (dead-lettered at its final delivery) while the worker goes on."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import recipes.queues._worker as worker_module
from coordination.errors import ConfigurationError, CoordinatorStateError, FatalBrokerError
from recipes.queues import AcknowledgeType, AsyncShareWorker, ShareRecord

from .test_async_faces import on_a_loop
from .test_share_worker import TOPIC, FakeBroker, FakeConsumer, FakeProducer

A = AcknowledgeType


@pytest.fixture(autouse=True)
def fake_consumer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(worker_module, "ShareConsumer", FakeConsumer)
    FakeConsumer.made.clear()
    yield


def make(broker: FakeBroker, handler: Any, **kw: Any) -> AsyncShareWorker:
    kw.setdefault("redelivery_backoff_ms", 0)
    return AsyncShareWorker("g", topics=[TOPIC], handler=handler, broker=broker, **kw)


async def until(done: Any, what: str = "") -> None:
    """Wait on the loop (it keeps running meanwhile) until ``done()``; on_a_loop's own
    limit fails a test that never gets there."""
    while not done():
        await asyncio.sleep(0.01)


class Retryable(Exception):
    pass


class Poison(Exception):
    pass


def test_each_outcome_becomes_the_share_workers_acknowledgement() -> None:
    broker = FakeBroker(records=3)
    producer = FakeProducer(broker)
    tried: list[tuple[int, int]] = []
    loops: set[asyncio.AbstractEventLoop] = set()

    async def handle(record: ShareRecord) -> None:
        loops.add(asyncio.get_running_loop())
        tried.append((record.offset, record.delivery_count))
        await asyncio.sleep(0)
        if record.offset == 1 and record.delivery_count == 1:
            raise Retryable("once")
        if record.offset == 2:
            raise Poison("never")

    async def scenario() -> None:
        w = make(
            broker,
            handle,
            retry_on=Retryable,
            dead_letter_topic="jobs.dlq",
            dead_letter_producer=producer,
        )
        runner = asyncio.create_task(w.run())
        await until(lambda: broker.state == {0: "accepted", 1: "accepted", 2: "rejected"})
        w.stop()
        await runner
        assert loops == {asyncio.get_running_loop()}
        m = w.metrics()
        assert (m.accepted, m.released, m.rejected, m.retries, m.handler_errors) == (2, 1, 1, 1, 2)
        assert (m.dead_lettered, m.dead_letter_failures) == (1, 0)
        assert w.error is None

    on_a_loop(scenario)
    assert sorted(tried) == [(0, 1), (1, 1), (1, 2), (2, 1)]
    assert [what for what, offset, _ in broker.events if offset == 2] == [
        "acquired",
        "dead-letter",
        "REJECT",
    ]
    assert len(producer.sent) == 1
    assert producer.headers()["__dlq.error.class"].endswith(b".Poison")
    assert FakeConsumer.made[0].closed


def test_the_brokers_delivery_limit_makes_a_failure_final_as_for_the_share_worker() -> None:
    broker = FakeBroker(records=1, delivery_limit=2)
    producer = FakeProducer(broker)
    attempts: list[int] = []

    async def handle(record: ShareRecord) -> None:
        attempts.append(record.delivery_count)
        raise Retryable("down")

    async def scenario() -> None:
        w = make(
            broker,
            handle,
            max_deliveries=4,
            dead_letter_topic="jobs.dlq",
            dead_letter_producer=producer,
        )
        assert w.final_delivery == 4  # not read before the worker joins
        async with w:
            await until(lambda: broker.state[0] == "rejected")
        assert w.final_delivery == 2

    on_a_loop(scenario)
    assert attempts == [1, 2] and len(producer.sent) == 1


def test_a_plain_function_handler_is_refused_and_coroutine_callables_are_taken() -> None:
    with pytest.raises(ConfigurationError, match="handler must be a coroutine function"):
        make(FakeBroker(), lambda record: None)

    async def handle(record: ShareRecord, extra: int) -> None:
        pass

    class Handler:
        async def __call__(self, record: ShareRecord) -> None:
            pass

    make(FakeBroker(), functools.partial(handle, extra=1))
    make(FakeBroker(), Handler())
    # The ShareWorker's own settings are checked as they are for it.
    with pytest.raises(ConfigurationError, match="max_deliveries"):
        make(FakeBroker(), Handler(), max_deliveries=0)


def test_concurrency_is_how_many_handler_coroutines_run_at_once() -> None:
    broker = FakeBroker(records=6)
    running = 0
    most = 0

    async def scenario() -> None:
        three_at_once = asyncio.Event()

        async def handle(record: ShareRecord) -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            if running == 3:
                three_at_once.set()
            await three_at_once.wait()  # the first three wait for each other
            await asyncio.sleep(0.01)
            running -= 1

        async with make(broker, handle, concurrency=3) as w:
            await until(lambda: set(broker.state.values()) == {"accepted"})
        assert w.metrics().accepted == 6

    on_a_loop(scenario)
    assert most == 3


def test_many_concurrent_handlers_are_tasks_not_threads() -> None:
    broker = FakeBroker(records=300)
    threads_seen = 0

    async def scenario() -> None:
        nonlocal threads_seen
        all_running = asyncio.Event()
        running = 0

        async def handle(record: ShareRecord) -> None:
            nonlocal running
            running += 1
            if running == 200:
                all_running.set()
            await all_running.wait()

        before = threading.active_count()
        async with make(broker, handle, concurrency=200, prefetch=0) as w:
            await asyncio.wait_for(all_running.wait(), 10)
            threads_seen = threading.active_count() - before
            await until(lambda: w.metrics().accepted == 300)

    on_a_loop(scenario)
    # The worker's poll and handler threads, and asyncio's for the wait and the close.
    assert threads_seen <= 4, threads_seen


def test_cancelling_the_task_that_runs_the_worker_drains_it_as_stop_does() -> None:
    broker = FakeBroker(records=3)
    outcome: list[str] = []

    async def scenario() -> None:
        started = asyncio.Event()
        finish = asyncio.Event()

        async def handle(record: ShareRecord) -> None:
            started.set()
            await finish.wait()

        w = make(broker, handle, concurrency=1, prefetch=2)
        runner = asyncio.create_task(w.run())
        await started.wait()
        await until(lambda: w.metrics().received == 3)
        runner.cancel()
        # The two not started are released at once, while the first one's handler runs
        # (on this loop, which is free: it runs this very wait).
        await until(lambda: sorted(broker.acks(A.RELEASE)) == [1, 2])
        assert not runner.done() and broker.state[0] == "acquired"
        runner.cancel()  # a second cancellation does not cut the drain short
        await asyncio.sleep(0.05)
        assert not runner.done()
        finish.set()
        try:
            await runner
        except asyncio.CancelledError:
            outcome.append("cancelled")
        assert FakeConsumer.made[0].closed
        m = w.metrics()
        assert (m.accepted, m.released, m.released_unstarted) == (1, 2, 2)

    on_a_loop(scenario)
    assert outcome == ["cancelled"]
    assert broker.state == {0: "accepted", 1: "available", 2: "available"}


def test_the_loop_runs_other_tasks_while_the_worker_drains() -> None:
    """The handler finishes only after a heartbeat task has ticked five times after the
    close began: if the drain (or anything the close waits for) held the loop, the ticks
    would never come, the drain would time out and the record would be released."""
    broker = FakeBroker(records=1)

    async def scenario() -> None:
        ticks = 0
        closing = asyncio.Event()
        started = asyncio.Event()

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                if closing.is_set():
                    ticks += 1

        async def handle(record: ShareRecord) -> None:
            started.set()
            await until(lambda: ticks >= 5)

        beating = asyncio.create_task(heartbeat())
        w = make(broker, handle, drain_timeout_ms=60_000)
        await w.start()
        await started.wait()
        closing.set()
        await w.close()
        beating.cancel()
        assert broker.state == {0: "accepted"} and ticks >= 5

    on_a_loop(scenario, within_s=30)


def test_a_handler_past_the_drain_timeout_is_cancelled_and_its_record_released() -> None:
    broker = FakeBroker(records=1)
    seen: list[str] = []

    async def scenario() -> None:
        started = asyncio.Event()

        async def handle(record: ShareRecord) -> None:
            started.set()
            try:
                await asyncio.Event().wait()  # never set
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        w = make(broker, handle, drain_timeout_ms=50)
        runner = asyncio.create_task(w.run())
        await started.wait()
        w.stop()
        await runner  # returns: the cancellation after the drain is no error of the run
        assert seen == ["cancelled"]  # ended before run() returned
        assert w.error is None
        await asyncio.sleep(0.3)  # the handler's thread hears of the cancellation
        m = w.metrics()
        assert (m.accepted, m.rejected, m.released) == (0, 0, 1)
        assert m.handler_errors == 0  # the worker's own cancellation: no failure

    on_a_loop(scenario)
    assert broker.state == {0: "available"} and broker.acks(A.RELEASE) == [0]
    assert broker.acks(A.ACCEPT) == []


def test_a_handler_cancelled_from_outside_is_retried_and_the_worker_goes_on() -> None:
    broker = FakeBroker(records=2)
    producer = FakeProducer(broker)
    tried: list[tuple[int, int]] = []

    async def scenario() -> None:
        tasks: list[asyncio.Task[Any]] = []

        async def handle(record: ShareRecord) -> None:
            tried.append((record.offset, record.delivery_count))
            if (record.offset, record.delivery_count) == (0, 1):
                tasks.append(asyncio.current_task())  # type: ignore[arg-type]
                await asyncio.Event().wait()

        # Cancellation is not among retry_on here: it is retried all the same, never
        # dead-lettered as poison at its first delivery.
        w = make(
            broker,
            handle,
            retry_on=Retryable,
            dead_letter_topic="jobs.dlq",
            dead_letter_producer=producer,
        )
        runner = asyncio.create_task(w.run())
        await until(lambda: bool(tasks))
        tasks[0].cancel()  # a watchdog's, say: not the worker's
        await until(lambda: broker.state == {0: "accepted", 1: "accepted"})
        assert not runner.done() and w.error is None
        w.stop()
        await runner
        m = w.metrics()
        assert (m.handler_errors, m.retries, m.released, m.accepted) == (1, 1, 1, 2)
        assert (m.rejected, m.dead_lettered) == (0, 0)

    on_a_loop(scenario)
    assert sorted(tried) == [(0, 1), (0, 2), (1, 1)] and producer.sent == []


def test_a_handler_cancelled_at_its_final_delivery_is_dead_lettered() -> None:
    broker = FakeBroker(records=1)
    producer = FakeProducer(broker)
    tried: list[int] = []

    async def handle(record: ShareRecord) -> None:
        tried.append(record.delivery_count)
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(0)

    async def scenario() -> None:
        w = make(
            broker,
            handle,
            retry_on=Retryable,
            max_deliveries=2,
            dead_letter_topic="jobs.dlq",
            dead_letter_producer=producer,
        )
        async with w:
            await until(lambda: broker.state == {0: "rejected"})
            assert w.error is None
        m = w.metrics()
        assert (m.retries, m.released, m.dead_lettered, m.rejected) == (1, 1, 1, 1)

    on_a_loop(scenario)
    assert tried == [1, 2]
    headers = producer.headers()
    assert headers["__dlq.reason"] == b"max_deliveries"
    assert headers["__dlq.error.class"] == b"recipes.queues._errors.HandlerCancelledError"


def test_closing_the_loop_under_a_running_handler_releases_its_record() -> None:
    broker = FakeBroker(records=1)
    loop = asyncio.new_event_loop()
    started = asyncio.Event()

    async def handle(record: ShareRecord) -> None:
        started.set()
        await asyncio.Event().wait()

    w = make(broker, handle)

    async def start() -> None:
        await w.start()
        await started.wait()

    done = threading.Event()

    def main() -> None:
        try:
            loop.run_until_complete(start())
        finally:
            loop.close()  # the handler's task still pending
            done.set()

    threading.Thread(target=main, daemon=True).start()
    assert done.wait(10)
    # The handler's thread sees the loop closed: the record is released, the worker stops
    # and closes its consumer on its own threads.
    broker.wait_for(lambda: FakeConsumer.made[0].closed)
    assert broker.state == {0: "available"} and broker.acks(A.RELEASE) == [0]
    assert isinstance(w.error, CoordinatorStateError)
    assert "closed" in str(w.error)


def test_a_handler_may_stop_the_worker_but_not_close_it() -> None:
    broker = FakeBroker(records=1)
    refused: list[BaseException] = []

    async def scenario() -> None:
        async def handle(record: ShareRecord) -> None:
            try:
                await w.close()
            except CoordinatorStateError as exc:
                refused.append(exc)
            w.stop()

        w = make(broker, handle)
        await w.run()

    on_a_loop(scenario)
    assert broker.state == {0: "accepted"}
    assert "stop()" in str(refused[0])


def test_a_fatal_poll_error_stops_the_worker_and_run_raises_it() -> None:
    broker = FakeBroker(records=0)
    broker.fail_poll = FatalBrokerError(30, group_id="g", api="ShareFetch")

    async def handle(record: ShareRecord) -> None:
        pass

    async def scenario() -> None:
        w = make(broker, handle)
        with pytest.raises(FatalBrokerError):
            await w.run()
        assert w.error is broker.fail_poll
        with pytest.raises(CoordinatorStateError):
            await w.start()

    on_a_loop(scenario)
    assert FakeConsumer.made[0].closed


def test_close_without_start_closes_the_consumer_and_is_idempotent() -> None:
    async def handle(record: ShareRecord) -> None:
        pass

    async def scenario() -> None:
        w = make(FakeBroker(), handle)
        await w.close()
        await w.close()
        with pytest.raises(CoordinatorStateError):
            await w.run()

    on_a_loop(scenario)
    assert FakeConsumer.made[0].closed
