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


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, interrupt: threading.Event) -> None:
        if seconds > 0:
            interrupt.wait(seconds)
