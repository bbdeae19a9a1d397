"""asyncio's event loop on the simulator's clock (``SimEventLoop``): what the async faces'
histories rely on to run the shipped coroutines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import warnings
from collections.abc import AsyncIterator

from coordination.testing.simulation._asyncio import SimEventLoop
from coordination.testing.simulation._scheduler import Process, Scheduler


def test_time_timers_and_to_thread_run_on_simulated_time() -> None:
    clock = Scheduler(seed=1)
    seen: list[tuple[str, float]] = []

    def blocking() -> str:
        clock.sleep(2.0, clock.event())  # a thread's wait, on simulated time
        return "done"

    async def main() -> None:
        await asyncio.sleep(5.0)
        seen.append(("slept", clock.monotonic()))
        seen.append((await asyncio.to_thread(blocking), clock.monotonic()))
        try:
            await asyncio.wait_for(asyncio.sleep(10.0), 1.0)
        except asyncio.TimeoutError:
            seen.append(("timed out", clock.monotonic()))

    def run() -> None:
        loop = SimEventLoop(clock, "app")
        loop.run_until_complete(main())
        loop.close()

    clock.spawn(run, "main", Process("p"))
    clock.run(1100.0)
    assert seen == [("slept", 1005.0), ("done", 1007.0), ("timed out", 1008.0)]


def test_each_loop_is_the_running_loop_of_its_own_thread_only() -> None:
    clock = Scheduler(seed=2)
    loops: dict[str, SimEventLoop] = {}
    wrong: list[str] = []

    def member(name: str) -> None:
        async def main() -> None:
            for _ in range(20):
                if asyncio.get_running_loop() is not loops[name]:
                    wrong.append(name)
                await asyncio.sleep(0.01)

        loops[name] = SimEventLoop(clock, name)
        loops[name].run_until_complete(main())
        loops[name].close()

    def other_thread() -> None:
        for _ in range(20):
            if asyncio.events._get_running_loop() is not None:
                wrong.append("a thread with no loop")
            clock.sleep(0.005, clock.event())

    for name in ("a", "b"):
        clock.spawn(lambda name=name: member(name), name, Process(name))  # type: ignore[misc]
    clock.spawn(other_thread, "other", Process("c"))
    clock.run(1010.0)
    assert wrong == []
    assert asyncio.events._get_running_loop() is None


def test_an_executors_calls_run_one_at_a_time_in_order_and_a_cancelled_one_never_runs() -> None:
    clock = Scheduler(seed=3)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # never started here
    ran: list[str] = []

    def work(name: str) -> str:
        ran.append(f"{name} starts")
        clock.sleep(1.0, clock.event())
        ran.append(f"{name} ends")
        return name

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        first = loop.run_in_executor(executor, work, "first")
        cancelled = loop.run_in_executor(executor, work, "cancelled")
        last = loop.run_in_executor(executor, work, "last")
        cancelled.cancel()
        return [await first, await last]

    results: list[list[str]] = []

    def run() -> None:
        loop = SimEventLoop(clock, "app")
        results.append(loop.run_until_complete(main()))
        loop.close()

    clock.spawn(run, "main", Process("p"))
    clock.run(1100.0)
    assert results == [["first", "last"]]
    assert ran == ["first starts", "first ends", "last starts", "last ends"]
    executor.shutdown()


def test_a_killed_process_drops_its_loops_pending_coroutines_without_warnings() -> None:
    clock = Scheduler(seed=4)
    process = Process("p")
    cleaned: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(1000.0)
        finally:
            cleaned.append("task")

    async def iterate() -> None:
        async def numbers() -> AsyncIterator[int]:
            try:
                while True:
                    yield 1
                    await asyncio.sleep(1000.0)
            finally:
                cleaned.append("generator")

        async for _ in numbers():
            pass

    loop_box: list[SimEventLoop] = []

    def run() -> None:
        loop = SimEventLoop(clock, "app")
        loop_box.append(loop)
        loop.create_task(forever())
        loop.run_until_complete(iterate())

    clock.spawn(run, "main", process)
    clock.run(1001.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clock.kill(process)
        gc.collect()
    assert sorted(cleaned) == ["generator", "task"]
    assert loop_box[0].is_closed()
    assert asyncio.events._get_running_loop() is None


def test_a_process_killed_while_its_loop_waits_inside_a_coroutine_unwinds_cleanly() -> None:
    # The kill's GreenletExit comes out of the wait inside the coroutine, whose cleanup
    # awaits (as an ``async with`` does): that cleanup still finds its loop running.
    clock = Scheduler(seed=5)
    process = Process("p")

    async def blocks_the_loop() -> None:
        try:
            clock.sleep(10.0, clock.event())  # a callback that blocks its loop
        finally:
            await asyncio.sleep(0.001)

    def run() -> None:
        SimEventLoop(clock, "app").run_until_complete(blocks_the_loop())

    clock.spawn(run, "main", process)
    clock.run(1001.0)
    clock.kill(process)
    assert clock.failures == []


def test_a_process_killed_while_a_thread_waits_to_take_its_condition_back_unwinds_cleanly() -> None:
    # A thread's condition wait ends (notified or timed out) while another thread of its
    # process holds the lock; the kill comes before it took the lock back. Its
    # ``with condition:`` then exits without the lock: as a killed thread, silently.
    clock = Scheduler(seed=6)
    process = Process("p")
    changed = clock.condition()
    holding: list[str] = []

    def waiter() -> None:
        with changed:
            changed.wait(1.0)

    def holder() -> None:
        clock.sleep(0.5, clock.event())
        with changed:
            holding.append("holds")
            clock.sleep(10.0, clock.event())  # past the waiter's timeout

    clock.spawn(waiter, "waiter", process)
    clock.spawn(holder, "holder", process)
    clock.run(1002.0)
    assert holding == ["holds"]
    clock.kill(process)
    assert clock.failures == []
