"""A seeded scheduler on simulated time: the clock of every simulated member.

Every thread a member makes through its clock is a greenlet here, and only one
runs at a time. A thread runs until it waits (an event, a lock, a condition, a
sleep, a response); the scheduler then picks the next ready thread at random
from its seed, and when none is ready it moves time to the next timer. So a
history depends on the seed alone and replays exactly, and time costs nothing:
a member's 45-second session passes in microseconds.

Members are grouped by *process*: a process can be paused (its threads do not
run, as under SIGSTOP, while time goes on) or killed (its threads unwind at
once, every wait raising ``GreenletExit``, and nothing it does afterwards
reaches the world). Threads inherit the process of the thread that made them.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import Any, Protocol

from greenlet import GreenletExit, getcurrent, greenlet

from ...clock import Condition, Event, Lock, Thread


class SimulationError(Exception):
    """The simulation itself went wrong (a livelock, a wait outside a simulated thread)."""


class Process:
    """A simulated OS process: the unit that is paused and killed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False
        self.paused_until: float | None = None
        self.tasks: set[_Task] = set()
        self.deferred: list[_Task] = []  # woken while paused
        # Called once its threads unwound after a kill: what the process held beside its
        # threads (an asyncio loop's pending coroutines) is dropped without running on.
        self.at_kill: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<Process {self.name}{' dead' if self.dead else ''}>"


_TASK_ORDER = itertools.count()


class _Task:
    """One simulated thread: a greenlet and what it waits for."""

    __slots__ = (
        "asyncio_loop",
        "done",
        "greenlet",
        "name",
        "order",
        "process",
        "thread",
        "token",
        "value",
    )

    def __init__(self, name: str, process: Process | None, thread: SimThread) -> None:
        self.name = name
        # Threads are unwound by name, then in the order made: members' threads may share a
        # name, and a set of tasks iterates in no fixed order.
        self.order = next(_TASK_ORDER)
        self.thread = thread
        self.process = process
        self.greenlet: greenlet | None = None
        self.token: object | None = None  # the wait it is parked in; None when runnable
        self.value: Any = None  # what woke it
        self.done = False
        # The asyncio loop this thread runs (a ``SimEventLoop``): asyncio keeps "the running
        # loop" once per OS thread, which every simulated thread shares, so the scheduler
        # enters the loop before resuming its thread and leaves it after.
        self.asyncio_loop: _AsyncioLoop | None = None


class _AsyncioLoop(Protocol):
    def enter(self) -> None: ...

    def leave(self) -> None: ...


class Timer:
    """A callback due at a simulated time; ``cancel()`` makes it a no-op."""

    __slots__ = ("cancelled", "fn")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


# A thread that does this many steps without simulated time moving is spinning.
_MAX_STEPS_PER_INSTANT = 200_000


