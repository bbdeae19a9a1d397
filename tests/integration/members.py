"""Group members for the integration tests: in-process, or as a separate process to kill."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordination import Coordinator, Member, ProtocolMetadata

FAST = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 300,
    "rebalance_timeout_ms": 10000,
    "retry_backoff_ms": 50,
}


def new_group() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


class Listing(Coordinator):
    """The leader hands every member the sorted list of member ids and its own position."""

    def __init__(
        self,
        group_id: str,
        *,
        protocols: Sequence[str] = ("v1",),
        protocol_type: str = "listing",
        **settings: Any,
    ) -> None:
        super().__init__(group_id, **{**FAST, **settings})
        self.protocols = list(protocols)
        self._type = protocol_type
        self.lock = threading.Lock()
        self.completed: list[tuple[int, str, str, dict[str, Any]]] = []
        self.prepared: list[tuple[int, str]] = []
        self.assigned_as_leader: list[int] = []

    def protocol_type(self) -> str:
        return self._type

    def metadata(self) -> Sequence[ProtocolMetadata]:
        return [ProtocolMetadata(p, p.encode()) for p in self.protocols]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ids = sorted(m.member_id for m in members)
        with self.lock:
            self.assigned_as_leader.append(len(ids))
        plan = {"leader": leader_id, "members": ids, "protocol": protocol}
        return {i: json.dumps({**plan, "index": n}).encode() for n, i in enumerate(ids)}

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        with self.lock:
            self.prepared.append((generation, member_id))

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        with self.lock:
            self.completed.append((generation, member_id, protocol, json.loads(assignment)))

    def last(self) -> tuple[int, str, str, dict[str, Any]]:
        with self.lock:
            return self.completed[-1]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def settled(members: Sequence[Listing], size: int) -> bool:
    """All members completed the same generation, whose assignment lists ``size`` members."""
    lasts = []
    for m in members:
        with m.lock:
            if not m.completed:
                return False
            lasts.append(m.completed[-1])
    return (
        len({g for g, *_ in lasts}) == 1
        and all(len(a["members"]) == size for *_, a in lasts)
        and all(m.generation_if_stable() is not None for m in members)
    )


def main() -> None:
    """Run one member in this process, printing each event as a JSON line (for kill tests)."""
    bootstrap, group = sys.argv[1], sys.argv[2]
    instance = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
    member = Listing(group, bootstrap_servers=bootstrap, group_instance_id=instance)

    def emit(**event: Any) -> None:
        print(json.dumps(event), flush=True)

    original_prepare, original_complete = member.on_join_prepare, member.on_join_complete

    def on_join_prepare(generation: int, member_id: str) -> None:
        original_prepare(generation, member_id)
        emit(event="prepare", generation=generation, member_id=member_id)

    def on_join_complete(generation: int, member_id: str, protocol: str, assignment: bytes) -> None:
        original_complete(generation, member_id, protocol, assignment)
        emit(
            event="joined",
            generation=generation,
            member_id=member_id,
            members=json.loads(assignment)["members"],
        )

    member.on_join_prepare = on_join_prepare  # type: ignore[method-assign]
    member.on_join_complete = on_join_complete  # type: ignore[method-assign]
    member.start()
    try:
        for line in sys.stdin:
            if line.strip() == "close":
                break
    finally:
        member.close()
        emit(event="closed")


if __name__ == "__main__":
    main()
