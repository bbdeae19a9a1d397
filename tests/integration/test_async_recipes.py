"""The asyncio faces of the task distribution and the consumer on a real broker: coroutine
callbacks on the loop and in order, hand-over on close, the change iterator, and records
consumed and committed across a rebalance with nothing lost."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from recipes.partitioning import AsyncConsumer, AsyncRebalanceListener, TopicPartition
from recipes.tasks import AsyncTaskDistribution

from .test_consumer import create, produce

pytestmark = pytest.mark.integration
FAST: dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "retry_backoff_ms": 50,
}
TASKS = {f"t{i}": 1.0 for i in range(4)}


async def eventually(condition: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def test_tasks_run_through_coroutines_on_the_loop_and_move_when_a_worker_closes(
    kafka: str,
) -> None:
    group = f"aio-tasks-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        loop_thread = threading.current_thread()
        running: dict[str, set[str]] = {"a": set(), "b": set()}
        events: list[tuple[str, str, str]] = []

        def worker(name: str) -> AsyncTaskDistribution:
            async def start(task: str, spec: object) -> None:
                assert threading.current_thread() is loop_thread
                await asyncio.sleep(0)  # a real coroutine
                assert not any(task in r for r in running.values()), f"{task} runs twice"
                running[name].add(task)
                events.append(("start", name, task))

            async def stop(task: str) -> None:
                assert threading.current_thread() is loop_thread
                await asyncio.sleep(0.05)  # the task is reported stopped only after this
                running[name].discard(task)
                events.append(("stop", name, task))

            return AsyncTaskDistribution(
                group,
                worker_id=name,
                tasks=TASKS,
                start_task=start,
                stop_task=stop,
                max_delay_ms=0,  # a departed worker's tasks move at once
                # With 6 s sessions and 500 ms heartbeats, the default 5 s would leave the
                # lease less than a heartbeat interval above its floor.
                stop_timeout_ms=1000,
                bootstrap_servers=kafka,
                **FAST,
            )

        a = worker("a")
        async with worker("b") as b:
            seen: list[frozenset[str]] = []

            async def watch() -> None:
                async for now in b.task_changes():
                    seen.append(now)

            watcher = asyncio.create_task(watch())
            await b.wait_stable(30)
            assert b.running() == set(TASKS)
            await a.start()
            await eventually(lambda: len(running["a"]) == 2 == len(running["b"]), 30, "2 each")
            assert b.running() == running["b"]
            # A task moved from b to a only after b's stop coroutine finished.
            for task in running["a"]:
                assert events.index(("stop", "b", task)) < events.index(("start", "a", task))
            await a.close()
            assert running["a"] == set()
            await eventually(lambda: running["b"] == set(TASKS), 30, "every task back on b")
            await eventually(lambda: seen and seen[-1] == set(TASKS), 10, "the iterator")
            before_close = list(seen)
        await asyncio.wait_for(watcher, 10)  # closing ends the iterator
        # The iterator saw b's tasks go down to two and back up to four, then none at close.
        # (From when b first ran all four: before that it was starting them one by one.)
        first_full = before_close.index(frozenset(TASKS))
        assert min(len(s) for s in before_close[first_full:]) == 2
        assert seen[-1] == frozenset()
        assert running["b"] == set()  # closing stopped them, on the loop

    asyncio.run(scenario())


class Recorder(AsyncRebalanceListener):
    def __init__(self, name: str, log: list[tuple[str, str, frozenset[TopicPartition]]]) -> None:
        self.name = name
        self.log = log
        self.consumer: AsyncConsumer | None = None

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        assert self.consumer is not None
        # Still owned here: the last commit of what was processed goes through.
        await self.consumer.commit()
        self.log.append(("revoked", self.name, partitions))

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(0)
        self.log.append(("assigned", self.name, partitions))


def test_two_async_consumers_read_everything_once_across_a_rebalance(kafka: str) -> None:
    topic = f"aio-{uuid.uuid4().hex[:8]}"
    group = f"aio-consumers-{uuid.uuid4().hex[:8]}"
    create(kafka, topic, 4)
    produce(kafka, topic, 4, 25)  # 100 records

    async def scenario() -> None:
        log: list[tuple[str, str, frozenset[TopicPartition]]] = []
        got: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}

        def make(name: str) -> AsyncConsumer:
            listener = Recorder(name, log)
            c = AsyncConsumer(
                group, topics=[topic], listener=listener, bootstrap_servers=kafka, **FAST
            )
            listener.consumer = c
            return c

        async def read(name: str, c: AsyncConsumer, stop: asyncio.Event) -> None:
            while not stop.is_set():
                for tp, records in (await c.getmany(timeout_ms=200)).items():
                    got[name] += [(tp.partition, r.offset) for r in records]
                await c.commit()

        a, b = make("a"), make("b")
        stop = asyncio.Event()
        async with a:
            reading_a = asyncio.create_task(read("a", a, stop))
            await eventually(lambda: len(got["a"]) >= 40, 30, "a reads")
            async with b:
                reading_b = asyncio.create_task(read("b", b, stop))
                await eventually(lambda: len(got["a"]) + len(got["b"]) == 100, 60, "all 100")
                await eventually(lambda: len(b.assignment()) == 2, 30, "b owns two")
                stop.set()
                await asyncio.gather(reading_a, reading_b)
            # b closed: its revoke committed; a gets its partitions back and reads nothing new.
        everything = sorted(got["a"] + got["b"])
        assert everything == sorted((p, o) for p in range(4) for o in range(25))  # once each
        # b's revocation ran on the loop (and committed) when it closed.
        assert any(kind == "revoked" and who == "b" and parts for kind, who, parts in log)
        # What was committed is everything: a new consumer of the group finds nothing left.
        async with AsyncConsumer(group, topics=[topic], bootstrap_servers=kafka, **FAST) as late:
            await eventually(lambda: len(late.assignment()) == 4, 30, "late owns all")
            committed = await late.committed(sorted(late.assignment()))
            assert committed == {TopicPartition(topic, p): 25 for p in range(4)}
            assert await late.getmany(timeout_ms=500) == {}

    asyncio.run(scenario())
