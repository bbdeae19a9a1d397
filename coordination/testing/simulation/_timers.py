"""What the group coordinator models need of the simulated clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """The simulated clock: seconds, and callbacks run by the scheduler at a given time."""

    def now(self) -> float: ...

    def call_at(self, when: float, fn: Callable[[], None]) -> Cancellable: ...
