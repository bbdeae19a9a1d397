"""What every recipe's asyncio face shares: running the user's callbacks on the event loop
while the recipe's thread waits for them, and fanning changes out to async iterators.

The threaded recipes run underneath unchanged: their safety never depends on the loop being
responsive. A callback (coroutine function or plain) runs on the loop that started the
recipe, and the recipe's thread waits until it has finished, so callbacks keep the order
and the guarantees of the threaded recipe (a task's stop, a partition's revocation,
finishes before the recipe goes on).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar, overload

from coordination.errors import CoordinatorStateError

T = TypeVar("T")
MaybeAsync = Callable[..., Awaitable[None] | None]
"""A callback that may be a coroutine function."""
_CLOSED = object()  # ends the iterators


class LoopBridge:
    """The loop of one async recipe: set by ``start()``, used from the recipe's threads."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        """Remember the running loop (call from ``start()``, on the loop)."""
        self.loop = asyncio.get_running_loop()

    @overload
    def wrap(self, callback: None) -> None: ...

    @overload
    def wrap(self, callback: MaybeAsync) -> Callable[..., None]: ...

    def wrap(self, callback: MaybeAsync | None) -> Callable[..., None] | None:
        """A plain function for the threaded recipe that runs ``callback`` on the loop."""
        if callback is None:
            return None
        return lambda *args: self.run(callback, *args)

    def run(self, callback: MaybeAsync, *args: Any) -> None:
        """Run ``callback(*args)`` on the loop and wait for it (from a recipe thread, never
        the loop's: that would deadlock). What it raises is raised here."""
        loop = self.loop
        if loop is None or loop.is_closed():
            raise CoordinatorStateError("the recipe's event loop is gone (or never started)")

        async def call() -> None:
            result = callback(*args)
            if inspect.isawaitable(result):
                await result

        try:
            asyncio.run_coroutine_threadsafe(call(), loop).result()
        except RuntimeError as e:  # the loop stopped meanwhile
            raise CoordinatorStateError(f"the event loop is gone: {e}") from e


class Changes(Generic[T]):
    """Values published from any thread, read by any number of async iterators."""

    def __init__(self, bridge: LoopBridge) -> None:
        self._bridge = bridge
        self._queues: set[asyncio.Queue[object]] = set()

    def publish(self, value: T) -> None:
        """Hand ``value`` to every iterator (safe from any thread)."""
        loop = self._bridge.loop
        if loop is not None and not loop.is_closed():
            for queue in list(self._queues):
                loop.call_soon_threadsafe(queue.put_nowait, value)

    def close(self) -> None:
        """End every iterator (on the loop)."""
        for queue in list(self._queues):
            queue.put_nowait(_CLOSED)

    async def iterate(self, first: Callable[[], T]) -> AsyncIterator[T]:
        """``first()`` now, then every published value, until :meth:`close`."""
        queue: asyncio.Queue[object] = asyncio.Queue()
        self._queues.add(queue)
        try:
            yield first()
            while True:
                value = await queue.get()
                if value is _CLOSED:
                    return
                yield value  # type: ignore[misc]
        finally:
            self._queues.discard(queue)
