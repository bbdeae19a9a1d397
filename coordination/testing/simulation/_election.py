"""Leader election under simulation.

Checked at every simulated instant: at most one member believes it leads and would pass
``Leadership.check()`` (its leadership not lost, its lease above the margin); and every
new leadership's fencing token is above every earlier one. After the faults: one leader.
"""

from __future__ import annotations

from typing import Any

from ._history import GROUP, HistorySettings, Host, Trace, Violation
from ._network import SimTransport
from ._scheduler import Process, Scheduler


class ElectionDriver:
    name = "election"

    def __init__(self, settings: HistorySettings) -> None:
        self.settings = settings
        self.members: dict[str, tuple[Process, Any]] = {}  # by process name
        self.highest_token = -1
        self.elections = 0
        self._slow: dict[int, float] = {}
        self._clock: Scheduler | None = None

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        from recipes.election import LeaderElection, Leadership

        self._clock = clock
        process = host.process
        assert process is not None

        def elected(leadership: Leadership) -> None:
            self._maybe_slow(host)
            if process.dead:
                return
            if leadership.token <= self.highest_token:
                raise Violation(
                    f"{process.name} elected with token {leadership.token}, not above "
                    f"{self.highest_token}"
                )
            self.highest_token = leadership.token
            self.elections += 1
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

    def slow(self, host: Host, seconds: float) -> None:
        self._slow[host.index] = seconds

    def _maybe_slow(self, host: Host) -> None:
        seconds = self._slow.pop(host.index, 0.0)
        if seconds and self._clock is not None:
            self._clock.sleep(seconds, self._clock.event())

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
        return leaders

    def check(self, now: float) -> None:
        leaders = self._leaders()
        if len(leaders) > 1:
            raise Violation(f"two leaders at once, each passing check(): {leaders}")

    def settled(self, live: list[Host]) -> str | None:
        leaders = self._leaders()
        return None if len(leaders) == 1 else f"{len(leaders)} leaders: {leaders}"
