"""A model of Kafka's consumer group coordinator (KIP-848): the broker side of the simulator
for groups of the new protocol.

Internal, no compatibility guarantee. :class:`ConsumerGroupsModel` answers
ConsumerGroupHeartbeat, and validates OffsetCommit and OffsetFetch of those groups, as Kafka
4.3's ``GroupMetadataManager`` and ``CurrentAssignmentBuilder`` do
(``tests/integration/test_consumer_group_model_vs_broker.py`` compares its answers with a
real broker's):

- A member joins with epoch 0 and a member id of its own. A group is created at epoch 1;
  every change of its members or subscriptions bumps the *group epoch*, and the first
  heartbeat once ``assignment_interval_ms`` has passed since the last one computes a new
  *target assignment* (here the ``uniform`` assignor's contract: balanced, sticky; every
  member is given a share of every topic any member subscribes to, so the histories'
  members all subscribe alike). A member may subscribe by regular expression: the model
  matches it with whole topic names whenever a heartbeat comes, so a topic created later
  is a new group epoch at the next heartbeat. A member's rack (RackId) is kept, not used. A
  member that leaves is taken out of the
  target at once; its partitions go to the others with the next target.
- Each member moves to its target on its own. It first gives up what the target leaves out
  (``UNREVOKED_PARTITIONS``: its epoch stays, its assignment shrinks to what it keeps, and it
  must report the release); then it gets the new partitions that no other member still owns
  (``UNRELEASED_PARTITIONS`` while some are still held elsewhere), and the target's epoch.
  An answer carries the assignment when the assigned partitions changed, to a join, and
  to a full request (rebalance timeout, subscription and owned partitions all set).
- A request with an epoch other than the member's (or its previous one, while the owned
  partitions it reports are a subset of its assignment) is FENCED_MEMBER_EPOCH.
- Static members (an instance id): a second member with the instance id of one that is in
  is UNRELEASED_INSTANCE_ID; a leave of epoch -2 keeps the member, its partitions and its
  session, and a join with its instance id and a new member id takes them over at once
  (without a new group epoch); the old member id is FENCED_INSTANCE_ID from then on.
- A member with no heartbeat for ``session_timeout_ms``, or that keeps partitions to revoke
  past its rebalance timeout, is removed: its partitions become free at once.
- OffsetCommit: the member's current epoch is accepted; an older one only for partitions
  the member has held since that epoch or before (KIP-1251), else STALE_MEMBER_EPOCH, as is
  a newer one; an unknown member is UNKNOWN_MEMBER_ID; without a member (epoch -1) only
  while the group has no members.

The groups' state stands for what Kafka writes to ``__consumer_offsets`` before it answers:
it survives a coordinator move (:meth:`load` restarts every member's session, as Kafka
does), timers do not.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..._protocol import consumer_group as cg
from ..._protocol import messages as msg
from ..._protocol.error_codes import ErrorCode as E
from ._timers import Cancellable, Timers

TopicIdPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True)
class ConsumerGroupSettings:
    """Kafka's ``group.consumer.*`` broker settings the model obeys (the test brokers')."""

    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 500
    # group.consumer.assignment.interval.ms (KIP-1263, Kafka 4.3): the target assignment is
    # computed at most once per interval, by the first heartbeat after it.
    assignment_interval_ms: int = 1000


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
    # A subscription by regular expression (ConsumerGroupHeartbeat v1), matched here.
    regex: str | None = None
    rack_id: str | None = None  # the last RackId sent (null: unchanged)
    assigned: frozenset[TopicIdPartition] = frozenset()
    pending_revocation: frozenset[TopicIdPartition] = frozenset()
    revoke_deadline_ms: int | None = None
    instance_id: str | None = None
    # The epoch at which each partition it holds was assigned to it (KIP-1251).
    assigned_at: dict[TopicIdPartition, int] = field(default_factory=dict)


@dataclass
class ConsumerGroupState:
    """One group as Kafka persists it."""

    group_id: str
    # Kafka 4.3 creates a group at epoch 1, with an (empty) target of that epoch: the
    # first member's subscription makes it 2.
    group_epoch: int = 1
    target_epoch: int = 1
    # When the target was last computed (None: never).
    target_computed_ms: int | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, frozenset[TopicIdPartition]] = field(default_factory=dict)
    # The topics each of its members' regular expressions matched when last looked at.
    resolved: dict[str, frozenset[str]] = field(default_factory=dict)

    def static_member(self, instance_id: str) -> _Member | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


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

        if not _is_valid(req):
            return fail(E.INVALID_REQUEST)
        if req.member_epoch == cg.JOIN_EPOCH:
            group = self._groups.setdefault(req.group_id, ConsumerGroupState(req.group_id))
        elif req.group_id in self._groups:
            group = self._groups[req.group_id]
        else:
            return fail(E.GROUP_ID_NOT_FOUND)
        if req.member_epoch < 0:
            return self._leave(group, req)
        found = self._member_for(group, req)
        if isinstance(found, E):
            return fail(found)
        member = found
        if req.subscribed_topic_names is not None:
            subscribed = frozenset(req.subscribed_topic_names)
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                self._bump(group)
        if req.subscribed_topic_regex is not None and req.subscribed_topic_regex != member.regex:
            member.regex = req.subscribed_topic_regex or None  # "" drops the regex
            self._bump(group)
        self._resolve_regexes(group)
        if req.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        self._restart_session(group, member)
        self._maybe_compute_target(group)
        before = member.assigned
        if req.topic_partitions is not None:
            owned = frozenset((t.topic_id, p) for t in req.topic_partitions for p in t.partitions)
            if member.state is MemberState.UNREVOKED_PARTITIONS and not (
                owned & member.pending_revocation
            ):
                member.pending_revocation = frozenset()
                member.revoke_deadline_ms = None
                member.state = MemberState.STABLE
        self._reconcile(group, member)
        # Kafka sends the assignment to a joining member, in answer to a full request (every
        # field a member sends after an error: rebalance timeout, subscription and owned
        # partitions), and whenever the assigned partitions changed (not for an epoch alone).
        full = (
            req.rebalance_timeout_ms >= 0
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.topic_partitions is not None
        )
        changed = req.member_epoch == 0 or full or member.assigned != before
        return cg.ConsumerGroupHeartbeatResponse(
            error_code=E.NONE,
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            assignment=_by_topic(member.assigned) if changed else None,
        )

    def _member_for(
        self, group: ConsumerGroupState, req: cg.ConsumerGroupHeartbeatRequest
    ) -> _Member | E:
        """The member a heartbeat (epoch >= 0) is for, created by a join; or why none is."""
        joining = req.member_epoch == cg.JOIN_EPOCH
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None and not joining:
                return E.UNKNOWN_MEMBER_ID
        else:
            member = group.static_member(req.instance_id)
            if joining and member is not None:
                if member.epoch != cg.STATIC_LEAVE_EPOCH:
                    return E.UNRELEASED_INSTANCE_ID  # even for the holder's own rejoin
                return self._replace(group, member, req.member_id)
            if member is None and not joining:
                return E.UNKNOWN_MEMBER_ID
            if member is not None and member.member_id != req.member_id:
                return E.FENCED_INSTANCE_ID
        if member is None:
            # Subscribed to nothing yet: the join's subscription is a change (a new epoch).
            member = _Member(
                req.member_id,
                epoch=0,
                previous_epoch=0,
                subscribed=frozenset(),
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                instance_id=req.instance_id,
            )
            group.members[req.member_id] = member
            return member
        if joining:
            return member  # a member's rejoin: answered with its current state
        error = self._check_epoch(member, req)
        return member if error is None else error

    def _replace(self, group: ConsumerGroupState, old: _Member, member_id: str) -> _Member:
        """A static member back after its leave (epoch -2): a new member id takes over its
        assignment, its target and its subscription, without a new group epoch."""
        self._cancel_timers(group, old)
        del group.members[old.member_id]
        new = replace(old, member_id=member_id, epoch=0, previous_epoch=0)
        group.members[member_id] = new
        if old.member_id in group.target:
            group.target[member_id] = group.target.pop(old.member_id)
        return new

    def _leave(
        self, group: ConsumerGroupState, req: cg.ConsumerGroupHeartbeatRequest
    ) -> cg.ConsumerGroupHeartbeatResponse:
        def fail(code: E) -> cg.ConsumerGroupHeartbeatResponse:
            return cg.ConsumerGroupHeartbeatResponse(error_code=code)

        if req.instance_id is None:
            member = group.members.get(req.member_id)
        else:
            member = group.static_member(req.instance_id)
            if member is not None and member.member_id != req.member_id:
                return fail(E.FENCED_INSTANCE_ID)
        if member is None:
            return fail(E.UNKNOWN_MEMBER_ID)
        if req.member_epoch == cg.STATIC_LEAVE_EPOCH:
            # Gone for now: it keeps its partitions (no one else gets them) until its
            # session ends or a member with its instance id takes its place.
            member.epoch = cg.STATIC_LEAVE_EPOCH
            member.pending_revocation = frozenset()
            member.revoke_deadline_ms = None
            member.state = MemberState.STABLE
            handle = self._revocations.pop((group.group_id, member.member_id), None)
            if handle is not None:
                handle.cancel()
        else:
            self._remove(group, member)
        return cg.ConsumerGroupHeartbeatResponse(
            error_code=E.NONE, member_id=req.member_id, member_epoch=req.member_epoch
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
        """The members or their subscriptions changed: a new group epoch, whose target
        the next heartbeat computes once the assignment interval has passed."""
        group.group_epoch += 1

    def _resolve_regexes(self, group: ConsumerGroupState) -> None:
        """Match the members' regular expressions with the topics there are now: a topic
        created (or a regex changed) since the last look is a new group epoch. (Kafka
        resolves them apart from the heartbeats, at most every few seconds; a member sees
        the same thing later.) Whole names, as RE2J's ``matches``."""
        resolved: dict[str, frozenset[str]] = {}
        for regex in {m.regex for m in group.members.values() if m.regex is not None}:
            compiled = re.compile(regex)
            resolved[regex] = frozenset(t for t in self._topics if compiled.fullmatch(t))
        if resolved != group.resolved:
            # (A regex new to the group bumped it already, with its member's subscription.)
            if any(group.resolved.get(r, topics) != topics for r, topics in resolved.items()):
                self._bump(group)
            group.resolved = resolved

    def _maybe_compute_target(self, group: ConsumerGroupState) -> None:
        if group.target_epoch >= group.group_epoch:
            return
        last = group.target_computed_ms
        if last is not None and self._now_ms() < last + self.settings.assignment_interval_ms:
            return
        group.target = self._uniform(group)
        group.target_epoch = group.group_epoch
        group.target_computed_ms = self._now_ms()

    def _uniform(self, group: ConsumerGroupState) -> dict[str, frozenset[TopicIdPartition]]:
        """Balanced and sticky: each member keeps what it had up to its share; the rest go,
        in order, to the members with the fewest (the uniform assignor's contract)."""
        members = sorted(group.members)
        if not members:
            return {}
        wanted: set[TopicIdPartition] = set()
        for member in group.members.values():
            matched = group.resolved.get(member.regex, frozenset()) if member.regex else ()
            for name in [*member.subscribed, *matched]:
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
        member.assigned_at.update(dict.fromkeys(free, group.target_epoch))
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

    def _cancel_timers(self, group: ConsumerGroupState, member: _Member) -> None:
        key = (group.group_id, member.member_id)
        for handle in (self._sessions.pop(key, None), self._revocations.pop(key, None)):
            if handle is not None:
                handle.cancel()

    def _remove(self, group: ConsumerGroupState, member: _Member) -> None:
        self._cancel_timers(group, member)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        self._bump(group)

    # -- OffsetCommit ------------------------------------------------------------------------

    def validate_commit(self, req: msg.OffsetCommitRequest) -> E | None:
        group = self._groups[req.group_id]
        if req.generation_id < 0 and not group.members:
            return None  # an admin's (or a simple consumer's) commit to an empty group
        member = group.members.get(req.member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id == member.epoch:
            return None
        if req.generation_id > member.epoch:
            return E.STALE_MEMBER_EPOCH
        # An older epoch (KIP-1251): the answer that moved the member on may not have reached
        # it yet; every partition must be its own since that epoch or before. Kafka answers
        # this per partition; the model refuses the whole commit.
        held = member.assigned | member.pending_revocation
        for topic, partition, _, _ in req.offsets:
            topic_id = self._topics[topic][0] if topic in self._topics else None
            tp = (topic_id, partition)
            if topic_id is None or tp not in held or member.assigned_at[tp] > req.generation_id:
                return E.STALE_MEMBER_EPOCH
        return None

    def validate_fetch(self, req: msg.OffsetFetchRequest) -> E | None:
        """A member's fetch (v9) must carry its current epoch; an admin's carries none."""
        if req.member_epoch < 0:
            return None
        member = self._groups[req.group_id].members.get(req.member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return None if req.member_epoch == member.epoch else E.STALE_MEMBER_EPOCH


def _is_valid(req: cg.ConsumerGroupHeartbeatRequest) -> bool:
    """What Kafka 4.3 answers INVALID_REQUEST for (the member id is the member's own, v1)."""
    if not req.member_id or req.instance_id == "":
        return False
    if req.member_epoch == cg.JOIN_EPOCH:
        return (
            req.rebalance_timeout_ms >= 0
            and req.topic_partitions == ()  # a member joins owning nothing
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        )
    if req.member_epoch == cg.STATIC_LEAVE_EPOCH:
        return req.instance_id is not None
    return req.member_epoch > 0 or req.member_epoch == cg.LEAVE_EPOCH


def _by_topic(parts: frozenset[TopicIdPartition]) -> tuple[cg.TopicIdPartitions, ...]:
    topics: dict[uuid.UUID, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    return tuple(cg.TopicIdPartitions(t, tuple(sorted(ps))) for t, ps in sorted(topics.items()))
