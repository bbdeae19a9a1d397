"""asyncio's own event loop on the simulator's clock, so that the recipes' async faces run
in simulated histories as they are shipped (their coroutines, tasks, ``asyncio.to_thread``,
``run_in_executor``, ``asyncio.sleep``, ``wait_for``, cancellation), not a model of them.

:class:`SimEventLoop` is :class:`asyncio.BaseEventLoop` (the loop behind every asyncio loop)
with three parts replaced:

- time is the scheduler's (``loop.time()``: timers and timeouts are simulated seconds);
- where a real loop waits in ``select()`` for sockets or a wake-up, this one waits on a
  simulated event, so the loop is one simulated thread among the member's others, parked
  and resumed by the scheduler (``call_soon_threadsafe`` sets the event);
- ``run_in_executor`` runs its function on a simulated thread of the loop's process: a new
  one for the default executor (``asyncio.to_thread``), one per executor object otherwise,
  taking its calls in order as a one-thread ``ThreadPoolExecutor`` does. A call cancelled
  before its thread took it never runs, as with a real executor. Its result reaches the
  loop at once or, three times in ten, up to 50 ms later (the OS ran other threads first),
  so that a cancellation can land while a result travels to the loop.

Every simulated thread lives on one OS thread, where asyncio keeps "the running loop"; the
scheduler sets it to the loop of the thread it resumes (``_Task.asyncio_loop``) and clears
it after, so that each loop's coroutines see their own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from asyncio import events
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

from greenlet import GreenletExit
from typing_extensions import TypeVarTuple, Unpack

from ._scheduler import Scheduler, SimulationError

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
# A coroutine that catches the cancellation of a killed process and awaits again is thrown
# into again, this many times, then closed.
_UNWIND_ATTEMPTS = 10
# How often a loop with work ready lets other threads run first (as the OS may preempt it);
# every time would double the steps of a history (asyncio runs a turn in two passes).
_YIELD_WHEN_BUSY = 0.2
# How often, and up to how late, a worker thread's result reaches its loop late.
_LATE_RESULTS = 0.3
_LATE_RESULT_S = 0.05


class _Selector:
    """What ``BaseEventLoop._run_once`` asks for I/O: nothing, after waiting for a wake-up
    (a handle handed over from another thread) or for the next timer."""

    def __init__(self, clock: Scheduler) -> None:
        self._clock = clock
        self.wake = clock.event()

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            self.wake.wait()
        elif timeout > 0:
            self.wake.wait(timeout)
        elif self._clock.rng.random() < _YIELD_WHEN_BUSY:
            self._clock.yield_now()  # others may run between two turns of a busy loop
        self.wake.clear()
        return []

    def close(self) -> None:
        pass


class _SerialWorker:
    """One simulated thread taking an executor's calls in order (a one-thread pool)."""

    def __init__(self, clock: Scheduler, name: str) -> None:
        self._calls: deque[Callable[[], None]] = deque()
        self._ready = clock.event()
        clock.thread(self._run, name).start()

    def submit(self, call: Callable[[], None]) -> None:
        self._calls.append(call)
        self._ready.set()

    def _run(self) -> None:
        while True:
            while self._calls:
                self._calls.popleft()()
            self._ready.wait()
            self._ready.clear()


