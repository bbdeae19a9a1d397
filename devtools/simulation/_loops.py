"""What the drivers of the recipes' asyncio faces share: each member runs on an event loop of
its own (:class:`SimEventLoop`), whose turns the application records; a loop that stopped
turning (one that waits for itself never turns again, nor runs a callback) keeps the
history from settling."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from coordination.testing.simulation import Host, Process, Scheduler, SimEventLoop

# How long a loop of a live, running process may go without a turn.
_STALL_S = 1.0


class TurningLoops:
    """Mix into a driver (first among its bases): :meth:`_watch_loop` at a member's start,
    :meth:`_turned` from its application's ticker (every ``TURN_S``), :meth:`_stalled_loop`
    from ``settled``, :meth:`_close_on_loop` from ``close``."""

    TURN_S = 0.02

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # By process name: the member's loop and face, and when its application last turned.
        self.loops: dict[str, tuple[Process, SimEventLoop, Any]] = {}
        self.turns: dict[str, float] = {}

    def _watch_loop(
        self, name: str, process: Process, loop: SimEventLoop, face: Any, clock: Scheduler
    ) -> None:
        self.loops[name] = (process, loop, face)
        self.turns[name] = clock.monotonic()

    def _turned(self, name: str, clock: Scheduler) -> None:
        self.turns[name] = clock.monotonic()

    def _stalled_loop(self) -> str | None:
        for name, (process, loop, _) in list(self.loops.items()):
            if process.dead or loop.is_closed():
                continue
            stalled = loop.time() - self.turns[name]
            if process.paused_until is None and stalled > _STALL_S:
                return f"{name}'s event loop stopped turning {stalled:.1f}s ago"
        return None

    def _close_on_loop(
        self, host: Host, close: Callable[[Any], Coroutine[Any, Any, object]]
    ) -> None:
        """Run ``close(face)`` on the loop of ``host``'s member, and wait for it."""
        name = None if host.process is None else host.process.name
        if name not in self.loops:
            return
        _, loop, face = self.loops[name]
        loop.run_from_thread(lambda: close(face), timeout=30.0)
