"""Values shared by the public API and the engine: generations, members, protocols, states."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, NewType

GroupId = NewType("GroupId", str)
MemberId = NewType("MemberId", str)


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation of the group as this member knows it.

    A new generation begins at every completed rebalance. Requests carry the
    generation they were sent in; the broker rejects those of an older one
    (``ILLEGAL_GENERATION``), which is what fences a member that missed a
    rebalance.

    Attributes:
        generation_id: the group's generation number, or -1 before the first join.
        member_id: the id the coordinator gave this member, or "" before it has one.
        protocol: the protocol the coordinator selected, or None before a join.
    """

    generation_id: int
    member_id: str
    protocol: str | None

    @property
    def has_member_id(self) -> bool:
        """True once the coordinator gave this member an id (possibly before a generation)."""
        return self.member_id != ""


NO_GENERATION: Final = Generation(-1, "", None)
"""The generation of a member that has not joined (or lost its place in) the group."""


class MemberState(enum.Enum):
    """Where this member is in the join protocol (Kafka's ``AbstractCoordinator.MemberState``)."""

    UNJOINED = "unjoined"
    """Not in the group: before the first join, after a reset or after leaving."""
    PREPARING_REBALANCE = "preparing_rebalance"
    """A JoinGroup was sent; waiting for the broker to complete the join phase."""
    COMPLETING_REBALANCE = "completing_rebalance"
    """Joined a new generation; waiting for the SyncGroup answer (the assignment)."""
    STABLE = "stable"
    """Has this generation's assignment; heartbeating."""
    CLOSED = "closed"
    """Closed by the user or stopped by a fatal error; the member does nothing more."""


@dataclass(frozen=True, slots=True)
class ProtocolMetadata:
    """One protocol this member supports, as advertised in JoinGroup.

    Attributes:
        name: the protocol's name, e.g. ``"range"`` or ``"v1"``.
        metadata: opaque bytes every member's ``perform_assignment`` will see.
    """

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class Member:
    """A member of the group as the leader sees it in ``perform_assignment``.

    Attributes:
        member_id: the id the coordinator gave the member.
        group_instance_id: its static id (KIP-345), or None for a dynamic member.
        metadata: the metadata it sent for the selected protocol.
    """

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position in a partition, as the group stores it.

    Attributes:
        offset: the offset of the next record to process (the last processed one + 1).
        metadata: a string stored with it (Kafka's ``committed_metadata``), e.g. what the
            output of the records before ``offset`` is called; at most the broker's
            ``offset.metadata.max.bytes`` (4096 by default).
    """

    offset: int
    metadata: str = ""