class SimEventLoop(asyncio.BaseEventLoop):
    """An asyncio event loop whose time, waits and worker threads are the simulator's.

    Run it on a simulated thread of the member's process (``run_until_complete`` or
    ``run_forever``); pausing or killing the process pauses or kills the loop with it.
    """

    def __init__(self, clock: Scheduler, name: str) -> None:
        super().__init__()
        self.clock = clock
        self._clock = clock
        self._name = name
        self._selector = _Selector(clock)
        self._workers: dict[int, tuple[object, _SerialWorker]] = {}  # by id(executor)
        self._calls = 0
        # Its unfinished tasks, held here: asyncio holds them weakly, and one whose thread
        # was killed would be collected (its coroutine finalised) at a random moment.
        self._tasks: dict[asyncio.Task[Any], None] = {}  # in the order made (a replay's)
        # What enter() installs at every step of the loop's thread (made once).
        self._asyncgen_hooks = (
            self._asyncgen_firstiter_hook,  # type: ignore[attr-defined]
            self._asyncgen_finalizer_hook,  # type: ignore[attr-defined]
        )
        self.set_task_factory(self._make_task)
        current = clock._current
        if current is not None and current.process is not None:
            current.process.at_kill.append(self.forget)

    # ------------------------------------------------------------------ what a loop must be

    def time(self) -> float:
        return self._clock.monotonic()

    def _process_events(self, event_list: list[Any]) -> None:
        pass  # no sockets: the simulated transport is not the loop's

    def _write_to_self(self) -> None:
        self._selector.wake.set()

    def run_forever(self) -> None:
        task = self._clock._current
        if task is None:
            raise SimulationError("a simulated event loop runs on a simulated thread")
        task.asyncio_loop = self
        try:
            super().run_forever()
        finally:
            task.asyncio_loop = None

    def enter(self) -> None:
        """The scheduler resumes the loop's thread: make it asyncio's running loop, and let
        async generators first iterated now be this loop's (as ``run_forever`` does)."""
        events._set_running_loop(self)
        sys.set_asyncgen_hooks(*self._asyncgen_hooks)

    def leave(self) -> None:
        """The loop's thread waits: no loop runs until the scheduler enters one."""
        events._set_running_loop(None)
        sys.set_asyncgen_hooks(None, None)

    def run_from_thread(
        self, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float | None = None
    ) -> None:
        """From another simulated thread: run ``make()``'s coroutine on this loop and wait
        until it ends (or ``timeout``). Nothing to do once the loop is closed (its process
        was killed)."""
        if self.is_closed():
            return
        done = self._clock.event()
        self.call_soon_threadsafe(
            lambda: self.create_task(make()).add_done_callback(lambda _: done.set())
        )
        done.wait(timeout)

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[Unpack[Ts]], T], *args: Unpack[Ts]
    ) -> asyncio.Future[T]:
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        future: asyncio.Future[T] = self.create_future()
        self._calls += 1
        name = f"{self._name}-worker-{self._calls}"

        def call() -> None:
            if future.cancelled():
                return  # cancelled before a thread took it: never runs
            try:
                result = func(*args)
            except GreenletExit:
                raise
            except BaseException as e:  # handed to the awaiting coroutine, as a pool does
                self._settle(future, error=e)
            else:
                self._settle(future, result=result)

        if executor is None:
            self._clock.thread(call, name).start()
        else:
            entry = self._workers.get(id(executor))
            if entry is None:
                entry = (executor, _SerialWorker(self._clock, f"{self._name}-executor"))
                self._workers[id(executor)] = entry
            entry[1].submit(call)
        return future

    def _make_task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        self._tasks[task] = None
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled():
            # Retrieved: a task that a kill unwound ends with GreenletExit, which asyncio
            # would report from the garbage collector, after the history.
            task.exception()

    def _settle(
        self, future: asyncio.Future[T], result: Any = None, error: BaseException | None = None
    ) -> None:
        def settle() -> None:
            if future.cancelled():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def hand_over() -> None:
            with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
                self.call_soon_threadsafe(settle)

        # Now, or a little later (the OS ran other threads first): a call cancelled while
        # its result travels to the loop is a window real programs meet.
        if self._clock.rng.random() < _LATE_RESULTS:
            self._clock.call_later(self._clock.rng.uniform(0.0, _LATE_RESULT_S), hand_over)
        else:
            hand_over()

    # ------------------------------------------------------------------ end of a history

    def forget(self) -> None:
        """Drop the loop's unfinished work without running it (its process is gone, or the
        history is over): closes the coroutines of tasks that never finished, so that
        nothing warns about them or runs their cleanup later, from the garbage collector."""
        # Each task's coroutine is unwound as a cancellation unwinds it (a close would skip
        # an async generator it is inside of: Python closes only the outer frames).
        for task in list(self._tasks):
            if task.done():  # its done callbacks never ran (the kill unwound the loop first)
                self._task_done(task)
                continue
            task._log_destroy_pending = False  # type: ignore[attr-defined]
            coro = task.get_coro()
            for _ in range(_UNWIND_ATTEMPTS):
                try:
                    coro.throw(asyncio.CancelledError())
                except BaseException:
                    break
            else:
                coro.close()
        # Then the async generators that wait at a yield, no task inside them.
        for agen in list(self._asyncgens):  # type: ignore[attr-defined]
            closing = agen.aclose()
            with contextlib.suppress(BaseException):
                closing.send(None)  # its cleanup, up to its first await if any
            closing.close()
        if not self.is_running():
            self.close()