class Scheduler:
    """The simulated clock and its threads (implements ``coordination``'s ``Clock``)."""

    def __init__(self, seed: int, start: float = 1000.0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = start
        self.steps = 0
        self._ready: list[_Task] = []
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = 0
        self._current: _Task | None = None
        # Stands for the scheduler when it takes a lock between steps (invariant checks).
        self._hub_task = _Task("scheduler", None, None)  # type: ignore[arg-type]
        self._hub: greenlet | None = None
        self.failures: list[tuple[str, BaseException]] = []
        self._started: set[_Task] = set()  # threads started and not finished
        # Called after every step with the scheduler (invariant checks).
        self.probes: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ Clock

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, interrupt: Event) -> None:
        if seconds > 0:
            interrupt.wait(seconds)
        else:
            self.yield_now()

    def event(self) -> Event:
        return SimEvent(self)

    def lock(self) -> Lock:
        return SimLock(self, reentrant=False)

    def rlock(self) -> Lock:
        return SimLock(self, reentrant=True)

    def condition(self, lock: Lock | None = None) -> Condition:
        if lock is None:
            lock = SimLock(self, reentrant=True)
        if not isinstance(lock, SimLock):
            raise SimulationError("a simulated condition needs a simulated lock")
        return SimCondition(self, lock)

    def thread(self, target: Callable[[], object], name: str) -> Thread:
        current = self._current
        return SimThread(self, target, name, current.process if current else None)

    def current_thread(self) -> object:
        current = self._current
        return None if current is None else current.thread

    def random(self) -> random.Random:
        return random.Random(self.rng.getrandbits(64))

    # ------------------------------------------------------------------ the world's side

    def call_at(self, when: float, fn: Callable[[], object]) -> Timer:
        """Run ``fn`` on the scheduler (not in a thread; it must not wait) at ``when``."""
        timer = Timer(fn)
        self._seq += 1
        heapq.heappush(self._timers, (max(when, self.now), self._seq, timer))
        return timer

    def call_later(self, delay: float, fn: Callable[[], object]) -> Timer:
        return self.call_at(self.now + delay, fn)

    def spawn(
        self, target: Callable[[], object], name: str, process: Process | None = None
    ) -> SimThread:
        """Start a thread in ``process`` (None: a thread of the test itself)."""
        thread = SimThread(self, target, name, process)
        thread.start()
        return thread

    def pause(self, process: Process, seconds: float) -> None:
        """Stop ``process``'s threads for ``seconds`` (SIGSTOP, then SIGCONT)."""
        until = self.now + seconds
        if process.paused_until is None or until > process.paused_until:
            process.paused_until = until
        self.call_at(until, lambda: self._resume(process, until))

    def kill(self, process: Process) -> None:
        """SIGKILL: nothing more of ``process`` reaches the world; its threads unwind (their
        waits raise ``GreenletExit``) on the scheduler, before any other thread runs."""
        process.dead = True
        if self._current is not None:
            self.call_at(self.now, lambda: self._unwind(process))
        else:
            self._unwind(process)

    def _unwind(self, process: Process) -> None:
        # In place: the running loop holds the list.
        self._ready[:] = [t for t in self._ready if t.process is not process]
        process.deferred.clear()
        for task in sorted(process.tasks, key=lambda t: (t.name, t.order)):
            self._unwind_task(task)
        process.tasks.clear()
        for release in process.at_kill:
            release()
        process.at_kill.clear()

    def _unwind_task(self, task: _Task) -> None:
        if task.greenlet is None or task.done or task.greenlet.dead:
            return
        task.token = None
        if not task.greenlet:  # never ran: nothing to unwind
            task.done = True
            return
        self._current = task
        loop = task.asyncio_loop
        if loop is not None:
            loop.enter()  # what the loop runs while it unwinds still sees it
        try:
            task.greenlet.parent = getcurrent()
            task.greenlet.throw(GreenletExit)
        except GreenletExit:
            pass
        finally:
            self._current = None
            if loop is not None:
                loop.leave()

    def shutdown(self) -> None:
        """End the simulation: every thread still waiting unwinds, as if killed. (A
        suspended greenlet keeps everything its frames reach alive, which the garbage
        collector cannot see: a whole history per history run otherwise.)"""
        self._ready.clear()
        self._timers.clear()
        failures = len(self.failures)
        processes: dict[str, Process] = {}
        for task in sorted(self._started, key=lambda t: (t.name, t.order)):
            if task.process is not None:
                task.process.dead = True
                task.process.deferred.clear()
                processes[task.process.name] = task.process
            # A thread's cleanup failing now changes nothing.
            with contextlib.suppress(Exception):
                self._unwind_task(task)
        for process in processes.values():
            for release in process.at_kill:
                with contextlib.suppress(Exception):
                    release()
            process.at_kill.clear()
        del self.failures[failures:]  # what a forced unwinding raised tells nothing
        self._started.clear()
        self._ready.clear()
        self._timers.clear()

    def run(self, until: float) -> None:
        """Run threads and timers until simulated time ``until`` (or nothing is left)."""
        if self._hub is not None:
            raise SimulationError("Scheduler.run is not reentrant")
        self._hub = getcurrent()
        try:
            self._loop(until)
        finally:
            self._hub = None

    def run_while(self, condition: Callable[[], bool], until: float) -> bool:
        """Run until ``condition()`` is false or time ``until``; True if it became false."""
        step = 0.05
        while self.now < until:
            if not condition():
                return True
            self.run(min(until, self.now + step))
        return not condition()

    def _loop(self, until: float) -> None:
        # The lists and bound methods of every step, looked up once (a step is a few
        # microseconds: these lookups were a good share of it).
        ready, timers, probes, hub = self._ready, self._timers, self.probes, self._hub
        # What randrange(n) returns for n > 0, without its checks of n: the same draws.
        randbelow = self.rng._randbelow  # type: ignore[attr-defined]
        heappop = heapq.heappop
        same_instant = 0
        while True:
            if ready:
                n = len(ready)
                if n > 1:
                    i = randbelow(n)
                    task = ready[i]
                    ready[i] = ready[-1]
                    ready.pop()
                else:
                    task = ready.pop()
                process = task.process
                if process is not None:
                    if process.dead:
                        continue
                    if process.paused_until is not None:
                        process.deferred.append(task)
                        continue
                self._current = task
                self.steps += 1
                g = task.greenlet
                assert g is not None
                if g.parent is not hub:
                    g.parent = hub
                loop = task.asyncio_loop
                if loop is not None:
                    loop.enter()
                g.switch(task.value)
                loop = task.asyncio_loop  # the step may have started or ended a loop
                if loop is not None:
                    loop.leave()
                self._current = None
                for probe in probes:
                    probe()
                same_instant += 1
                if same_instant > _MAX_STEPS_PER_INSTANT:
                    raise SimulationError(
                        f"livelock: {same_instant} steps at t={self.now:.6f} without time moving"
                    )
                continue
            if not timers or timers[0][0] > until:
                self.now = max(self.now, until)
                return
            when, _, timer = heappop(timers)
            if timer.cancelled:
                continue
            if when > self.now:
                self.now = when
                same_instant = 0
            timer.fn()

    def _resume(self, process: Process, until: float) -> None:
        if process.paused_until != until:
            return  # paused again for longer meanwhile
        process.paused_until = None
        self._ready.extend(process.deferred)
        process.deferred.clear()

    # ------------------------------------------------------------------ parking

    def yield_now(self) -> None:
        """Let other ready threads run (a wait of zero)."""
        task = self._require_task()
        token = object()
        task.token = token
        self._ready.append(task)
        self._switch_out(task)

    def block(
        self,
        waiters: list[tuple[_Task, object]] | deque[tuple[_Task, object]],
        timeout: float | None,
    ) -> Any:
        """Park the current thread in ``waiters`` until :meth:`wake` or ``timeout`` passes.

        Returns the value passed to :meth:`wake`, or ``TIMED_OUT`` (then the thread is no
        longer in ``waiters``).
        """
        # Every step of every thread ends in a wait: _require_task and _switch_out are
        # inlined here (the same checks, in the same order), and so is call_at.
        task = self._current
        if task is None:
            self._require_task()  # raises
        assert task is not None
        process = task.process
        if process is not None and process.dead:
            raise GreenletExit
        hub = self._hub
        token = object()
        task.token = token
        task.value = None
        entry = (task, token)
        waiters.append(entry)
        if timeout is None:
            if hub is None:
                self._switch_out(task)  # raises
            assert hub is not None
            value = hub.switch()
            if process is not None and process.dead:
                raise GreenletExit
            return value
        timer = Timer(partial(self.wake, task, token, TIMED_OUT))
        self._seq += 1
        now = self.now
        heapq.heappush(self._timers, (now + timeout if timeout > 0 else now, self._seq, timer))
        if hub is None:
            self._switch_out(task)  # raises
        assert hub is not None
        value = hub.switch()
        if process is not None and process.dead:
            raise GreenletExit
        if value is TIMED_OUT:
            # (Most waits time out: a try costs less than contextlib.suppress.)
            try:  # noqa: SIM105
                waiters.remove(entry)
            except ValueError:
                pass
        else:
            timer.cancelled = True
        return value

    def wake(self, task: _Task, token: object, value: Any = True) -> bool:
        """Make ``task`` runnable if it still waits in the wait ``token`` names."""
        if task.token is not token or task.done:
            return False
        task.token = None
        task.value = value
        process = task.process
        if process is not None and process.dead:
            return False
        self._ready.append(task)
        return True

    def _switch_out(self, task: _Task) -> Any:
        hub = self._hub
        if hub is None:
            raise SimulationError("a simulated thread waited while the scheduler was not running")
        value = hub.switch()
        if task.process is not None and task.process.dead:
            raise GreenletExit
        return value

    def _require_task(self) -> _Task:
        task = self._current
        if task is None:
            raise SimulationError(
                "only a simulated thread can wait; run the code in Scheduler.spawn(...)"
            )
        if task.process is not None and task.process.dead:
            raise GreenletExit
        return task


