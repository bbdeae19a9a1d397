"""Shards shared among the members of a group: the smallest useful ``Coordinator``.

Each member advertises its name; the leader deals the shards out round-robin; each member
owns its share from ``on_join_complete`` until the next ``on_join_prepare`` (or
``on_leave_prepare``), which is when it must stop working on them. Start a broker
(``coordination broker``), then run this file in two or three terminals and stop one:

    python examples/shards.py alice localhost:9092
    python examples/shards.py bob localhost:9092

``python examples/shards.py --demo [BOOTSTRAP]`` runs three members in one process (and a
broker of its own unless given one): they join one by one, one leaves, and every shard keeps
exactly one owner. The same class runs in the deterministic simulator
(``python -m devtools.simulation --recipe engine``) and in the tests.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from coordination import Coordinator, Member, ProtocolMetadata

SHARDS = tuple(f"shard-{i}" for i in range(8))


class ShardOwner(Coordinator):
    """Shares ``SHARDS`` among the group's members; the leader deals them out round-robin."""

    def __init__(self, group_id: str, name: str, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self.name = name
        self.owned: frozenset[str] = frozenset()  # work on these only
        self.changed = threading.Event()

    def protocol_type(self) -> str:
        return "shards"  # every member of the group says the same

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [ProtocolMetadata("round-robin", self.name.encode())]  # most preferred first

    def perform_assignment(  # runs on the leader only
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ids = sorted(m.member_id for m in members)
        shares: dict[str, list[str]] = {i: [] for i in ids}
        for n, shard in enumerate(SHARDS):
            shares[ids[n % len(ids)]].append(shard)
        return {i: ",".join(s).encode() for i, s in shares.items()}

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        self.owned = frozenset()  # a rebalance begins: stop working on them

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self.owned = frozenset(s for s in assignment.decode().split(",") if s)
        self.report(generation)
        self.changed.set()

    def on_leave_prepare(self) -> None:
        self.owned = frozenset()

    def report(self, generation: int) -> None:
        """Say what this member owns now (override to do otherwise)."""
        role = "leader  " if self.is_leader else "follower"
        print(f"  gen {generation:>2}  {self.name:<7} {role} owns {', '.join(sorted(self.owned))}")


def demo(bootstrap_servers: str) -> None:
    """Three members join one by one, one leaves; every shard keeps exactly one owner."""
    group = f"shards-demo-{uuid.uuid4().hex[:8]}"
    settings = {"bootstrap_servers": bootstrap_servers, "session_timeout_ms": 6000}
    members: list[ShardOwner] = []
    try:
        for name in ("alice", "bob", "carol"):
            print(f"\n{name} joins group {group}", flush=True)
            started = time.monotonic()
            members.append(ShardOwner(group, name, heartbeat_interval_ms=500, **settings))
            members[-1].start()
            _wait_all_agree(members)
            print(f"  ({len(members)} members stable in {time.monotonic() - started:.2f}s)")
        leaving = members.pop(1)
        print(f"\n{leaving.name} leaves", flush=True)
        started = time.monotonic()
        leaving.close()
        _wait_all_agree(members)
        print(f"  ({len(members)} members stable in {time.monotonic() - started:.2f}s)")
        print("\nevery shard has exactly one owner; the others leave too:", flush=True)
    finally:
        for member in members:
            member.close()  # the last one may own everything for a moment, and say so
    print("done.", flush=True)


def _wait_all_agree(members: list[ShardOwner], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stable = [m.generation_if_stable() for m in members]
        owned = sorted(s for m in members for s in m.owned)
        generations = {g.generation_id for g in stable if g is not None}
        if all(stable) and len(generations) == 1 and owned == sorted(SHARDS):
            return
        time.sleep(0.05)
    raise TimeoutError("the members did not agree on an assignment within a minute")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--demo"]:
        if len(argv) > 1:
            demo(argv[1])
            return 0
        from coordination.testing import KafkaCluster

        print("starting a local Kafka broker...", flush=True)
        with KafkaCluster(1) as cluster:
            demo(cluster.bootstrap_servers)
        return 0
    if len(argv) != 2:
        print("usage: python examples/shards.py NAME BOOTSTRAP | --demo [BOOTSTRAP]")
        return 2
    name, servers = argv
    with ShardOwner("shards", name, bootstrap_servers=servers) as member:
        member.ensure_active_group(timeout=30)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C leaves: the others take its shards
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
