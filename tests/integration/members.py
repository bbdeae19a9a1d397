"""Group members for the integration tests: in-process, or as a separate process to kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
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


ROOT = Path(__file__).resolve().parents[2]


class EventProcess:
    """A ``python -m <module>`` child that prints JSON events; killable, freezable, closable.

    It closes gracefully when it reads ``close`` on its stdin.
    """

    def __init__(self, module: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.process.pid
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far."""
        return [e for e in list(self.events) if e["event"] == kind]

    def joined(self) -> list[dict[str, Any]]:
        return self.of("joined")

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Ask the process to close (resuming it if frozen); kill it if it does not."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGCONT)
                assert self.process.stdin is not None
                self.process.stdin.write("close\n")
                self.process.stdin.flush()
                self.process.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._reader.join(5)  # the pipe ends when the process does
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


def main() -> None:
    """Run one member in this process, printing each event as a JSON line (for kill tests)."""
    bootstrap, group = sys.argv[1], sys.argv[2]
    instance = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
    session: dict[str, Any] = {"session_timeout_ms": int(sys.argv[4])} if len(sys.argv) > 4 else {}
    member = Listing(group, bootstrap_servers=bootstrap, group_instance_id=instance, **session)

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
