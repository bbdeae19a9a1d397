"""The example semaphore (examples/semaphore.py) on the deterministic simulator, under faults.

Safety: at no instant do more than ``PERMITS`` living members each hold a permit
(``Semaphore.holds()``: granted, and the membership lease above its margin). Liveness: once
the faults stop, ``min(PERMITS, running members)`` members hold one.

The driver below runs a user's ``Coordinator`` subclass the way the simulator runs the
recipes. The simulator has no public entry point for that yet: ``History``,
``HistorySettings``, ``DriverBase``, ``Host``, ``Trace`` and ``Violation`` are reached in
``coordination.testing.simulation._history``, the simulated network and clock in its
``_network`` and ``_scheduler`` (a test may import them; a recipe or an example may not).
"""

from __future__ import annotations

import pytest

from coordination.testing.simulation._history import (
    GROUP,
    DriverBase,
    History,
    HistorySettings,
    Host,
    Trace,
    Violation,
)
from coordination.testing.simulation._network import SimTransport
from coordination.testing.simulation._scheduler import Process, Scheduler
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


def test_the_semaphore_never_gives_out_more_permits_than_it_has_under_faults() -> None:
    failures = []
    for seed in range(12):
        result = History(SemaphoreDriver, seed, HistorySettings(faults=40)).run()
        if not result.ok:
            failures.append((seed, result.violation, result.trace[-30:]))
    assert not failures, failures[0]


def test_without_faults_permits_go_to_the_first_members_and_the_rest_wait() -> None:
    result = History(SemaphoreDriver, 7, HistorySettings(faults=0, members=4)).run()
    assert result.ok, (result.violation, result.trace[-30:])


def test_a_semaphore_that_ignores_its_lease_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check has teeth: a holder that trusts its assignment without its lease keeps the
    # permit through partitions and pauses while the group gives it to another member.
    monkeypatch.setattr(Semaphore, "holds", lambda self: self._granted)
    violations = [
        result.violation
        for seed in range(20)
        if not (result := History(SemaphoreDriver, seed, HistorySettings(faults=40)).run()).ok
    ]
    assert any(v is not None and "hold a permit at once" in v for v in violations), violations
