"""Leader election under simulation.

Checked at every simulated instant: at most one member believes it leads and would pass
``Leadership.check()`` (its leadership not lost, its lease above the margin); and the
tokens of leaderships that act never go down, nor repeat across members (one member
re-elected with nobody in between keeps its token, which a fencing store accepts as the
same writer). After the faults: one leader. Deleting the group deletes its stored token,
and tokens start over, as docs/election.md says.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, cast

from ._history import GROUP, DriverBase, HistorySettings, Host, Trace, Violation
from ._network import SimTransport
from ._scheduler import Process, Scheduler, SimulationError


class ElectionDriver(DriverBase):
    name = "election"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.members: dict[str, tuple[Process, Any]] = {}  # by process name
        self.highest_token = -1
        self.elections = 0
        # Found inside a recipe's callback, which would swallow an exception: raised by the
        # next check.
        self._violation: str | None = None
        self._last_acting: Any = None
        self._highest_holder: str | None = None

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from recipes.election import LeaderElection, Leadership

        process = host.process
        assert process is not None

        def elected(leadership: Leadership) -> None:
            # May run late (after a pause): tokens are checked where leaderships act, below.
            self.take_slow(host, clock)
            trace(f"{process.name}: elected, token {leadership.token}")

        def deposed(leadership: Leadership) -> None:
            trace(f"{process.name}: deposed ({leadership.reason})")

        election = LeaderElection(
            GROUP,
            identity=host.name,  # stable across restarts, as a host:port would be
            on_elected=elected,
            on_deposed=deposed,
            transport=transport,
            clock=clock,
            group_instance_id=host.instance_id,
            **self.settings.member_settings(),
        )
        self.members[process.name] = (process, election)
        election.start()

    def close(self, host: Host) -> None:
        if host.process is not None and host.process.name in self.members:
            self.members[host.process.name][1].close(10.0)

    def group_deleted(self) -> None:
        # The stored token went with the group's offsets: tokens start over, as
        # docs/election.md ("The stored token") says they do after a deletion.
        self.highest_token = -1
        self._last_acting = None

    def _leaders(self) -> list[str]:
        leaders = []
        for name, (process, election) in list(self.members.items()):
            if process.dead:
                del self.members[name]
                continue
            elector = election._elector
            leadership = elector._leadership
            # What check() would answer now, without its side effect (deposing).
            if leadership is not None and not leadership.lost.is_set() and elector.lease.holds():
                leaders.append(f"{name} (token {leadership.token})")
                self._acting(name, leadership)
        return leaders

    def _acting(self, name: str, leadership: Any) -> None:
        """A leadership that passes check() now: its token may not be below one that acted
        before, nor equal to one another member acted with (a member re-elected with no
        other leader in between keeps its token: for a fencing store, it writes again)."""
        if leadership is self._last_acting:
            return
        token = leadership.token
        stale = token < self.highest_token or (
            token == self.highest_token and name != self._highest_holder
        )
        if stale and self._violation is None:
            self._violation = (
                f"{name} acts as leader with token {token}; {self._highest_holder} acted "
                f"with {self.highest_token} before"
            )
        if token >= self.highest_token:
            self.highest_token, self._highest_holder = token, name
        self._last_acting = leadership
        self.elections += 1

    def check(self, now: float) -> None:
        if self._violation is not None:
            raise Violation(self._violation)
        leaders = self._leaders()
        if len(leaders) > 1:
            raise Violation(f"two leaders at once, each passing check(): {leaders}")

    def settled(self, live: list[Host]) -> str | None:
        leaders = self._leaders()
        return None if len(leaders) == 1 else f"{len(leaders)} leaders: {leaders}"


class SimLoop:
    """An event loop on the simulator's clock: one thread of the member's process that runs
    what other threads hand it (``call_soon_threadsafe``) and the tasks it makes, between
    turns of the application (``turn``). Enough of asyncio's loop for the recipes' async
    faces (``recipes/_aio.py``); a callback that awaits real asyncio is refused."""

    def __init__(self, clock: Scheduler, turn: Callable[[], object], every_s: float) -> None:
        self._clock = clock
        self._turn = turn
        self._every_s = every_s
        self._ready: deque[Callable[[], object]] = deque()
        self._wake = clock.event()
        self.last_turn = clock.monotonic()

    # ------------------------------------------------------------------ asyncio's loop

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> None:
        self._ready.append(lambda: callback(*args))
        self._wake.set()

    def create_task(self, coro: Coroutine[Any, Any, None]) -> _SimTask:
        task = _SimTask(self, coro)
        self.call_soon_threadsafe(task.step)
        return task

    def is_closed(self) -> bool:
        return False

    def now(self) -> float:
        return self._clock.monotonic()

    # ------------------------------------------------------------------ its thread

    def run_forever(self) -> None:
        """Run handed-over callbacks and the application's turns, forever (until killed)."""
        while True:
            while self._ready:
                self._ready.popleft()()
            self._turn()
            self.last_turn = self._clock.monotonic()
            self._wake.wait(self._every_s)
            self._wake.clear()


