"""Time, injectable so that tests can run the engine without waiting."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def sleep(self, seconds: float, interrupt: threading.Event) -> None:
        """Wait ``seconds``, or less if ``interrupt`` is set meanwhile."""
        ...


# Kafka's brokers keep counting while this host is suspended; CLOCK_MONOTONIC does not, so a
# member that wakes from a suspend would think its session younger than the broker does.
# CLOCK_BOOTTIME (Linux) counts suspended time too.
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _boottime() -> float:
    assert _BOOTTIME is not None
    return time.clock_gettime(_BOOTTIME)


class SystemClock:
    """The real clock: monotonic, and on Linux counting time spent suspended."""

    monotonic = staticmethod(_boottime if _BOOTTIME is not None else time.monotonic)

    def sleep(self, seconds: float, interrupt: threading.Event) -> None:
        if seconds > 0:
            interrupt.wait(seconds)