class _TimedOut:
    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT: Any = _TimedOut()


class SimThread:
    """A thread of the simulation (``threading.Thread``'s interface)."""

    def __init__(
        self,
        scheduler: Scheduler,
        target: Callable[[], object],
        name: str,
        process: Process | None,
    ) -> None:
        self._scheduler = scheduler
        self._target = target
        self._name = name
        self._task = _Task(name, process, self)
        self._done = SimEvent(scheduler)
        self._started = False

    @property
    def name(self) -> str:
        return self._name

    def start(self) -> None:
        if self._started:
            raise RuntimeError("threads can only be started once")
        self._started = True
        task = self._task
        if task.process is not None:
            if task.process.dead:
                return
            task.process.tasks.add(task)
        self._scheduler._started.add(task)
        task.greenlet = greenlet(self._main)
        self._scheduler._ready.append(task)

    def _main(self, _: object = None) -> None:
        s = self._scheduler
        try:
            self._target()
        except GreenletExit:
            pass
        except BaseException as e:
            s.failures.append((self._name, e))
        finally:
            self._task.done = True
            s._started.discard(self._task)
            if self._task.process is not None:
                self._task.process.tasks.discard(self._task)
            if s._hub is not None and not (self._task.process and self._task.process.dead):
                self._done.set()
        # Returning switches to the parent, the scheduler's loop.

    def join(self, timeout: float | None = None) -> None:
        if self._started and not self._task.done:
            self._done.wait(timeout)

    def is_alive(self) -> bool:
        return self._started and not self._task.done and self._task.greenlet is not None

    def __repr__(self) -> str:
        return f"<SimThread {self._name}>"


