"""A model of Kafka's classic groups: the JoinGroup/SyncGroup rebalance protocol, broker side.

Internal, no compatibility guarantee. :class:`ClassicGroupsModel` holds the classic groups of
one coordinator and answers JoinGroup (the two-step join of KIP-394, static members of
KIP-345 and KIP-814), SyncGroup, Heartbeat and LeaveGroup, expires members' sessions, and
validates the OffsetCommit of its groups, as a Kafka 4.3 broker does (``GroupMetadataManager``
and ``ClassicGroup``). Where Kafka 3.9 (the Scala ``GroupCoordinator``) answers differently,
a comment marked "3.9:" says how. :class:`~._group_coordinator.GroupCoordinatorModel` routes
requests to it, as it does KIP-848 groups to ``ConsumerGroupsModel``; both schedule through
the coordinator's :class:`KeyedTimers`.

Group states (as Kafka names them):
    Empty: no members (maybe pending ones that were told MEMBER_ID_REQUIRED).
    PreparingRebalance: the join phase; JoinGroup requests park until every member
        rejoined or the rebalance timeout removed the ones that did not.
    CompletingRebalance: a new generation; SyncGroup requests park until the leader's.
    Stable: the leader's assignment was stored and handed out.
    Dead: the group does not exist (only ever seen through the coordinator's ``describe``).

Where Kafka's choice depends on hash-map order of random member ids (which member
leads after the leader left, the order of members in the leader's JoinGroup
response), the model takes the member that joined first.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from ..._protocol import messages as msg
from ..._protocol.error_codes import ErrorCode as E
from ._group_log import GroupLog, GroupRecord, GroupTombstone, StoredMember
from ._timers import Cancellable, Timers

Respond = Callable[[msg.Response], None]

NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000  # group.classic... new member join timeout


@dataclass(frozen=True)
class BrokerSettings:
    """The broker settings the model obeys (Kafka keys: ``group.min.session.timeout.ms``...)."""

    group_min_session_timeout_ms: int = 500  # our test brokers run with 500 (Kafka: 6000)
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0  # our test brokers run with 0 (Kafka: 3000)
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000


class KeyedTimers:
    """The coordinator's timers, one per key as in Kafka's ``CoordinatorTimer``: scheduling
    under a key replaces the timer it had. The coordinator and its classic groups share one;
    ``after_each`` runs after every timer that fires (the coordinator re-plans its cleanup).
    """

    def __init__(self, clock: Timers, after_each: Callable[[], None]) -> None:
        self._clock = clock
        self._after_each = after_each
        self._timers: dict[str, tuple[object, Cancellable]] = {}

    def now_ms(self) -> int:
        return round(self._clock.now() * 1000)

    def schedule(self, key: str, delay_ms: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` after ``delay_ms``, replacing any timer under ``key``."""
        self.cancel(key)
        token = object()

        def run() -> None:
            entry = self._timers.get(key)
            if entry is not None and entry[0] is token:
                del self._timers[key]
                fn()
                self._after_each()

        when = self._clock.now() + delay_ms / 1000
        self._timers[key] = (token, self._clock.call_at(when, run))

    def cancel(self, key: str) -> None:
        entry = self._timers.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def cancel_all(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()


# -- the in-memory group ------------------------------------------------------------------------


class State(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(eq=False)
class _Member:
    member_id: str
    group_instance_id: str | None
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # in the member's order of preference
    assignment: bytes = b""
    join_respond: Respond | None = None  # a parked JoinGroup
    sync_respond: Respond | None = None  # a parked SyncGroup
    # Added by a JoinGroup and not yet through a join phase: expires even while it waits.
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        return next((md for name, md in self.protocols if name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        # Members waiting in a rebalance cannot heartbeat; their session timer is ignored.
        return not self.is_new and (self.join_respond is not None or self.sync_respond is not None)

    def answer_join(self, response: msg.JoinGroupResponse) -> None:
        if self.join_respond is not None:
            respond, self.join_respond = self.join_respond, None
            respond(response)

    def answer_sync(self, response: msg.SyncGroupResponse) -> bool:
        if self.sync_respond is None:
            return False
        respond, self.sync_respond = self.sync_respond, None
        respond(response)
        return True


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: State = State.EMPTY
    previous_state: State = State.EMPTY
    state_timestamp_ms: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)  # in order of joining
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, None] = field(default_factory=dict)  # told MEMBER_ID_REQUIRED
    pending_sync: set[str] = field(default_factory=set)  # in the generation, not yet synced
    new_member_added: bool = False  # extends the initial rebalance delay

    def transition(self, state: State, now_ms: int) -> None:
        self.previous_state, self.state, self.state_timestamp_ms = self.state, state, now_ms

    def awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_respond is not None)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join() == len(self.members) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in (State.STABLE, State.COMPLETING_REBALANCE, State.EMPTY)

    def candidate_protocols(self) -> set[str]:
        names = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is State.EMPTY:
            return bool(protocol_type) and bool(names)
        if not self.members:
            # Every member left mid-rebalance: each protocol is supported by all 0 of them.
            return self.protocol_type == protocol_type and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Kafka takes the first protocol with the most votes in java.util.HashMap order.
        return max(_java_hash_map_order(votes), key=lambda name: votes[name])

    def validate_member(self, member_id: str, group_instance_id: str | None) -> E | None:
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
        return None if member_id in self.members else E.UNKNOWN_MEMBER_ID

    def add(self, member: _Member) -> None:
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        removed = self.members.pop(member_id, None)
        if removed is not None and removed.group_instance_id is not None:
            self.static_members.pop(removed.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else take a member that did; False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].join_respond is not None:
            return True
        joined = next((m for m in self.members.values() if m.join_respond is not None), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    def member_list(self) -> tuple[msg.JoinGroupResponseMember, ...]:
        return tuple(
            msg.JoinGroupResponseMember(
                m.member_id, m.group_instance_id, m.metadata(self.protocol_name)
            )
            for m in self.members.values()
        )

    def record(self, now_ms: int, assignment: dict[str, bytes] | None = None) -> GroupRecord:
        members = tuple(
            StoredMember(
                m.member_id,
                m.group_instance_id,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(self.protocol_name),
                m.assignment if assignment is None else assignment.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        return GroupRecord(
            self.group_id,
            self.protocol_type,
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp_ms,
            members,
        )


def _java_hash_map_order(keys: Iterable[str]) -> list[str]:
    """``keys`` (in insertion order) in the iteration order of a java.util.HashMap holding them."""
    keys = list(keys)
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = 0
        data = key.encode("utf-16-be")
        for i in range(0, len(data), 2):  # String.hashCode over UTF-16 code units
            h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # stable: a bucket keeps insertion order


# -- the classic groups of one coordinator -----------------------------------------------------


class ClassicGroupsModel:
    """The classic groups of one coordinator (see the module docstring).

    Example:
        classic = ClassicGroupsModel(log, KeyedTimers(clock, after_each=plan), BrokerSettings())
        classic.load(log.group_ids())
        classic.join(join_request, responses.append, None)   # parks until the join phase ends

    The request handlers take ``unavailable``, the coordinator's NOT_COORDINATOR or
    COORDINATOR_LOAD_IN_PROGRESS (None once loaded): Kafka checks some fields of a request
    before it, and a Heartbeat while it loads is answered blindly.
    """

    def __init__(self, log: GroupLog, timers: KeyedTimers, settings: BrokerSettings) -> None:
        self._log = log
        self._timers = timers
        self.settings = settings
        self.groups: dict[str, ClassicGroup] = {}  # in order of creation

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    # -- lifecycle ---------------------------------------------------------------------------

    def load(self, group_ids: Iterable[str]) -> None:
        """Rebuild ``group_ids`` from the log, as Kafka does after a move: each group in its
        stored generation, Stable (or Empty), its members' sessions started afresh, no
        rebalance under way."""
        for group_id in group_ids:
            record = self._log.group(group_id)
            group = ClassicGroup(group_id)
            self.groups[group_id] = group
            if record is None:  # offsets committed without group management
                continue
            group.protocol_type = record.protocol_type or None
            group.generation_id = record.generation_id
            group.protocol_name = record.protocol_name
            for stored in record.members:
                # Only the chosen protocol is stored, so a rejoin with several looks changed.
                group.add(
                    _Member(
                        stored.member_id,
                        stored.group_instance_id,
                        stored.rebalance_timeout_ms,
                        stored.session_timeout_ms,
                        record.protocol_type or "",
                        ((record.protocol_name or "", stored.subscription),),
                        stored.assignment,
                    )
                )
            group.leader_id = record.leader_id
            group.state = State.STABLE if group.members else State.EMPTY
            group.state_timestamp_ms = record.state_timestamp_ms
            for member in group.members.values():
                self._restart_session(group, member)
            if len(group.members) > self.settings.group_max_size:
                self._prepare_rebalance(group)

    def unload(self) -> None:
        """Forget every group; parked requests get NOT_COORDINATOR (the coordinator cancels
        the timers)."""
        groups, self.groups = self.groups, {}
        for group in groups.values():
            for member in group.members.values():
                member.answer_join(
                    msg.JoinGroupResponse(E.NOT_COORDINATOR, member_id=member.member_id)
                )
                member.answer_sync(msg.SyncGroupResponse(E.NOT_COORDINATOR))

    def delete(self, group_id: str) -> None:
        """Drop the group and its timers, with a tombstone if its metadata was written."""
        group = self.groups.pop(group_id)
        for member_id in [*group.pending_members, *group.members]:
            self._timers.cancel(_heartbeat_key(group_id, member_id))
        for key in (_join_key(group_id), _sync_key(group_id)):
            self._timers.cancel(key)
        if self._log.group(group_id) is not None:
            self._log.append(GroupTombstone(group_id))

    # -- OffsetCommit ------------------------------------------------------------------------

    def validate_commit(self, req: msg.OffsetCommitRequest) -> E | None:
        """Why the commit is refused, or None; a valid commit keeps the member's session alive
        (and one without group management creates a "simple" group)."""
        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                # 3.9: ILLEGAL_GENERATION (OffsetCommit v9 on 4.x answers GROUP_ID_NOT_FOUND).
                return E.GROUP_ID_NOT_FOUND
            # A commit without group management creates a "simple" group.
            group = self.groups[req.group_id] = ClassicGroup(req.group_id)
            group.state_timestamp_ms = self._timers.now_ms()
        error = self._check_commit(group, req)
        if error is not None:
            return error
        if group.state in (State.STABLE, State.PREPARING_REBALANCE):
            # A commit keeps the session alive, like a heartbeat.
            self._restart_session(group, group.members[req.member_id])
        return None

    @staticmethod
    def _check_commit(group: ClassicGroup, req: msg.OffsetCommitRequest) -> E | None:
        if req.generation_id < 0 and group.state is State.EMPTY:
            return None  # the admin client, or a consumer without group management
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is not None:
                return error
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif group.state is not State.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if group.state is State.COMPLETING_REBALANCE:
            # The member has its JoinGroup response but not its assignment yet.
            return E.REBALANCE_IN_PROGRESS
        return None

    # JoinGroup ------------------------------------------------------------------------------

    def join(self, req: msg.JoinGroupRequest, respond: Respond, unavailable: E | None) -> None:
        def fail(code: E, member_id: str = req.member_id) -> None:
            respond(msg.JoinGroupResponse(code, member_id=member_id))

        s = self.settings
        # 3.9: checks the coordinator first, then the session timeout.
        if not req.group_id:
            return fail(E.INVALID_GROUP_ID)
        if (
            not s.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= s.group_max_session_timeout_ms
        ):
            return fail(E.INVALID_SESSION_TIMEOUT)
        if unavailable is not None:
            return fail(unavailable, "")
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:  # only a member without an id creates the group
                return fail(E.UNKNOWN_MEMBER_ID)
            group = self.groups[req.group_id] = ClassicGroup(req.group_id)
            group.state_timestamp_ms = self._timers.now_ms()
            # The new group is written at once, so it survives a coordinator move.
            # 3.9: keeps it in memory only, until a generation is stored.
            self._log.append(
                GroupRecord(group.group_id, None, 0, None, None, self._timers.now_ms(), ())
            )
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            fail(E.GROUP_MAX_SIZE_REACHED, "")
        elif not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            fail(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        elif not req.member_id:
            self._join_new_member(group, req, respond)
        else:
            self._join_existing_member(group, req, respond)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        member = group.members.get(member_id)
        if group.state is State.PREPARING_REBALANCE:
            # Counting members that rejoined lets the last ones over the limit be turned away.
            awaiting = member is not None and member.join_respond is not None
            return awaiting or group.awaiting_join() < self.settings.group_max_size
        if group.state is State.EMPTY:
            return True
        return member is not None or len(group.members) < self.settings.group_max_size

    def _join_new_member(
        self, group: ClassicGroup, req: msg.JoinGroupRequest, respond: Respond
    ) -> None:
        instance = req.group_instance_id
        member_id = f"{instance or 'member'}-{self._log.next_member_number()}"
        if instance is not None:
            old_member_id = group.static_members.get(instance)
            if old_member_id is None:
                self._add_member_and_rebalance(group, req, member_id, respond)
            else:
                self._replace_static_member(group, req, old_member_id, member_id, respond)
            return
        # KIP-394: a dynamic member must come back with the id; until then it is pending,
        # holds up the join phase, and expires after its session timeout.
        group.pending_members[member_id] = None
        self._expect_heartbeat(group, member_id, req.session_timeout_ms)
        respond(msg.JoinGroupResponse(E.MEMBER_ID_REQUIRED, member_id=member_id))

    def _join_existing_member(
        self, group: ClassicGroup, req: msg.JoinGroupRequest, respond: Respond
    ) -> None:
        if req.member_id in group.pending_members:
            if req.group_instance_id is not None:  # Kafka throws IllegalStateException
                respond(msg.JoinGroupResponse(E.UNKNOWN_SERVER_ERROR))
                return
            self._add_member_and_rebalance(group, req, req.member_id, respond)
            return
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            respond(msg.JoinGroupResponse(error, member_id=req.member_id))
            return
        member = group.members[req.member_id]
        unchanged = member.protocols == req.protocols
        is_leader = group.leader_id == member.member_id
        if group.state is State.PREPARING_REBALANCE or (
            group.state is State.COMPLETING_REBALANCE and not unchanged
        ):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.state is State.COMPLETING_REBALANCE:
            # The same join again (its response was lost): the current generation, again.
            respond(self._join_response(group, member, is_leader))
        elif group.state is State.STABLE:
            if is_leader or not unchanged:
                # A leader's rejoin is how it asks for a new assignment without a metadata change.
                self._update_member_and_rebalance(group, member, req, respond)
            else:
                respond(self._join_response(group, member, False))
        else:
            respond(msg.JoinGroupResponse(E.UNKNOWN_MEMBER_ID, member_id=req.member_id))

    def _join_response(
        self,
        group: ClassicGroup,
        member: _Member,
        with_members: bool,
        *,
        skip_assignment: bool = False,
    ) -> msg.JoinGroupResponse:
        return msg.JoinGroupResponse(
            E.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment,
            member_id=member.member_id,
            members=group.member_list() if with_members else (),
        )

    def _add_member_and_rebalance(
        self, group: ClassicGroup, req: msg.JoinGroupRequest, member_id: str, respond: Respond
    ) -> None:
        member = _Member(
            member_id,
            req.group_instance_id,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            req.protocols,
            join_respond=respond,
            is_new=True,
        )
        # 3.9: extends the initial delay while the generation is 0 instead.
        if group.state is State.PREPARING_REBALANCE and group.previous_state is State.EMPTY:
            group.new_member_added = True
        group.add(member)
        # A new member parked in JoinGroup cannot heartbeat; if its client gave up and
        # retries, this timeout clears the defunct entry.
        self._expect_heartbeat(group, member_id, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: _Member, req: msg.JoinGroupRequest, respond: Respond
    ) -> None:
        self._update_member(member, req, respond)
        self._maybe_prepare_rebalance_or_complete_join(group)

    @staticmethod
    def _update_member(member: _Member, req: msg.JoinGroupRequest, respond: Respond) -> None:
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.join_respond = respond  # an earlier parked JoinGroup is dropped, as in Kafka

    def _replace_static_member(
        self,
        group: ClassicGroup,
        req: msg.JoinGroupRequest,
        old_member_id: str,
        new_member_id: str,
        respond: Respond,
    ) -> None:
        """KIP-345: a known instance id without a member id takes over the old member's place."""
        old = group.members.pop(old_member_id)
        # Fence whatever the old member id still has parked.
        old.answer_join(msg.JoinGroupResponse(E.FENCED_INSTANCE_ID, member_id=old_member_id))
        old.answer_sync(msg.SyncGroupResponse(E.FENCED_INSTANCE_ID))
        member = _Member(
            new_member_id,
            old.group_instance_id,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        group.members[new_member_id] = member
        group.static_members[old.group_instance_id or ""] = new_member_id
        if group.leader_id == old_member_id:
            group.leader_id = new_member_id
        # The old id stays pending sync if it was: Kafka then rebalances when that expires.
        self._timers.cancel(_heartbeat_key(group.group_id, old_member_id))
        self._restart_session(group, member)  # with the old session timeout, as Kafka does
        self._update_member(member, req, respond)
        if group.state is State.STABLE and group.select_protocol() == group.protocol_name:
            # No rebalance: store the new member id and hand back the current generation.
            # KIP-814: a returning leader learns it leads but need not assign again.
            self._log.append(group.record(self._timers.now_ms()))
            leads = group.leader_id == new_member_id
            member.answer_join(self._join_response(group, member, leads, skip_assignment=leads))
        elif group.state is State.COMPLETING_REBALANCE:
            # The leader may have assigned to the old id: rebalance.
            self._prepare_rebalance(group)
        elif group.state is State.STABLE:  # the group's protocol would change
            self._maybe_prepare_rebalance_or_complete_join(group)
        else:
            self._maybe_complete_join_phase(group)

    # The join phase -----------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # The initial rebalance of an Empty group always waits for its delay timer.
        if (
            group.state is State.PREPARING_REBALANCE
            and group.previous_state is not State.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state is State.COMPLETING_REBALANCE:
            # Parked SyncGroups learn of the new rebalance; the assignment is void.
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self._timers.cancel(_sync_key(group.group_id))
        initial = group.state is State.EMPTY
        group.transition(State.PREPARING_REBALANCE, self._timers.now_ms())
        if initial:
            # Give more members time to join a new group.
            delay = self.settings.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_join(group, delay, remaining)
        elif group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._timers.schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(group),
            )

    def _schedule_initial_join(self, group: ClassicGroup, delay: int, remaining: int) -> None:
        def expire() -> None:
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                new_delay = min(self.settings.group_initial_rebalance_delay_ms, remaining)
                self._schedule_initial_join(group, new_delay, max(remaining - delay, 0))
            else:
                self._complete_join(group)

        self._timers.schedule(_join_key(group.group_id), delay, expire)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start a generation."""
        self._timers.cancel(_join_key(group.group_id))
        for member in list(group.members.values()):
            # Static members stay: they are expected back under the same instance id.
            if member.join_respond is None and member.group_instance_id is None:
                group.remove(member.member_id)
                self._timers.cancel(_heartbeat_key(group.group_id, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout (sessions will empty the group).
            self._timers.schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(group),
            )
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition(State.EMPTY, self._timers.now_ms())
            self._log.append(group.record(self._timers.now_ms(), {}))
            return
        group.protocol_name = group.select_protocol()
        group.transition(State.COMPLETING_REBALANCE, self._timers.now_ms())
        for member in list(group.members.values()):
            member.answer_join(
                self._join_response(group, member, member.member_id == group.leader_id)
            )
            self._restart_session(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        # KAFKA-12890: members that never send SyncGroup are removed after the rebalance timeout.
        generation = group.generation_id
        self._timers.schedule(
            _sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group, generation),
        )

    def _expire_pending_sync(self, group: ClassicGroup, generation: int) -> None:
        if generation != group.generation_id or not group.pending_sync:
            return
        if group.state not in (State.COMPLETING_REBALANCE, State.STABLE):
            return
        for member_id in list(group.pending_sync):
            group.remove(member_id)
            self._timers.cancel(_heartbeat_key(group.group_id, member_id))
        self._prepare_rebalance(group)

    # SyncGroup ----------------------------------------------------------------------------

    def sync(self, req: msg.SyncGroupRequest, respond: Respond, unavailable: E | None) -> None:
        def fail(code: E) -> None:
            respond(msg.SyncGroupResponse(code))

        if req.protocol_type is None or req.protocol_name is None:
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)  # mandatory from SyncGroup v5
        if not req.group_id:
            return fail(E.INVALID_GROUP_ID)
        if unavailable is not None:
            # 3.9: REBALANCE_IN_PROGRESS while loading (old clients do not retry the other).
            return fail(unavailable)
        group = self.groups.get(req.group_id)
        if group is None or group.state is State.EMPTY:
            return fail(E.UNKNOWN_MEMBER_ID)
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is None and req.generation_id != group.generation_id:
            error = E.ILLEGAL_GENERATION
        if error is None and (
            _differs(req.protocol_type, group.protocol_type)
            or _differs(req.protocol_name, group.protocol_name)
        ):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return fail(error)
        if group.state is State.PREPARING_REBALANCE:
            return fail(E.REBALANCE_IN_PROGRESS)
        member = group.members[req.member_id]
        self._remove_pending_sync(group, member.member_id)
        if group.state is State.STABLE:
            # 3.9: also restarts the member's session timer.
            respond(
                msg.SyncGroupResponse(
                    E.NONE, group.protocol_type, group.protocol_name, member.assignment
                )
            )
            return
        member.sync_respond = respond  # an earlier parked SyncGroup is dropped, as in Kafka
        if member.member_id != group.leader_id:
            return  # parks until the leader's SyncGroup
        assignment = dict(req.assignments)
        for m in group.members.values():
            m.assignment = assignment.get(m.member_id, b"")
        self._log.append(group.record(self._timers.now_ms()))
        self._propagate_assignment(group, E.NONE)
        group.transition(State.STABLE, self._timers.now_ms())

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._timers.cancel(_sync_key(group.group_id))

    def _propagate_assignment(self, group: ClassicGroup, error: E) -> None:
        ok = error is E.NONE
        for member in list(group.members.values()):
            response = msg.SyncGroupResponse(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment,
            )
            if member.answer_sync(response):
                # Its session timer may have run out, ignored, while it waited.
                self._restart_session(group, member)

    # Heartbeat, LeaveGroup ------------------------------------------------------------------

    def heartbeat(self, req: msg.HeartbeatRequest, unavailable: E | None) -> E:
        if not req.group_id:
            return E.INVALID_GROUP_ID
        if unavailable is E.COORDINATOR_LOAD_IN_PROGRESS:
            return E.NONE  # Kafka answers blindly while it loads the group
        if unavailable is not None:
            return unavailable
        group = self.groups.get(req.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            return error
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._restart_session(group, group.members[req.member_id])
        if group.state is State.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        # CompletingRebalance: members may heartbeat between their JoinGroup and SyncGroup.
        return E.NONE

    def leave(self, req: msg.LeaveGroupRequest, unavailable: E | None) -> msg.LeaveGroupResponse:
        if not req.group_id:
            return msg.LeaveGroupResponse(E.INVALID_GROUP_ID, E.INVALID_GROUP_ID)
        if unavailable is not None:
            return msg.LeaveGroupResponse(unavailable, unavailable)
        group = self.groups.get(req.group_id)
        if group is None:
            return msg.LeaveGroupResponse(E.NONE, E.UNKNOWN_MEMBER_ID)
        error: E | None = None
        if not req.member_id:
            # An admin removal of a static member by its instance id.
            member_id = group.static_members.get(req.group_instance_id or "")
            if req.group_instance_id is None or member_id is None:
                error = E.UNKNOWN_MEMBER_ID
            else:
                self._remove_leaving_member(group, member_id)
        elif req.member_id in group.pending_members:
            group.remove(req.member_id)
            self._timers.cancel(_heartbeat_key(group.group_id, req.member_id))
        else:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is None:
                self._remove_leaving_member(group, req.member_id)
        if error is not None:
            return msg.LeaveGroupResponse(E.NONE, error)
        # Any leave, even a pending member's, rebalances a Stable or CompletingRebalance group.
        # 3.9: a pending member's leave does not.
        if group.state in (State.STABLE, State.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is State.PREPARING_REBALANCE:
            self._maybe_complete_join_phase(group)
        return msg.LeaveGroupResponse(E.NONE, E.NONE)

    def _remove_leaving_member(self, group: ClassicGroup, member_id: str) -> None:
        self._timers.cancel(_heartbeat_key(group.group_id, member_id))
        group.members[member_id].answer_join(msg.JoinGroupResponse(E.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # Sessions -------------------------------------------------------------------------------

    def _restart_session(self, group: ClassicGroup, member: _Member) -> None:
        self._expect_heartbeat(group, member.member_id, member.session_timeout_ms)

    def _expect_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        """(Re)start the session timer of ``member_id`` (or of a pending member)."""
        group_id = group.group_id
        expire = lambda: self._expire_heartbeat(group_id, member_id)  # noqa: E731
        self._timers.schedule(_heartbeat_key(group_id, member_id), timeout_ms, expire)

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if member_id in group.pending_members:
            group.remove(member_id)
            self._maybe_complete_join_after_removal(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        member.answer_join(msg.JoinGroupResponse(E.UNKNOWN_MEMBER_ID))  # a new member's
        group.remove(member_id)
        if group.state in (State.STABLE, State.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        else:
            self._maybe_complete_join_after_removal(group)

    def _maybe_complete_join_after_removal(self, group: ClassicGroup) -> None:
        # Unlike a join, a removal completes even the initial rebalance.
        if group.state is State.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(group)


def _heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def _join_key(group_id: str) -> str:
    return f"join-{group_id}"


def _sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def _differs(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