class _SimTask:
    """A coroutine run to its end in one step on a :class:`SimLoop` (asyncio's Task's
    ``add_done_callback``, ``cancelled``, ``exception``)."""

    def __init__(self, loop: SimLoop, coro: Coroutine[Any, Any, None]) -> None:
        self._loop = loop
        self._coro = coro
        self._done = False
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Any], object]] = []

    def step(self) -> None:
        try:
            self._coro.send(None)
        except StopIteration:
            pass
        except Exception as e:
            self._exception = e
        else:
            self._coro.close()
            self._exception = SimulationError("a simulated callback awaited real asyncio")
        self._done = True
        for callback in self._callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable[[Any], object]) -> None:
        if self._done:
            self._loop.call_soon_threadsafe(callback, self)
        else:
            self._callbacks.append(callback)

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        return self._exception


class AsyncElectionDriver(ElectionDriver):
    """The election through its asyncio face (``AsyncLeaderElection``): its callbacks run on
    each member's loop, whose application reads ``is_leader`` at every turn (every 10 ms),
    so that the loop is often the first to see a lease ran out. Checked on top: every
    loop keeps turning (none waits for itself), and ``on_deposed`` runs on the loop."""

    name = "election-async"
    _TURN_S = 0.01

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.loops: dict[str, tuple[Process, SimLoop]] = {}  # by process name

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from recipes.election import AsyncLeaderElection, Leadership

        process = host.process
        assert process is not None
        loop_thread: list[object] = []

        def on_the_loop(what: str) -> None:
            if clock.current_thread() not in loop_thread and self._violation is None:
                self._violation = f"{process.name}: {what} ran off its event loop"

        def elected(leadership: Leadership) -> None:
            on_the_loop("on_elected")
            self.take_slow(host, clock)  # a slow callback holds the loop up
            trace(f"{process.name}: elected, token {leadership.token}")

        def deposed(leadership: Leadership) -> None:
            on_the_loop("on_deposed")
            trace(f"{process.name}: deposed ({leadership.reason})")

        face = AsyncLeaderElection(
            GROUP,
            identity=host.name,
            on_elected=elected,
            on_deposed=deposed,
            transport=transport,
            clock=clock,
            group_instance_id=host.instance_id,
            **self.settings.member_settings(),
        )
        loop = SimLoop(clock, lambda: face.is_leader, self._TURN_S)

        def run_loop() -> None:
            loop_thread.append(clock.current_thread())
            face._bridge.bind(cast(asyncio.AbstractEventLoop, loop))
            loop.run_forever()

        clock.thread(run_loop, f"{process.name}-loop").start()
        self.members[process.name] = (process, face.election)
        self.loops[process.name] = (process, loop)
        face.election.start()

    def settled(self, live: list[Host]) -> str | None:
        # A loop that waits for itself never turns again (and never runs a callback).
        for name, (process, loop) in list(self.loops.items()):
            now = loop.now()
            if process.dead:
                del self.loops[name]
            elif process.paused_until is None and now - loop.last_turn > 1.0:
                return f"{name}'s event loop stopped turning {now - loop.last_turn:.1f}s ago"
        return super().settled(live)
