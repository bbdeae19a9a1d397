"""What a group coordinator persists to ``__consumer_offsets``, in the simulator.

Internal, no compatibility guarantee. The record types (a group's metadata, its committed
offsets, and their tombstones) and :class:`GroupLog`, the log every broker's
:class:`~._group_coordinator.GroupCoordinatorModel` writes to and reloads from after a
coordinator move; it also keeps the KIP-848 groups and the cluster's topics.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ._consumer_group_coordinator import ConsumerGroupState


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group metadata record (GroupMetadataValue): the group as of its last write."""

    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[StoredMember, ...]


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str  # Kafka stores "" for a commit without metadata
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    group_id: str
    topic: str
    partition: int


LogEntry = GroupRecord | GroupTombstone | OffsetRecord | OffsetTombstone


class GroupLog:
    """What the coordinator persisted to __consumer_offsets (group records and offset commits),
    shared by every broker's model so that a coordinator move or a broker restart reloads it.

    ``entries`` is every write in order; ``group()`` and ``offsets()`` are the compacted view
    that a loading coordinator replays. It also numbers member ids, so that ids never repeat
    across coordinators.
    """

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._groups: dict[str, GroupRecord] = {}
        self._offsets: dict[str, dict[tuple[str, int], OffsetRecord]] = {}
        self._member_ids = 0
        # KIP-848 groups, as their coordinator persists them (the consumer group model's).
        self.consumer_groups: dict[str, ConsumerGroupState] = {}
        # The cluster's topics, by name: id and partition count (the KIP-848 model assigns
        # them; a driver that uses KIP-848 groups fills it).
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}

    def append(self, entry: LogEntry) -> None:
        self.entries.append(entry)
        if isinstance(entry, GroupRecord):
            self._groups[entry.group_id] = entry
        elif isinstance(entry, GroupTombstone):
            self._groups.pop(entry.group_id, None)
        elif isinstance(entry, OffsetRecord):
            key = (entry.topic, entry.partition)
            self._offsets.setdefault(entry.group_id, {})[key] = entry
        else:
            offsets = self._offsets.get(entry.group_id, {})
            offsets.pop((entry.topic, entry.partition), None)
            if not offsets:
                self._offsets.pop(entry.group_id, None)

    def group(self, group_id: str) -> GroupRecord | None:
        return self._groups.get(group_id)

    def offsets(self, group_id: str) -> dict[tuple[str, int], OffsetRecord]:
        return dict(self._offsets.get(group_id, {}))

    def group_ids(self) -> list[str]:
        """Groups with a metadata record or offsets, in order of first write."""
        return list(dict.fromkeys([*self._groups, *self._offsets]))

    def next_member_number(self) -> int:
        self._member_ids += 1
        return self._member_ids
