"""examples/shards.py's ShardOwner under the deterministic simulator: how to check your own
``Coordinator`` through thousands of seeded fault histories.

A driver starts one member per simulated host (on the simulator's clock and transport) and
says what must hold. Here: the engine's own promise (``Coordinator.membership_lease``):
while a member's lease is above zero, the broker cannot have given its assignment to
another member; so at no instant may two living members each hold a shard with a lease
above a heartbeat interval (the margin the recipes keep). After the faults, every shard
has exactly one holder. Run it:

    python -m coordination.testing.simulation --driver examples.shards_simulation:ShardsDriver \
        --seeds 1000
"""

from __future__ import annotations

from typing import Any

from coordination.testing.simulation import (
    GROUP,
    DriverBase,
    HistorySettings,
    Host,
    Scheduler,
    SimTransport,
    Trace,
    Violation,
)
from examples.shards import SHARDS, ShardOwner


class _ShardMember(ShardOwner):
    """examples/shards.py's ShardOwner, its callbacks slowed by the slow-callback fault and
    what it owns written to the trace."""

    def __init__(
        self, driver: ShardsDriver, host: Host, trace: Trace, clock: Scheduler, **settings: Any
    ) -> None:
        super().__init__(GROUP, host.name, clock=clock, **settings)
        self.scheduler = clock
        self.host = host
        assert host.process is not None
        self.process = host.process  # this incarnation's; the host may get a new one
        self.trace = trace
        self.driver = driver

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        self.driver.take_slow(self.host, self.scheduler)
        if self.owned:
            self.trace(f"{self.process.name}: releases {sorted(self.owned)}")
        super().on_join_prepare(generation, member_id)

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self.driver.take_slow(self.host, self.scheduler)
        super().on_join_complete(generation, member_id, protocol, assignment)

    def report(self, generation: int) -> None:
        self.trace(f"{self.process.name}: owns {sorted(self.owned)} in generation {generation}")


class ShardsDriver(DriverBase):
    name = "engine"

    def __init__(self, settings: HistorySettings) -> None:
        super().__init__(settings)
        self.margin_s = settings.heartbeat_interval_ms / 1000
        self.members: dict[str, _ShardMember] = {}  # by process name

    def start(self, host: Host, transport: SimTransport, clock: Scheduler, trace: Trace) -> None:
        member = _ShardMember(
            self,
            host,
            trace,
            clock,
            transport=transport,
            group_instance_id=host.instance_id,
            **self.settings.member_settings(),
        )
        assert host.process is not None
        self.members[host.process.name] = member
        member.start()

    def close(self, host: Host) -> None:
        member = None if host.process is None else self.members.get(host.process.name)
        if member is not None:
            member.close(10.0)

    def _holders(self) -> dict[str, list[str]]:
        holders: dict[str, list[str]] = {}
        for name, member in list(self.members.items()):
            process = member.process
            if process.dead:
                del self.members[name]
                continue
            # As the recipes do (LeaseGuard's default margin): a member acts on its lease only
            # while more than a heartbeat interval is left, which covers an answer's delay.
            if not member.owned or member.membership_lease() <= self.margin_s:
                continue
            for shard in member.owned:
                holders.setdefault(shard, []).append(f"{member.process.name}/{member.member_id}")
        return holders

    def check(self, now: float) -> None:
        for shard, holders in self._holders().items():
            if len(holders) > 1:
                raise Violation(f"shard {shard} held by {holders} at once, each with a lease")

    def settled(self, live: list[Host]) -> str | None:
        holders = self._holders()
        missing = [s for s in SHARDS if len(holders.get(s, ())) != 1]
        return f"shards not held by exactly one member: {missing}" if missing else None
