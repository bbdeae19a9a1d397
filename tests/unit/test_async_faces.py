"""What every recipe's asyncio face shares (recipes/_aio.py): callbacks run on the loop, a
recipe's thread waits for them, and the loop never waits for itself."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from coordination.errors import ConfigurationError, CoordinatorStateError
from coordination.hooks import CoordinationHooks
from recipes._aio import Changes, LoopBridge
from recipes.tasks import AsyncTaskDistribution


def on_a_loop(scenario: Callable[[], Coroutine[Any, Any, None]], within_s: float = 10) -> None:
    """Run ``scenario`` on an event loop of its own thread; fail if the loop hangs."""
    failed: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as e:
            failed.append(e)

    loop_thread = threading.Thread(target=main, name="event-loop", daemon=True)
    loop_thread.start()
    loop_thread.join(within_s)
    assert not loop_thread.is_alive(), "the event loop hangs"
    if failed:
        raise failed[0]


def test_a_callback_run_from_a_recipe_thread_runs_on_the_loop_and_is_waited_for() -> None:
    async def scenario() -> None:
        bridge = LoopBridge()
        bridge.bind()
        loop_thread = threading.current_thread()
        ran: list[tuple[str, threading.Thread]] = []

        async def callback(name: str) -> None:
            await asyncio.sleep(0)
            ran.append((name, threading.current_thread()))

        def recipe_thread() -> list[tuple[str, threading.Thread]]:
            bridge.run(callback, "from a thread")
            return list(ran)  # finished before run returned

        assert await asyncio.to_thread(recipe_thread) == [("from a thread", loop_thread)]

        def raising() -> None:
            raise ValueError("the user's")

        with pytest.raises(ValueError, match="the user's"):
            await asyncio.to_thread(bridge.run, raising)

    on_a_loop(scenario)


def test_a_callback_run_on_the_loop_itself_is_scheduled_and_never_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        bridge = LoopBridge()
        bridge.bind()
        ran: list[str] = []
        done = asyncio.Event()

        async def callback(name: str) -> None:
            ran.append(name)
            done.set()

        def raising() -> None:
            raise ValueError("the user's")

        assert bridge.on_loop()
        assert not await asyncio.to_thread(bridge.on_loop)
        bridge.run(callback, "on the loop")  # would wait for itself: returns at once
        bridge.run(raising)
        assert ran == []
        await asyncio.wait_for(done.wait(), 5)
        assert ran == ["on the loop"]
        await asyncio.sleep(0)  # the failed one's done-callback

    on_a_loop(scenario)
    assert any(
        r.levelno == logging.ERROR and "callback raised" in r.getMessage() for r in caplog.records
    )


def test_a_bridge_without_a_loop_says_so() -> None:
    with pytest.raises(CoordinatorStateError, match="event loop is gone"):
        LoopBridge().run(lambda: None)


def test_changes_reach_every_iterator_until_closed() -> None:
    async def scenario() -> list[int]:
        bridge = LoopBridge()
        bridge.bind()
        changes: Changes[int] = Changes(bridge)
        seen: list[int] = []

        async def read() -> None:
            async for value in changes.iterate(lambda: 0):
                seen.append(value)
                if value == 0:
                    await asyncio.to_thread(changes.publish, 1)  # from another thread
                    changes.publish(2)
                if value == 2:
                    changes.close()

        await asyncio.wait_for(read(), 5)
        return seen

    assert asyncio.run(scenario()) == [0, 1, 2]


def task_face(**kw: Any) -> AsyncTaskDistribution:
    return AsyncTaskDistribution(
        "g",
        worker_id="w",
        tasks={"a": 1.0},
        start_task=lambda *args: None,
        stop_task=lambda *args: None,
        bootstrap_servers="x:1",
        **kw,
    )


def test_the_task_distributions_hooks_may_be_none_or_given_and_are_checked() -> None:
    task_face(hooks=None)
    mine = CoordinationHooks()
    hooks = task_face(hooks=[mine]).distribution.coordinator.config.hooks
    assert hooks[0] is mine and len(hooks) == 2  # and the face's own watcher
    with pytest.raises(ConfigurationError, match="hooks must be a list"):
        task_face(hooks=5)