class SimEvent:
    """``threading.Event`` on the scheduler."""

    __slots__ = ("_flag", "_scheduler", "_waiters")

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._flag = False
        self._waiters: list[tuple[_Task, object]] = []

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        waiters, self._waiters = self._waiters, []
        for task, token in waiters:
            self._scheduler.wake(task, token, True)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        if timeout is not None and timeout <= 0:
            return False
        self._scheduler.block(self._waiters, timeout)
        return self._flag


class SimLock:
    """``threading.Lock`` / ``RLock`` on the scheduler; waiters are served in order."""

    __slots__ = ("_count", "_owner", "_reentrant", "_scheduler", "_waiters")

    def __init__(self, scheduler: Scheduler, *, reentrant: bool) -> None:
        self._scheduler = scheduler
        self._reentrant = reentrant
        self._owner: _Task | None = None
        self._count = 0
        self._waiters: deque[tuple[_Task, object]] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        # The scheduler itself (invariant checks between steps) may take a free lock.
        me = self._scheduler._current or self._scheduler._hub_task
        if self._owner is None:
            self._owner, self._count = me, 1
            return True
        if me is self._scheduler._hub_task:
            if not blocking:
                return False  # (a killed process's cleanup, run as the history ends)
            raise SimulationError("the scheduler found a lock held by a waiting thread")
        if self._owner is me:
            if not self._reentrant:
                raise SimulationError(f"thread {me.name} took a lock it holds: a deadlock")
            self._count += 1
            return True
        if not blocking or timeout == 0:
            return False
        wait = None if timeout is None or timeout < 0 else timeout
        got = self._scheduler.block(self._waiters, wait)
        return got is not TIMED_OUT

    def release(self, *_exc_info: object) -> None:
        me = self._scheduler._current or self._scheduler._hub_task
        if self._owner is not me and me.process is not None and me.process.dead:
            # A killed thread unwinding out of a condition wait that had not taken the
            # lock back (another thread held it): its ``with`` has nothing to release,
            # and nothing a killed process does reaches the world.
            return
        if self._owner is None or (self._owner is not me and self._reentrant):
            raise RuntimeError("release of a lock this thread does not hold")
        self._count -= 1
        if self._count:
            return
        self._owner = None
        # Hand the lock to the first waiter that still waits (not timed out, not killed).
        while self._waiters:
            task, token = self._waiters.popleft()
            if task.token is token and not task.done:
                self._owner, self._count = task, 1
                if self._scheduler.wake(task, token, True):
                    return
                self._owner, self._count = None, 0

    def _release_all(self) -> int:
        count = self._count
        self._count = 1
        self.release()
        return count

    def _restore(self, count: int) -> None:
        self.acquire()
        self._count = count

    def _is_owned(self) -> bool:
        return self._owner is self._scheduler._current

    # (A frame less each: every step takes a few locks.)
    __enter__ = acquire
    __exit__ = release


class SimCondition:
    """``threading.Condition`` on the scheduler."""

    __slots__ = ("_lock", "_scheduler", "_waiters")

    def __init__(self, scheduler: Scheduler, lock: SimLock) -> None:
        self._scheduler = scheduler
        self._lock = lock
        self._waiters: deque[tuple[_Task, object]] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.__exit__(exc_type, exc, tb)

    def wait(self, timeout: float | None = None) -> bool:
        if not self._lock._is_owned():
            raise RuntimeError("cannot wait on an un-acquired condition")
        count = self._lock._release_all()
        try:
            got = self._scheduler.block(self._waiters, timeout)
        finally:
            self._lock._restore(count)
        return got is not TIMED_OUT

    def notify(self, n: int = 1) -> None:
        while n > 0 and self._waiters:
            task, token = self._waiters.popleft()
            if self._scheduler.wake(task, token, True):
                n -= 1

    def notify_all(self) -> None:
        waiters, self._waiters = self._waiters, deque()
        for task, token in waiters:
            self._scheduler.wake(task, token, True)
