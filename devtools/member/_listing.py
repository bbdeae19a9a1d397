"""The ``listing`` recipe: a bare Coordinator handing out the list of members."""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from coordination import Coordinator, Member, ProtocolMetadata

from ._io import Output, Stopping, group_settings


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
        super().__init__(group_id, **settings)
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


class _ReportingListing(Listing):
    def __init__(self, group_id: str, emit: Output, **settings: Any) -> None:
        super().__init__(group_id, **settings)
        self._emit = emit

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        super().on_join_prepare(generation, member_id)
        self._emit("prepare", generation=generation, member_id=member_id)

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        super().on_join_complete(generation, member_id, protocol, assignment)
        members = json.loads(assignment)["members"]
        self._emit("joined", generation=generation, member_id=member_id, members=members)


def run_listing(args: argparse.Namespace, emit: Output, stopping: Stopping) -> None:
    member = _ReportingListing(
        args.group, emit, bootstrap_servers=args.bootstrap, **group_settings(args)
    )
    member.start()
    emit("up", pid=os.getpid())
    stopping.wait()
    member.close()
    emit("closed")
