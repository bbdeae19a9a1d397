"""The demo: a few members join a group, one leaves, and the assignments are printed as they change.

Run with ``coordination demo`` (it starts its own broker unless given one).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ._coordinator import Coordinator
from ._types import Member, ProtocolMetadata

WORK = [f"shard-{i}" for i in range(8)]


class ShardOwner(Coordinator):
    """Shares eight named shards among the members; the leader deals them out round-robin."""

    def __init__(self, name: str, group_id: str, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self.name = name
        self.owned: list[str] = []
        self.changed = threading.Event()

    def protocol_type(self) -> str:
        return "demo-shards"

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [ProtocolMetadata("round-robin", self.name.encode())]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ids = sorted(m.member_id for m in members)
        shares: dict[str, list[str]] = {i: [] for i in ids}
        for n, shard in enumerate(WORK):
            shares[ids[n % len(ids)]].append(shard)
        return {i: ",".join(s).encode() for i, s in shares.items()}

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        self.owned = assignment.decode().split(",") if assignment else []
        role = "leader  " if self.is_leader else "follower"
        print(
            f"  gen {generation:>2}  {self.name:<7} {role} owns {', '.join(self.owned)}", flush=True
        )
        self.changed.set()


def run(bootstrap_servers: str) -> None:
    group = f"demo-{uuid.uuid4().hex[:8]}"
    settings = {
        "bootstrap_servers": bootstrap_servers,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 500,
    }
    members: list[ShardOwner] = []
    try:
        for name in ("alice", "bob", "carol"):
            print(f"\n{name} joins group {group}", flush=True)
            started = time.monotonic()
            member = ShardOwner(name, group, **settings)
            members.append(member)
            member.start()
            _wait_all_agree(members)
            print(f"  ({len(members)} members stable in {time.monotonic() - started:.2f}s)")
        leaving = members.pop(1)
        print(f"\n{leaving.name} leaves", flush=True)
        started = time.monotonic()
        leaving.close()
        _wait_all_agree(members)
        print(f"  ({len(members)} members stable in {time.monotonic() - started:.2f}s)")
        owned = sorted(s for m in members for s in m.owned)
        assert owned == sorted(WORK), f"shards lost or doubled: {owned}"
        print("\nevery shard has exactly one owner; done.")
    finally:
        for member in members:
            member.close()


def _wait_all_agree(members: list[ShardOwner], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stable = [m.generation_if_stable() for m in members]
        owned = sorted(s for m in members for s in m.owned)
        if (
            all(stable)
            and len({g.generation_id for g in stable if g}) == 1
            and owned == sorted(WORK)
        ):
            time.sleep(0.2)  # let the last member's print land
            return
        time.sleep(0.05)
    raise TimeoutError("the members did not agree on an assignment within a minute")
