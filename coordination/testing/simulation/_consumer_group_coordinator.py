"""A model of Kafka's consumer group coordinator (KIP-848): the broker side of the simulator
for groups of the new protocol.

Internal, no compatibility guarantee. :class:`ConsumerGroupsModel` answers
ConsumerGroupHeartbeat, and validates OffsetCommit of those groups, as Kafka 4.3's
``GroupMetadataManager`` and ``CurrentAssignmentBuilder`` document their behaviour:

- A member joins with epoch 0; every change of the group's members or subscriptions bumps
  the *group epoch* and computes a new *target assignment* (here the ``uniform`` assignor's
  contract: balanced, sticky).
- Each member moves to its target on its own. It first gives up what the target leaves out
  (``UNREVOKED_PARTITIONS``: its epoch stays, its assignment shrinks to what it keeps, and it
  must report the release); then it gets the new partitions that no other member still owns
  (``UNRELEASED_PARTITIONS`` while some are still held elsewhere), and the target's epoch.
- A request with an epoch other than the member's (or its previous one, while the owned
  partitions it reports are a subset of its assignment) is FENCED_MEMBER_EPOCH.
- A member with no heartbeat for ``session_timeout_ms``, or that keeps partitions to revoke
  past its rebalance timeout, is removed: its partitions become free at once.
- OffsetCommit: the member's current epoch is accepted, an older one is
  STALE_MEMBER_EPOCH, a newer one FENCED_MEMBER_EPOCH, an unknown member
  UNKNOWN_MEMBER_ID.

The groups' state stands for what Kafka writes to ``__consumer_offsets`` before it answers:
it survives a coordinator move (:meth:`load` restarts every member's session, as Kafka
does), timers do not. A static member's leave (epoch -2) is modelled as a leave.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..._protocol import consumer_group as cg
from ..._protocol import messages as msg
from ..._protocol.error_codes import ErrorCode as E

TopicIdPartition = tuple[uuid.UUID, int]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def now(self) -> float: ...

    def call_at(self, when: float, fn: Callable[[], None]) -> Cancellable: ...


@dataclass(frozen=True)
class ConsumerGroupSettings:
    """Kafka's ``group.consumer.*`` broker settings the model obeys (the test brokers')."""

    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 500


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass
class _Member:
    member_id: str
    epoch: int
    previous_epoch: int
    subscribed: frozenset[str]
    rebalance_timeout_ms: int
    state: MemberState = MemberState.STABLE
    assigned: frozenset[TopicIdPartition] = frozenset()
    pending_revocation: frozenset[TopicIdPartition] = frozenset()
    revoke_deadline_ms: int | None = None


@dataclass
class ConsumerGroupState:
    """One group as Kafka persists it."""

    group_id: str
    group_epoch: int = 0
    target_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, frozenset[TopicIdPartition]] = field(default_factory=dict)


class ConsumerGroupsModel:
    """The KIP-848 groups of one coordinator (see the module docstring)."""

    def __init__(
        self,
        groups: dict[str, ConsumerGroupState],
        topics: Mapping[str, tuple[uuid.UUID, int]],
        timers: Timers,
        settings: ConsumerGroupSettings = ConsumerGroupSettings(),
    ) -> None:
        self._groups = groups  # shared with the log: survives a coordinator move
        self._topics = topics
        self._clock = timers
        self.settings = settings
        self._sessions: dict[tuple[str, str], Cancellable] = {}
        self._revocations: dict[tuple[str, str], Cancellable] = {}

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    def owns(self, group_id: str) -> bool:
        return group_id in self._groups

    # -- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Become the coordinator: every member's session starts afresh, and so does the
        rebalance timeout of a member that has partitions to revoke (as Kafka's onLoaded)."""
        for group in self._groups.values():
            for member in group.members.values():
                self._restart_session(group, member)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._start_revocation_timer(group, member)

    def unload(self) -> None:
        for handle in [*self._sessions.values(), *self._revocations.values()]:
            handle.cancel()
        self._sessions.clear()
        self._revocations.clear()

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------

    def heartbeat(self, req: cg.ConsumerGroupHeartbeatRequest) -> cg.ConsumerGroupHeartbeatResponse:
        def fail(code: E) -> cg.ConsumerGroupHeartbeatResponse:
            return cg.ConsumerGroupHeartbeatResponse(error_code=code)

        if not req.member_id:
            return fail(E.INVALID_REQUEST)
        group = self._groups.setdefault(req.group_id, ConsumerGroupState(req.group_id))
        member = group.members.get(req.member_id)
        if req.member_epoch < 0:  # leaving (-1), or a static member leaving for now (-2)
            if member is None:
                return fail(E.UNKNOWN_MEMBER_ID)
            self._remove(group, member)
            return cg.ConsumerGroupHeartbeatResponse(
                error_code=E.NONE, member_id=req.member_id, member_epoch=req.member_epoch
            )
        if req.member_epoch == 0:
            if req.subscribed_topic_names is None or req.rebalance_timeout_ms < 0:
                return fail(E.INVALID_REQUEST)
            if member is None:
                member = _Member(
                    req.member_id,
                    epoch=0,
                    previous_epoch=0,
                    subscribed=frozenset(req.subscribed_topic_names),
                    rebalance_timeout_ms=req.rebalance_timeout_ms,
                )
                group.members[req.member_id] = member
                self._bump(group)
        else:
            if member is None:
                return fail(E.UNKNOWN_MEMBER_ID)
            error = self._check_epoch(member, req)
            if error is not None:
                return fail(error)
        if req.subscribed_topic_names is not None:
            subscribed = frozenset(req.subscribed_topic_names)
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                self._bump(group)
        if req.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        self._restart_session(group, member)
        before = (member.epoch, member.assigned)
        if req.topic_partitions is not None:
            owned = frozenset((t.topic_id, p) for t in req.topic_partitions for p in t.partitions)
            if member.state is MemberState.UNREVOKED_PARTITIONS and not (
                owned & member.pending_revocation
            ):
                member.pending_revocation = frozenset()
                member.revoke_deadline_ms = None
                member.state = MemberState.STABLE
        self._reconcile(group, member)
        # Kafka sends the assignment to a joining member, in answer to a full request (one
        # that reports the owned partitions), and whenever it changed.
        changed = (
            req.member_epoch == 0
            or req.topic_partitions is not None
            or (member.epoch, member.assigned) != before
        )
        return cg.ConsumerGroupHeartbeatResponse(
            error_code=E.NONE,
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            assignment=_by_topic(member.assigned) if changed else None,
        )

    def _check_epoch(self, member: _Member, req: cg.ConsumerGroupHeartbeatRequest) -> E | None:
        if req.member_epoch == member.epoch:
            return None
        if req.member_epoch == member.previous_epoch and req.topic_partitions is not None:
            owned = frozenset((t.topic_id, p) for t in req.topic_partitions for p in t.partitions)
            if owned <= member.assigned | member.pending_revocation:
                return None  # the answer that moved it on was lost: it may go on
        return E.FENCED_MEMBER_EPOCH

    # -- the target assignment and each member's move to it --------------------------------------

    def _bump(self, group: ConsumerGroupState) -> None:
        """The members or their subscriptions changed: a new group epoch and target."""
        group.group_epoch += 1
        group.target = self._uniform(group)
        group.target_epoch = group.group_epoch

    def _uniform(self, group: ConsumerGroupState) -> dict[str, frozenset[TopicIdPartition]]:
        """Balanced and sticky: each member keeps what it had up to its share; the rest go,
        in order, to the members with the fewest (the uniform assignor's contract)."""
        members = sorted(group.members)
        if not members:
            return {}
        wanted: set[TopicIdPartition] = set()
        for member in group.members.values():
            for name in member.subscribed:
                if name in self._topics:
                    topic_id, count = self._topics[name]
                    wanted.update((topic_id, p) for p in range(count))
        quota, extra = divmod(len(wanted), len(members))
        target: dict[str, set[TopicIdPartition]] = {m: set() for m in members}
        taken: set[TopicIdPartition] = set()
        for i, member_id in enumerate(members):
            limit = quota + (1 if i < extra else 0)
            previous = sorted(group.target.get(member_id, frozenset()) & wanted)
            for tp in previous[:limit]:
                target[member_id].add(tp)
                taken.add(tp)
        for tp in sorted(wanted - taken):
            fewest = min(members, key=lambda m: (len(target[m]), m))
            target[fewest].add(tp)
        return {m: frozenset(ps) for m, ps in target.items()}

    def _reconcile(self, group: ConsumerGroupState, member: _Member) -> None:
        """Move ``member`` towards its target as far as it may now."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            return  # it must report the release first
        target = group.target.get(member.member_id, frozenset())
        revoke = member.assigned - target
        if revoke:
            member.assigned = member.assigned - revoke
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            self._start_revocation_timer(group, member)
            return
        held_elsewhere: set[TopicIdPartition] = set()
        for other in group.members.values():
            if other is not member:
                held_elsewhere |= other.assigned | other.pending_revocation
        free = (target - member.assigned) - held_elsewhere
        member.assigned = member.assigned | free
        if member.epoch != group.target_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.target_epoch
        unreleased = target - member.assigned
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    def _start_revocation_timer(self, group: ConsumerGroupState, member: _Member) -> None:
        key = (group.group_id, member.member_id)
        old = self._revocations.pop(key, None)
        if old is not None:
            old.cancel()
        member.revoke_deadline_ms = self._now_ms() + member.rebalance_timeout_ms
        self._revocations[key] = self._clock.call_at(
            member.revoke_deadline_ms / 1000,
            lambda: self._revocation_overdue(group.group_id, member.member_id),
        )

    def _revocation_overdue(self, group_id: str, member_id: str) -> None:
        self._revocations.pop((group_id, member_id), None)
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        deadline = member.revoke_deadline_ms
        overdue = deadline is not None and self._now_ms() >= deadline
        if member.state is MemberState.UNREVOKED_PARTITIONS and overdue:
            self._remove(group, member)  # fenced: its partitions are free at once

    # -- sessions and leaving ---------------------------------------------------------------

    def _restart_session(self, group: ConsumerGroupState, member: _Member) -> None:
        key = (group.group_id, member.member_id)
        old = self._sessions.pop(key, None)
        if old is not None:
            old.cancel()
        when = self._clock.now() + self.settings.session_timeout_ms / 1000
        self._sessions[key] = self._clock.call_at(
            when, lambda: self._session_expired(group.group_id, member.member_id)
        )

    def _session_expired(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is not None and member is not None:
            self._remove(group, member)

    def _remove(self, group: ConsumerGroupState, member: _Member) -> None:
        key = (group.group_id, member.member_id)
        for handle in (self._sessions.pop(key, None), self._revocations.pop(key, None)):
            if handle is not None:
                handle.cancel()
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        self._bump(group)

    # -- OffsetCommit ------------------------------------------------------------------------

    def validate_commit(self, req: msg.OffsetCommitRequest) -> E | None:
        group = self._groups[req.group_id]
        member = group.members.get(req.member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id == member.epoch:
            return None
        return E.STALE_MEMBER_EPOCH if req.generation_id < member.epoch else E.FENCED_MEMBER_EPOCH


    def validate_fetch(self, req: msg.OffsetFetchRequest) -> E | None:
        """A member's fetch (v9) must carry its current epoch; an admin's carries none."""
        if req.member_epoch < 0:
            return None
        member = self._groups[req.group_id].members.get(req.member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return None if req.member_epoch == member.epoch else E.STALE_MEMBER_EPOCH


def _by_topic(parts: frozenset[TopicIdPartition]) -> tuple[cg.TopicIdPartitions, ...]:
    topics: dict[uuid.UUID, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    return tuple(cg.TopicIdPartitions(t, tuple(sorted(ps))) for t, ps in sorted(topics.items()))
