"""A model of Kafka's classic group coordinator: the broker side of the simulator.

Internal, no compatibility guarantee. :class:`GroupCoordinatorModel` answers
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch and
DescribeGroups for classic groups as a Kafka 4.3 broker does (``GroupMetadataManager`` and
``ClassicGroup``), on a simulated clock, single-threaded and deterministic.
Where Kafka 3.9 (the Scala ``GroupCoordinator``) answers differently, a comment
marked "3.9:" says how. ``tests/integration/test_model_vs_broker.py`` replays
scenarios against real 4.3 and 3.9 brokers to keep the model honest.

Group states (as Kafka names them):
    Empty: no members (maybe pending ones that were told MEMBER_ID_REQUIRED).
    PreparingRebalance: the join phase; JoinGroup requests park until every member
        rejoined or the rebalance timeout removed the ones that did not.
    CompletingRebalance: a new generation; SyncGroup requests park until the leader's.
    Stable: the leader's assignment was stored and handed out.
    Dead: the group does not exist (only ever seen through :meth:`describe`).

Where Kafka's choice depends on hash-map order of random member ids (which member
leads after the leader left, the order of members in the leader's JoinGroup
response), the model takes the member that joined first.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

from ..._protocol import consumer_group as cg
from ..._protocol import messages as msg
from ..._protocol.error_codes import ErrorCode as E
from ._consumer_group_coordinator import ConsumerGroupsModel, ConsumerGroupState

Respond = Callable[[msg.Response], None]

# Kafka's fixed limits that have no broker setting here.
NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000  # group.classic... new member join timeout
OFFSET_METADATA_MAX_BYTES: Final = 4096  # offset.metadata.max.bytes default


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """The simulated clock: seconds, and callbacks run by the scheduler at a given time."""

    def now(self) -> float: ...

    def call_at(self, when: float, fn: Callable[[], None]) -> Cancellable: ...


@dataclass(frozen=True)
class BrokerSettings:
    """The broker settings the model obeys (Kafka keys: ``group.min.session.timeout.ms``...)."""

    group_min_session_timeout_ms: int = 500  # our test brokers run with 500 (Kafka: 6000)
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0  # our test brokers run with 0 (Kafka: 3000)
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000


# -- what the coordinator persists ---------------------------------------------------------


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


# -- read-only views for invariant checks -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str  # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberView, ...]
    pending_member_ids: tuple[str, ...] = ()


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
class _Group:
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


# -- the coordinator --------------------------------------------------------------------------


class GroupCoordinatorModel:
    """One broker's group coordinator, for the groups it coordinates (all of them, once loaded).

    Example:
        model = GroupCoordinatorModel(node_id=1, log=GroupLog(), timers=clock)
        model.load()
        model.handle(join_request, responses.append)   # parks until the join phase ends

    ``handle`` calls ``respond`` exactly once, at once or later from a timer or another
    request, with two exceptions Kafka shares: a member's second JoinGroup (or SyncGroup)
    while its first is parked replaces the first, which is never answered; and a member
    removed by LeaveGroup while its SyncGroup is parked gets no answer. Clients time
    these out. :meth:`unload` answers every parked request with NOT_COORDINATOR.
    ``respond`` may be called from inside ``handle`` or a timer: it must not call back into
    the model at once (the simulated network delivers answers later).
    """

    def __init__(
        self,
        node_id: int,
        log: GroupLog,
        timers: Timers,
        settings: BrokerSettings = BrokerSettings(),
    ) -> None:
        self.node_id = node_id
        self.log = log
        self.settings = settings
        self._clock = timers
        self._groups: dict[str, _Group] = {}
        self._timers: dict[str, tuple[object, Cancellable]] = {}
        self._loaded = False
        self._loading = False
        self._loaded_at_ms = 0
        self._cleanup_at_ms: int | None = None
        self._consumer_groups = ConsumerGroupsModel(log.consumer_groups, log.topics, timers)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def is_coordinator(self) -> bool:
        return self._loaded

    def load(self, load_time_s: float = 0.0) -> None:
        """Become the coordinator: answer COORDINATOR_LOAD_IN_PROGRESS for ``load_time_s``,
        then rebuild the groups from the log, as Kafka does after a move: each group in its
        stored generation, Stable (or Empty), its members' sessions started afresh, no
        rebalance under way. A model that is already loaded is unloaded first."""
        if self._loaded:
            self.unload()
        self._loaded = self._loading = True
        if load_time_s > 0:
            self._schedule("load", load_time_s * 1000, self._finish_load)
        else:
            self._finish_load()

    def _finish_load(self) -> None:
        self._loading = False
        self._consumer_groups.load()
        for group_id in self.log.group_ids():
            if self._consumer_groups.owns(group_id):
                continue  # a KIP-848 group: the consumer group model has it
            record = self.log.group(group_id)
            group = _Group(group_id)
            self._groups[group_id] = group
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
        self._loaded_at_ms = self._now_ms()
        self._plan_cleanup()

    def unload(self) -> None:
        """Stop being the coordinator: parked requests get NOT_COORDINATOR, state is forgotten."""
        groups, self._groups = self._groups, {}
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._cleanup_at_ms = None
        self._loaded = self._loading = False
        self._consumer_groups.unload()
        for group in groups.values():
            for member in group.members.values():
                member.answer_join(
                    msg.JoinGroupResponse(E.NOT_COORDINATOR, member_id=member.member_id)
                )
                member.answer_sync(msg.SyncGroupResponse(E.NOT_COORDINATOR))

    # -- admin and inspection -----------------------------------------------------------------

    def delete_group(self, group_id: str) -> int:
        """Like DeleteGroups: drop an Empty group's offsets and metadata (with tombstones)."""
        if not self._loaded:
            return E.NOT_COORDINATOR
        if self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        group = self._groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.state is not State.EMPTY:
            return E.NON_EMPTY_GROUP
        for topic, partition in self.log.offsets(group_id):
            self.log.append(OffsetTombstone(group_id, topic, partition))
        self._drop_group(group)
        return E.NONE

    def describe(self, group_id: str) -> GroupView:
        group = self._groups.get(group_id)
        if group is None:
            return GroupView(group_id, "Dead", 0, None, None, None, ())
        members = tuple(
            MemberView(m.member_id, m.group_instance_id, m.assignment)
            for m in group.members.values()
        )
        return GroupView(
            group_id,
            group.state.value,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id,
            members,
            tuple(group.pending_members),
        )

    def committed(self, group_id: str) -> dict[tuple[str, int], tuple[int, str | None]]:
        return {k: (r.offset, r.metadata) for k, r in self.log.offsets(group_id).items()}

    # -- requests ------------------------------------------------------------------------------

    def handle(self, request: msg.Request, respond: Respond) -> None:
        """Answer ``request`` through ``respond``, now or (JoinGroup, SyncGroup) later."""
        if isinstance(request, msg.JoinGroupRequest):
            self._join(request, respond)
        elif isinstance(request, msg.SyncGroupRequest):
            self._sync(request, respond)
        elif isinstance(request, msg.HeartbeatRequest):
            respond(msg.HeartbeatResponse(self._heartbeat(request)))
        elif isinstance(request, msg.LeaveGroupRequest):
            respond(self._leave(request))
        elif isinstance(request, msg.OffsetCommitRequest):
            respond(self._commit(request))
        elif isinstance(request, msg.OffsetFetchRequest):
            respond(self._fetch(request))
        elif isinstance(request, msg.DescribeGroupRequest):
            respond(self._described(request))
        elif isinstance(request, cg.ConsumerGroupHeartbeatRequest):
            unavailable = self._unavailable()
            if unavailable is not None:
                respond(cg.ConsumerGroupHeartbeatResponse(error_code=unavailable))
            else:
                respond(self._consumer_groups.heartbeat(request))
        else:
            raise TypeError(f"the group coordinator model does not answer {type(request).__name__}")
        self._plan_cleanup()

    def _unavailable(self) -> E | None:
        if not self._loaded:
            return E.NOT_COORDINATOR
        return E.COORDINATOR_LOAD_IN_PROGRESS if self._loading else None

    # JoinGroup ------------------------------------------------------------------------------

    def _join(self, req: msg.JoinGroupRequest, respond: Respond) -> None:
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
        unavailable = self._unavailable()
        if unavailable is not None:
            return fail(unavailable, "")
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:  # only a member without an id creates the group
                return fail(E.UNKNOWN_MEMBER_ID)
            group = self._groups[req.group_id] = _Group(req.group_id)
            group.state_timestamp_ms = self._now_ms()
            # The new group is written at once, so it survives a coordinator move.
            # 3.9: keeps it in memory only, until a generation is stored.
            self.log.append(GroupRecord(group.group_id, None, 0, None, None, self._now_ms(), ()))
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            fail(E.GROUP_MAX_SIZE_REACHED, "")
        elif not group.supports_protocols(req.protocol_type, {n for n, _ in req.protocols}):
            fail(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        elif not req.member_id:
            self._join_new_member(group, req, respond)
        else:
            self._join_existing_member(group, req, respond)

    def _accept_joining_member(self, group: _Group, member_id: str) -> bool:
        member = group.members.get(member_id)
        if group.state is State.PREPARING_REBALANCE:
            # Counting members that rejoined lets the last ones over the limit be turned away.
            awaiting = member is not None and member.join_respond is not None
            return awaiting or group.awaiting_join() < self.settings.group_max_size
        if group.state is State.EMPTY:
            return True
        return member is not None or len(group.members) < self.settings.group_max_size

    def _join_new_member(self, group: _Group, req: msg.JoinGroupRequest, respond: Respond) -> None:
        instance = req.group_instance_id
        member_id = f"{instance or 'member'}-{self.log.next_member_number()}"
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
        self, group: _Group, req: msg.JoinGroupRequest, respond: Respond
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
        self, group: _Group, member: _Member, with_members: bool, *, skip_assignment: bool = False
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
        self, group: _Group, req: msg.JoinGroupRequest, member_id: str, respond: Respond
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
        self, group: _Group, member: _Member, req: msg.JoinGroupRequest, respond: Respond
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
        group: _Group,
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
        self._cancel(_heartbeat_key(group.group_id, old_member_id))
        self._restart_session(group, member)  # with the old session timeout, as Kafka does
        self._update_member(member, req, respond)
        if group.state is State.STABLE and group.select_protocol() == group.protocol_name:
            # No rebalance: store the new member id and hand back the current generation.
            # KIP-814: a returning leader learns it leads but need not assign again.
            self.log.append(group.record(self._now_ms()))
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

    def _maybe_prepare_rebalance_or_complete_join(self, group: _Group) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: _Group) -> None:
        # The initial rebalance of an Empty group always waits for its delay timer.
        if (
            group.state is State.PREPARING_REBALANCE
            and group.previous_state is not State.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _prepare_rebalance(self, group: _Group) -> None:
        if group.state is State.COMPLETING_REBALANCE:
            # Parked SyncGroups learn of the new rebalance; the assignment is void.
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self._cancel(_sync_key(group.group_id))
        initial = group.state is State.EMPTY
        group.transition(State.PREPARING_REBALANCE, self._now_ms())
        if initial:
            # Give more members time to join a new group.
            delay = self.settings.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_join(group, delay, remaining)
        elif group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(group),
            )

    def _schedule_initial_join(self, group: _Group, delay: int, remaining: int) -> None:
        def expire() -> None:
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                new_delay = min(self.settings.group_initial_rebalance_delay_ms, remaining)
                self._schedule_initial_join(group, new_delay, max(remaining - delay, 0))
            else:
                self._complete_join(group)

        self._schedule(_join_key(group.group_id), delay, expire)

    def _complete_join(self, group: _Group) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start a generation."""
        self._cancel(_join_key(group.group_id))
        for member in list(group.members.values()):
            # Static members stay: they are expected back under the same instance id.
            if member.join_respond is None and member.group_instance_id is None:
                group.remove(member.member_id)
                self._cancel(_heartbeat_key(group.group_id, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout (sessions will empty the group).
            self._schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(group),
            )
            return
        group.generation_id += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.transition(State.EMPTY, self._now_ms())
            self.log.append(group.record(self._now_ms(), {}))
            return
        group.protocol_name = group.select_protocol()
        group.transition(State.COMPLETING_REBALANCE, self._now_ms())
        for member in list(group.members.values()):
            member.answer_join(
                self._join_response(group, member, member.member_id == group.leader_id)
            )
            self._restart_session(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        # KAFKA-12890: members that never send SyncGroup are removed after the rebalance timeout.
        generation = group.generation_id
        self._schedule(
            _sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group, generation),
        )

    def _expire_pending_sync(self, group: _Group, generation: int) -> None:
        if generation != group.generation_id or not group.pending_sync:
            return
        if group.state not in (State.COMPLETING_REBALANCE, State.STABLE):
            return
        for member_id in list(group.pending_sync):
            group.remove(member_id)
            self._cancel(_heartbeat_key(group.group_id, member_id))
        self._prepare_rebalance(group)

    # SyncGroup ----------------------------------------------------------------------------

    def _sync(self, req: msg.SyncGroupRequest, respond: Respond) -> None:
        def fail(code: E) -> None:
            respond(msg.SyncGroupResponse(code))

        if req.protocol_type is None or req.protocol_name is None:
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)  # mandatory from SyncGroup v5
        if not req.group_id:
            return fail(E.INVALID_GROUP_ID)
        unavailable = self._unavailable()
        if unavailable is not None:
            # 3.9: REBALANCE_IN_PROGRESS while loading (old clients do not retry the other).
            return fail(unavailable)
        group = self._groups.get(req.group_id)
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
        self.log.append(group.record(self._now_ms()))
        self._propagate_assignment(group, E.NONE)
        group.transition(State.STABLE, self._now_ms())

    def _remove_pending_sync(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(_sync_key(group.group_id))

    def _propagate_assignment(self, group: _Group, error: E) -> None:
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

    def _heartbeat(self, req: msg.HeartbeatRequest) -> E:
        if not req.group_id:
            return E.INVALID_GROUP_ID
        unavailable = self._unavailable()
        if unavailable is E.COORDINATOR_LOAD_IN_PROGRESS:
            return E.NONE  # Kafka answers blindly while it loads the group
        if unavailable is not None:
            return unavailable
        group = self._groups.get(req.group_id)
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

    def _leave(self, req: msg.LeaveGroupRequest) -> msg.LeaveGroupResponse:
        if not req.group_id:
            return msg.LeaveGroupResponse(E.INVALID_GROUP_ID, E.INVALID_GROUP_ID)
        unavailable = self._unavailable()
        if unavailable is not None:
            return msg.LeaveGroupResponse(unavailable, unavailable)
        group = self._groups.get(req.group_id)
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
            self._cancel(_heartbeat_key(group.group_id, req.member_id))
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

    def _remove_leaving_member(self, group: _Group, member_id: str) -> None:
        self._cancel(_heartbeat_key(group.group_id, member_id))
        group.members[member_id].answer_join(msg.JoinGroupResponse(E.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # Sessions -------------------------------------------------------------------------------

    def _restart_session(self, group: _Group, member: _Member) -> None:
        self._expect_heartbeat(group, member.member_id, member.session_timeout_ms)

    def _expect_heartbeat(self, group: _Group, member_id: str, timeout_ms: int) -> None:
        """(Re)start the session timer of ``member_id`` (or of a pending member)."""
        group_id = group.group_id
        expire = lambda: self._expire_heartbeat(group_id, member_id)  # noqa: E731
        self._schedule(_heartbeat_key(group_id, member_id), timeout_ms, expire)

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
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

    def _maybe_complete_join_after_removal(self, group: _Group) -> None:
        # Unlike a join, a removal completes even the initial rebalance.
        if group.state is State.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(group)

    # Offsets --------------------------------------------------------------------------------

    def _commit(self, req: msg.OffsetCommitRequest) -> msg.OffsetCommitResponse:
        def answer(code: E) -> msg.OffsetCommitResponse:
            topics = _by_topic((t, p) for t, p, _, _ in req.offsets)
            return msg.OffsetCommitResponse(tuple((t, p, int(code)) for t, p in topics))

        unavailable = self._unavailable()
        if unavailable is not None:
            return answer(unavailable)
        if self._consumer_groups.owns(req.group_id):
            epoch_error = self._consumer_groups.validate_commit(req)
            return answer(epoch_error) if epoch_error is not None else self._write_offsets(req)
        group = self._groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                # 3.9: ILLEGAL_GENERATION (OffsetCommit v9 on 4.x answers GROUP_ID_NOT_FOUND).
                return answer(E.GROUP_ID_NOT_FOUND)
            # A commit without group management creates a "simple" group.
            group = self._groups[req.group_id] = _Group(req.group_id)
            group.state_timestamp_ms = self._now_ms()
        error = self._validate_commit(group, req)
        if error is not None:
            return answer(error)
        if group.state in (State.STABLE, State.PREPARING_REBALANCE):
            # A commit keeps the session alive, like a heartbeat.
            self._restart_session(group, group.members[req.member_id])
        return self._write_offsets(req)

    def _write_offsets(self, req: msg.OffsetCommitRequest) -> msg.OffsetCommitResponse:
        results = []
        for topic, partition, offset, metadata in _sorted_offsets(req.offsets):
            if metadata is not None and len(metadata) > OFFSET_METADATA_MAX_BYTES:
                results.append((topic, partition, int(E.OFFSET_METADATA_TOO_LARGE)))
                continue
            record = OffsetRecord(
                req.group_id, topic, partition, offset, metadata or "", self._now_ms()
            )
            self.log.append(record)
            results.append((topic, partition, int(E.NONE)))
        return msg.OffsetCommitResponse(tuple(results))

    @staticmethod
    def _validate_commit(group: _Group, req: msg.OffsetCommitRequest) -> E | None:
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

    def _fetch(self, req: msg.OffsetFetchRequest) -> msg.OffsetFetchResponse:
        unavailable = self._unavailable()
        if unavailable is not None:
            return msg.OffsetFetchResponse(unavailable, ())
        # Offsets are answered whatever the group's state, even for an unknown group.
        known = req.group_id in self._groups or self._consumer_groups.owns(req.group_id)
        offsets = self.log.offsets(req.group_id) if known else {}
        partitions = []
        for topic, partition in _by_topic(req.partitions):
            found = offsets.get((topic, partition))
            if found is None:
                partitions.append((topic, partition, -1, "", int(E.NONE)))
            else:
                partitions.append((topic, partition, found.offset, found.metadata, int(E.NONE)))
        return msg.OffsetFetchResponse(E.NONE, tuple(partitions))

    # DescribeGroups -------------------------------------------------------------------------

    def _described(self, req: msg.DescribeGroupRequest) -> msg.DescribeGroupResponse:
        unavailable = self._unavailable()
        if unavailable is not None:
            return msg.DescribeGroupResponse(unavailable)
        group = self._groups.get(req.group_id)
        if group is None:
            return msg.DescribeGroupResponse(E.NONE, "Dead")  # no error below v6 (3.9 too)
        # Only a Stable group has a finished assignment: the members of any other state come
        # without their metadata, with the assignment they last had (3.9: without it too),
        # and the group without a protocol.
        stable = group.state is State.STABLE
        return msg.DescribeGroupResponse(
            E.NONE,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            tuple(
                msg.DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    "sim",
                    "/127.0.0.1",
                    m.metadata(group.protocol_name) if stable else b"",
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )

    # Expiry ---------------------------------------------------------------------------------
    #
    # Every offsets_retention_check_interval_ms after the load, Kafka expires the offsets of
    # Empty groups (retention counted from when the group became Empty, or from each commit
    # for offsets committed without group management), then deletes every Empty group left
    # without offsets, even one emptied a moment ago. Live groups keep their offsets (consumer
    # groups expire those of topics they no longer subscribe to; the model does not parse
    # subscriptions). The model sets its timer only for the next check that has work to do,
    # so an idle simulation is left with no timer.

    def _expiry_due_ms(self, group: _Group) -> int | None:
        """When the first of ``group``'s offsets expires (0 if it has none to wait for)."""
        offsets = self.log.offsets(group.group_id).values()
        if group.protocol_type is None:
            since = [r.commit_timestamp_ms for r in offsets]
        elif group.state is State.EMPTY:
            since = [group.state_timestamp_ms] if offsets else []
        else:
            return None
        if not since:
            return 0 if group.state is State.EMPTY else None
        return min(since) + self.settings.offsets_retention_ms

    def _plan_cleanup(self) -> None:
        if not self._loaded or self._loading:
            return
        due = [d for g in self._groups.values() if (d := self._expiry_due_ms(g)) is not None]
        if not due:
            self._cleanup_at_ms = None
            self._cancel("cleanup")
            return
        interval = self.settings.offsets_retention_check_interval_ms
        first = max(min(due), self._now_ms() + 1) - self._loaded_at_ms
        at = self._loaded_at_ms + max(1, -(-first // interval)) * interval
        if at != self._cleanup_at_ms:
            self._cleanup_at_ms = at
            self._schedule("cleanup", at - self._now_ms(), self._cleanup)

    def _cleanup(self) -> None:
        self._cleanup_at_ms = None
        now = self._now_ms()
        for group in list(self._groups.values()):
            all_expired = True
            for (topic, partition), record in self.log.offsets(group.group_id).items():
                if group.protocol_type is None:
                    since = record.commit_timestamp_ms
                elif group.state is State.EMPTY:
                    since = group.state_timestamp_ms
                else:
                    all_expired = False
                    break
                if now - since >= self.settings.offsets_retention_ms:
                    self.log.append(OffsetTombstone(group.group_id, topic, partition))
                else:
                    all_expired = False
            if all_expired and group.state is State.EMPTY:
                self._drop_group(group)

    def _drop_group(self, group: _Group) -> None:
        for member_id in [*group.pending_members, *group.members]:
            self._cancel(_heartbeat_key(group.group_id, member_id))
        for key in (_join_key(group.group_id), _sync_key(group.group_id)):
            self._cancel(key)
        del self._groups[group.group_id]
        if self.log.group(group.group_id) is not None:
            self.log.append(GroupTombstone(group.group_id))

    # Timers ---------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return round(self._clock.now() * 1000)

    def _schedule(self, key: str, delay_ms: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` after ``delay_ms``, replacing any timer under ``key`` (keyed, as in Kafka)."""
        self._cancel(key)
        token = object()

        def run() -> None:
            entry = self._timers.get(key)
            if entry is not None and entry[0] is token:
                del self._timers[key]
                fn()
                self._plan_cleanup()

        when = self._clock.now() + delay_ms / 1000
        self._timers[key] = (token, self._clock.call_at(when, run))

    def _cancel(self, key: str) -> None:
        entry = self._timers.pop(key, None)
        if entry is not None:
            entry[1].cancel()


def _heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def _join_key(group_id: str) -> str:
    return f"join-{group_id}"


def _sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def _differs(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Partitions grouped by topic in order of first appearance, as a response lists them."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return [(t, p) for t, ps in topics.items() for p in ps]


def _sorted_offsets(
    offsets: tuple[tuple[str, int, int, str | None], ...],
) -> list[tuple[str, int, int, str | None]]:
    order = {tp: i for i, tp in enumerate(_by_topic((t, p) for t, p, _, _ in offsets))}
    return sorted(offsets, key=lambda o: order[(o[0], o[1])])
