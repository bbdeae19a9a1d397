"""examples/semaphore.py's Semaphore under the deterministic simulator, under faults.

Safety: at no instant do more than ``PERMITS`` living members each hold a permit
(``Semaphore.holds()``: granted, and the membership lease above its margin). Liveness: once
the faults stop, ``min(PERMITS, running members)`` members hold one. Run it:

    python -m coordination.testing.simulation \
        --driver examples.semaphore_simulation:SemaphoreDriver --seeds 1000
"""

from __future__ import annotations

from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    HistorySettings,
    Host,
    Process,
    Scheduler,
    SimTransport,
    Trace,
    Violation,
)
from examples.semaphore import Semaphore

PERMITS = 2


class SemaphoreDriver(DriverBase):
    name = "example-semaphore"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.members: dict[str, tuple[Process, Semaphore]] = {}  # by process name

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        process = host.process
        assert process is not None

        def granted() -> None:
            self.take_slow(host, clock)
            trace(f"{process.name}: holds a permit")

        member = Semaphore(
            GROUP,
            permits=PERMITS,
            on_granted=granted,
            on_revoked=lambda: trace(f"{process.name}: gives up its permit"),
            transport=transport,
            clock=clock,
            group_instance_id=host.instance_id,
            **self.settings.member_settings(),
        )
        self.members[process.name] = (process, member)
        member.start()

    def close(self, host: Host) -> None:
        entry = None if host.process is None else self.members.get(host.process.name)
        if entry is not None:
            entry[1].close(10.0)

    def holders(self) -> list[str]:
        holding = []
        for name, (process, member) in list(self.members.items()):
            if process.dead:
                del self.members[name]
            elif member.holds():
                holding.append(name)
        return holding

    def check(self, now: float) -> None:
        holding = self.holders()
        if len(holding) > PERMITS:
            raise Violation(f"{len(holding)} members hold a permit at once: {holding}")

    def settled(self, live: list[Host]) -> str | None:
        # Every process still running is a member of the group once the faults are over,
        # including one a host no longer names (the simulator can leave one running when a
        # graceful restart overlaps a zombie's replacement), as the shard driver counts them.
        holding = self.holders()
        expected = min(PERMITS, len(self.members))
        if len(holding) == expected:
            return None
        return (
            f"{len(holding)} holders {holding} of {len(self.members)} members, {expected} expected"
        )
