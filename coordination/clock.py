"""Time and waiting, injectable so that tests can run members without waiting.

The clock is the engine's only source of time *and of everything that waits*:
sleeps, events, locks, conditions and threads all come from it. Production
uses :class:`SystemClock` (the operating system's clock and ``threading``); a
deterministic simulation supplies a clock whose threads are scheduled one at
a time on simulated time, so a whole group of members replays exactly from a
seed. Code that waits on anything not made by the clock would escape the
simulation, so the engine and the recipes make every waiting object here, and so
should a user's own :class:`~coordination.Coordinator` subclass or recipe.

Example:
    from coordination.clock import SYSTEM_CLOCK, Clock

    class Ticker:
        def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
            self._clock = clock
            self._stop = clock.event()
            self._thread = clock.thread(self._run, "ticker")

        def _run(self) -> None:
            while not self._stop.is_set():
                print("tick at", self._clock.monotonic())
                self._clock.sleep(1.0, self._stop)  # returns at once when stopped

A member's clock is ``Coordinator.clock`` (the one given as ``clock=``, or
:data:`SYSTEM_CLOCK`): work that the member's lease guards must wait on it, since the lease
is counted on it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "Condition",
    "Event",
    "Lock",
    "SystemClock",
    "Thread",
    "ThreadingClock",
]


class Event(Protocol):
    """``threading.Event``'s interface."""

    def set(self) -> None: ...
    def clear(self) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


class Lock(Protocol):
    """``threading.Lock``'s (and ``RLock``'s) interface."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Condition(Lock, Protocol):
    """``threading.Condition``'s interface."""

    def wait(self, timeout: float | None = None) -> bool: ...
    def notify(self, n: int = 1) -> None: ...
    def notify_all(self) -> None: ...


class Thread(Protocol):
    """``threading.Thread``'s interface, as far as this project uses it."""

    @property
    def name(self) -> str: ...
    def start(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...
    def is_alive(self) -> bool: ...


class Clock(Protocol):
    """Where a member's time and every one of its waits come from (see the module docstring).

    Implementations: :data:`SYSTEM_CLOCK` (production), ``coordination.testing.ManualClock``
    (a test moves time by hand) and the simulator's scheduler (simulated time, one thread
    at a time).
    """

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def sleep(self, seconds: float, interrupt: Event) -> None:
        """Wait ``seconds``, or less if ``interrupt`` is set meanwhile."""
        ...

    def event(self) -> Event:
        """A new event (unset)."""
        ...

    def lock(self) -> Lock:
        """A new lock; a thread that holds it must not take it again."""
        ...

    def rlock(self) -> Lock:
        """A new reentrant lock."""
        ...

    def condition(self, lock: Lock | None = None) -> Condition:
        """A new condition over ``lock`` (a new reentrant lock if None)."""
        ...

    def thread(self, target: Callable[[], object], name: str) -> Thread:
        """A new daemon thread (not started) that runs ``target``."""
        ...

    def current_thread(self) -> object:
        """The running thread, comparable with the threads :meth:`thread` made."""
        ...

    def random(self) -> random.Random:
        """A new generator of random numbers (backoff jitter); a simulation's come from its
        seed, so that its histories replay."""
        ...


class ThreadingClock:
    """Waiting objects from ``threading``; the time comes from a subclass.

    Subclass it for a clock whose time is not the system's but whose waits are real
    threads' (``coordination.testing.ManualClock`` does).
    """

    def monotonic(self) -> float:
        raise NotImplementedError

    def sleep(self, seconds: float, interrupt: Event) -> None:
        if seconds > 0:
            interrupt.wait(seconds)

    def event(self) -> Event:
        return threading.Event()

    def lock(self) -> Lock:
        return threading.Lock()

    def rlock(self) -> Lock:
        return threading.RLock()

    def condition(self, lock: Lock | None = None) -> Condition:
        return threading.Condition(lock)  # type: ignore[arg-type]

    def thread(self, target: Callable[[], object], name: str) -> Thread:
        return threading.Thread(target=target, name=name, daemon=True)

    def current_thread(self) -> object:
        return threading.current_thread()

    def random(self) -> random.Random:
        return random.Random()


# Kafka's brokers keep counting while this host is suspended; CLOCK_MONOTONIC does not, so a
# member that wakes from a suspend would think its session younger than the broker does.
# CLOCK_BOOTTIME (Linux) counts suspended time too.
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _boottime() -> float:
    assert _BOOTTIME is not None
    return time.clock_gettime(_BOOTTIME)


class SystemClock(ThreadingClock):
    """The real clock: monotonic, and on Linux counting time spent suspended."""

    monotonic = staticmethod(_boottime if _BOOTTIME is not None else time.monotonic)


SYSTEM_CLOCK = SystemClock()
"""The clock every member uses unless it is given another."""
