"""What every recipe's asyncio face shares: one bridge between the recipe's threads and the
event loop, and the fan-out of changes to async iterators.

Design (the same for the election, the task distribution and the consumer):

* The async face is a thin shell over the threaded recipe (:class:`AsyncFace`: one
  lifecycle for all). It calls the threaded recipe's own methods (blocking ones on a worker
  thread, ``asyncio.to_thread``) and keeps no state of its own, so the threaded recipe's
  proven paths, its lease and its heartbeats do not depend on the loop being responsive.
* The user's callbacks (coroutine functions or plain ones) run on the loop that started the
  recipe. The recipe's thread that calls one waits until it has finished
  (:meth:`LoopBridge.run`), so callbacks keep the order and the guarantees of the threaded
  recipe (a task's stop, a partition's revocation, a leader's ``on_deposed``, finishes
  before the recipe goes on).
* Nothing the event loop calls may wait for the event loop: it would wait for itself, and
  the loop, and every callback after, would hang for good. :meth:`LoopBridge.run` enforces
  it: called on the loop's own thread, it schedules the callback on the loop and returns
  at once. A recipe whose queries may run a callback (the election deposes a leader whose
  lease ran out when ``is_leader`` is read, on whichever thread reads it) asks
  :meth:`LoopBridge.on_loop` and hands the callback and whatever must follow it (the
  election's rejoin) to a thread of its own, so that the loop neither waits for the
  callbacks' lock nor runs the group's work.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, overload

from typing_extensions import Self

from coordination.clock import SYSTEM_CLOCK, Clock
from coordination.errors import CoordinatorStateError

log = logging.getLogger("recipes")

T = TypeVar("T")
MaybeAsync = Callable[..., Awaitable[None] | None]
"""A callback that may be a coroutine function."""
_CLOSED = object()  # ends the iterators


class LoopBridge:
    """The loop of one async recipe: set by ``start()``, used from the recipe's threads.

    Its waits come from ``clock`` (the recipe's, so that a simulated clock runs the async
    face too; default: the system's), and it tells the loop's thread by the clock's
    ``current_thread()``.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._loop_thread: object = None
        # Callbacks scheduled from the loop itself: a reference keeps each task alive.
        self._scheduled: set[asyncio.Task[None]] = set()

    def bind(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Remember the loop (call from ``start()``, on the loop; default: the running one).

        Args:
            loop: anything with an asyncio loop's ``call_soon_threadsafe``, ``create_task``
                and ``is_closed`` (the simulator's loop), running on this thread.
        """
        self.loop = loop if loop is not None else asyncio.get_running_loop()
        self._loop_thread = self.clock.current_thread()

    def on_loop(self) -> bool:
        """Whether the calling thread is the one running the loop: it must not wait for it."""
        return self._loop_thread is not None and self.clock.current_thread() is self._loop_thread

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
        """Run ``callback(*args)`` on the loop.

        From a recipe's thread: wait until it has finished; what it raises is raised here.
        On the loop's own thread (which would wait for itself): schedule it and return at
        once; what it raises is logged.

        Raises:
            CoordinatorStateError: the loop is gone (or the recipe never started), or it
                cancelled the callback (it is shutting down).
        """
        loop = self.loop
        if loop is None or loop.is_closed():
            raise CoordinatorStateError("the recipe's event loop is gone (or never started)")

        async def call() -> None:
            result = callback(*args)
            if inspect.isawaitable(result):
                await result

        if self.on_loop():
            task = loop.create_task(call())
            self._scheduled.add(task)
            task.add_done_callback(self._scheduled_done)
            return
        done = self.clock.event()
        failed: list[BaseException] = []

        def finished(task: asyncio.Task[None]) -> None:
            if task.cancelled():
                failed.append(CoordinatorStateError("the event loop cancelled the callback"))
            elif task.exception() is not None:
                failed.append(task.exception())  # type: ignore[arg-type]
            done.set()

        try:
            loop.call_soon_threadsafe(lambda: loop.create_task(call()).add_done_callback(finished))
        except RuntimeError as e:  # the loop closed meanwhile
            raise CoordinatorStateError(f"the event loop is gone: {e}") from e
        done.wait()
        if failed:
            raise failed[0]

    def _scheduled_done(self, task: asyncio.Task[None]) -> None:
        self._scheduled.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a recipe's callback raised", exc_info=task.exception())


class _Closable(Protocol):
    """The threaded recipe under an async face."""

    def start(self) -> None: ...

    def close(self, timeout: float = ...) -> None: ...


class AsyncContext:
    """``async with``: ``start()`` on entry, ``close()`` on exit, for every async face."""

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncFace(AsyncContext):
    """The lifecycle every recipe's async face shares: ``start`` binds the loop and starts
    the threaded recipe on a worker thread, ``close`` closes it there (its callbacks run on
    the loop meanwhile), ``async with`` does both. A face sets ``_bridge`` and ``_recipe``."""

    _bridge: LoopBridge
    _recipe: _Closable

    async def start(self) -> None:
        """Join the group (connects on a worker thread; the loop stays free)."""
        self._bridge.bind()
        await asyncio.to_thread(self._recipe.start)

    async def close(self, timeout: float = 30.0) -> None:
        """Leave the group (on a worker thread; the recipe's callbacks run on the loop
        meanwhile), then end this face's iterators."""
        await asyncio.to_thread(self._recipe.close, timeout)
        self._closed()

    def _closed(self) -> None:
        """What the face ends once its recipe is closed (iterators, threads)."""


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
