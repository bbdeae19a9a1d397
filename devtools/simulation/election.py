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
from typing import Any

from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    HistorySettings,
    Host,
    Process,
    Scheduler,
    SimEventLoop,
    SimTransport,
    Trace,
    Violation,
)

from ._loops import TurningLoops


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


class AsyncElectionDriver(TurningLoops, ElectionDriver):
    """The election through its asyncio face (``AsyncLeaderElection``), as shipped, on an
    asyncio event loop of the member's own (:class:`SimEventLoop`: asyncio's loop on
    simulated time): the application starts and closes it with ``await``, its callbacks
    run on the loop, and the application reads ``is_leader`` every 20 ms, so that the loop
    is often the first to see a lease ran out. Checked on top: every loop keeps turning
    (none waits for itself), and ``on_elected`` and ``on_deposed`` run on the loop."""

    name = "election-async"

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from recipes.election import AsyncLeaderElection, Leadership

        process = host.process
        assert process is not None
        name = process.name
        loop = SimEventLoop(clock, name)
        loop_thread = clock.current_thread()

        def on_the_loop(what: str) -> None:
            if clock.current_thread() is not loop_thread and self._violation is None:
                self._violation = f"{name}: {what} ran off its event loop"

        async def elected(leadership: Leadership) -> None:
            on_the_loop("on_elected")
            self.take_slow(host, clock)  # a slow callback holds the loop up
            trace(f"{name}: elected, token {leadership.token}")

        def deposed(leadership: Leadership) -> None:
            on_the_loop("on_deposed")
            trace(f"{name}: deposed ({leadership.reason})")

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
        self.members[name] = (process, face.election)
        self._watch_loop(name, process, loop, face, clock)

        async def application() -> None:
            await face.start()
            while True:
                face.is_leader  # noqa: B018 (read for its effect: it may depose)
                self._turned(name, clock)
                await asyncio.sleep(self.TURN_S)

        loop.run_until_complete(application())

    def close(self, host: Host) -> None:
        self._close_on_loop(host, lambda face: face.close(10.0))

    def settled(self, live: list[Host]) -> str | None:
        return self._stalled_loop() or super().settled(live)
