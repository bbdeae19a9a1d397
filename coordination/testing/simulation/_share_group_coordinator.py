"""A model of Kafka's share groups (KIP-932) on the broker side: the broker side of the
simulator for share consumers.

Internal, no compatibility guarantee. :class:`ShareGroupsModel` is the cluster's share groups,
in two parts, as in Kafka 4.3:

- *The group coordinator's part* (``GroupMetadataManager``'s share groups): ShareGroupHeartbeat.
  A member joins with epoch 0 and its own member id; every change of the members bumps the
  group epoch, and the first heartbeat once :attr:`ShareSettings.assignment_interval_ms` has
  passed since the last computation computes the target assignment of that epoch (the
  ``simple`` assignor's contract: balanced over the members; a partition goes to several
  members only when there are more members than partitions). Until then a heartbeat gets the
  last target: a member that joined meanwhile has no partitions, at its epoch. A group's
  first join starts the initialization of its share-partitions, which are assigned once it
  ends (:attr:`ShareSettings.initialization_ms`). A member takes the target and its epoch
  with its next heartbeat: there is nothing to revoke. An answer carries the assignment to
  a join, to a full heartbeat (see :attr:`ShareSettings.assignment_to_full_heartbeat`) and
  when it changed. A heartbeat with
  an epoch other than the member's (or its previous one) is FENCED_MEMBER_EPOCH; an unknown
  member's is UNKNOWN_MEMBER_ID; a join with the id of a member still in the group is
  answered with its state; a member id over 36 characters, an epoch below -1 or a join
  without the subscription is INVALID_REQUEST. Compared with Kafka 4.3.1 answer by answer in
  ``tests/integration/test_share_model_vs_broker.py``. A member that leaves (epoch -1) or
  sends nothing for the session timeout is removed, and every leader releases what it holds.
- *The partition leaders' part* (``SharePartitionManager``, ``SharePartition``,
  ``ShareSessionCache``): ShareFetch and ShareAcknowledge. Per partition, each record is
  available, acquired (by one member, under a lock of ``record_lock_duration_ms``; its delivery
  count goes up by one), acknowledged (ACCEPT) or archived (REJECT, or released past the
  delivery count limit). RELEASE and a lock that runs out make it available again; RENEW
  restarts its lock. A partition's acknowledgements are applied all or none:
  INVALID_RECORD_STATE when one record is not acquired by this member. Share sessions are
  per member at each leader: epoch 0 opens one (INVALID_REQUEST if it carries
  acknowledgements), then each request carries the next epoch (INVALID_SHARE_SESSION_EPOCH
  otherwise, SHARE_SESSION_NOT_FOUND without a session), a ShareAcknowledge of epoch -1
  closes it and releases what the member holds in its partitions. A broker that does not
  lead a partition answers NOT_LEADER_OR_FOLLOWER for it. A fetch that finds nothing waits
  (up to ``max_wait_ms``) for records to arrive or to be released.

What survives a move stands for what Kafka persists: the groups (``__consumer_offsets``) and
each share-partition's record states and delivery counts (``__share_group_state``, written
before an acknowledgement is answered). Acquisitions are not persisted (KIP-932: "the
Acquired state is not recorded because it's transient"): when a partition's leader moves or
its broker stops, what was acquired there is available again with the delivery count it had
before, and the leader's share sessions are gone. Timers do not survive a coordinator move;
the coordinator's load restarts every member's session, as Kafka's does.

For the checkers, :attr:`SharePartitionState.applied` keeps every acknowledgement a leader
applied (member, type, the delivery it applied to), by offset; it is not Kafka state.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafka.record import MemoryRecordsBuilder

from ..._protocol import share_group as sg
from ..._protocol.consumer_group import TopicIdPartitions
from ..._protocol.error_codes import ErrorCode as E
from ._timers import Cancellable, Timers

Respond = Callable[[object], None]
A = sg.AcknowledgeType


@dataclass(frozen=True)
class ShareSettings:
    """The broker settings the model obeys (``group.share.*``), as the simulation sets them."""

    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    record_lock_duration_ms: int = 3000
    delivery_count_limit: int = 5
    # Whether a full heartbeat (one with the subscription: a member sends one after an error
    # or a timeout) gets the member's assignment, as a consumer group's does. Kafka 4.3.1 does
    # (tests/integration/test_share_model_vs_broker.py), to a heartbeat of the previous epoch
    # too; the older Kafka code read sent it only to a join (epoch 0) and when it changed: an
    # answer lost after it moved the member to a new assignment then left the member reading
    # its old partitions, and those it was given unread, until the group changed again (seed
    # 37 of the share histories, with this off).
    assignment_to_full_heartbeat: bool = True
    # How long after a group first subscribes its share-partitions can be assigned. Kafka
    # initializes a group's state for each partition at the share coordinator first, and
    # assigns only initialized partitions: on Kafka 4.3.1 the first member's join is answered
    # with epoch 2 and no partitions, and a heartbeat about a second later (the next target
    # assignment, at most one a second) with epoch 3 and the partitions.
    initialization_ms: int = 1000
    # group.share.assignment.interval.ms (Kafka 4.3): the target assignment is computed at
    # most once per interval, by the first heartbeat after it (0: at every change).
    assignment_interval_ms: int = 1000


class RecordState(enum.Enum):
    AVAILABLE = "available"
    ACKNOWLEDGED = "acknowledged"
    ARCHIVED = "archived"


@dataclass
class SharePartitionState:
    """One share-partition as Kafka persists it: each record's state and delivery count (a
    record not listed is available and was never delivered), and the start offset below which
    every record is done."""

    states: dict[int, tuple[RecordState, int]] = field(default_factory=dict)
    start: int = 0
    # Checker bookkeeping, not Kafka state: every acknowledgement applied, by offset, and
    # in the order applied (a checker reads the new ones from where it stopped).
    applied: dict[int, list[tuple[str, A, int]]] = field(default_factory=dict)
    applied_in_order: list[tuple[int, str, A]] = field(default_factory=list)

    def state(self, offset: int) -> tuple[RecordState, int]:
        return self.states.get(offset, (RecordState.AVAILABLE, 0))

    def write(self, offset: int, state: RecordState, count: int) -> None:
        self.states[offset] = (state, count)
        while self.state(self.start)[0] is not RecordState.AVAILABLE and self.start in self.states:
            self.start += 1


@dataclass
class Acquisition:
    """A record held by a member at the partition's leader (not persisted)."""

    member_id: str
    count: int  # the delivery count of this delivery
    deadline: float
    lock: int  # the lock (timer) it belongs to


@dataclass
class _Session:
    epoch: int  # the next request's
    partitions: set[int]


@dataclass
class _Leader:
    """What one broker, as leader, keeps in memory: lost when it stops or loses leadership."""

    acquired: dict[int, dict[int, Acquisition]] = field(default_factory=dict)  # by partition
    sessions: dict[str, _Session] = field(default_factory=dict)  # by member id
    parked: list[_ParkedFetch] = field(default_factory=list)
    locks: dict[int, Cancellable] = field(default_factory=dict)


@dataclass
class _ParkedFetch:
    member_id: str
    request: sg.ShareFetchRequest
    respond: Respond
    acknowledged: dict[int, int]
    deadline: float
    timer: Cancellable | None = None


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    previous_epoch: int
    assignment: frozenset[int] = frozenset()


@dataclass
class ShareGroupState:
    """One share group as Kafka persists it."""

    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, frozenset[int]] = field(default_factory=dict)
    target_epoch: int = 0
    target_computed_at: float | None = None  # the clock's time; None: never
    # Whether the share-partitions' state is initialized (assignable), or being initialized.
    initialized: bool = False
    initializing: bool = False


class ShareGroupsModel:
    """The share groups of a simulated cluster, on one topic (see the module docstring).

    ``end(partition, now)`` says how many records the partition holds at ``now`` (the topic
    grows with simulated time); ``next_record_at(partition, now)`` when the next one appears
    (None: no more).
    """

    def __init__(
        self,
        timers: Timers,
        *,
        topic_id: uuid.UUID,
        partitions: int,
        end: Callable[[int, float], int],
        next_record_at: Callable[[int, float], float | None],
        brokers: Iterable[int],
        settings: ShareSettings = ShareSettings(),
        topic_name: str | None = None,
    ) -> None:
        self._clock = timers
        self.settings = settings
        self.topic_id = topic_id
        # For DescribeShareGroupOffsets, which names topics (None: any name is the topic).
        self.topic_name = topic_name
        self.partitions = partitions
        self._end = end
        self._next_record_at = next_record_at
        self.groups: dict[str, ShareGroupState] = {}
        self.share_partitions = {p: SharePartitionState() for p in range(partitions)}
        nodes = sorted(brokers)
        self.leader_of: dict[int, int | None] = {
            p: nodes[p % len(nodes)] for p in range(partitions)
        }
        self._leaders: dict[int, _Leader] = {n: _Leader() for n in nodes}
        self._sessions: dict[tuple[str, str], Cancellable] = {}
        self._coordinator_loaded = False
        self._locks = 0
        # Checker bookkeeping, not Kafka state: how many times a leader made each delivery,
        # by (member id, partition, offset, delivery count). More than once: a leader that
        # stops or loses the partition forgets the records it had acquired, whose next
        # delivery then has the same count (only a release or an acknowledgement is written).
        self.deliveries: Counter[tuple[str, int, int, int]] = Counter()

    # -- the coordinator's lifecycle --------------------------------------------------------------

    def coordinator_loaded(self) -> None:
        """A broker became the groups' coordinator: every member's session starts afresh."""
        self._coordinator_loaded = True
        for group in self.groups.values():
            for member in group.members.values():
                self._restart_session(group, member)

    def coordinator_unloaded(self) -> None:
        self._coordinator_loaded = False
        for handle in self._sessions.values():
            handle.cancel()
        self._sessions.clear()

    # -- leadership -------------------------------------------------------------------------------

    def move_leader(self, partition: int, node_id: int | None) -> None:
        """The partition's leadership moves to ``node_id`` (None: no leader for now). The old
        leader forgets its acquisitions there; its sessions stay, but it answers
        NOT_LEADER_OR_FOLLOWER for the partition."""
        old = self.leader_of[partition]
        self.leader_of[partition] = node_id
        if old is not None:
            self._forget(old, {partition})

    def broker_stopped(self, node_id: int) -> None:
        """The broker's memory is gone: its sessions and acquisitions (parked fetches go with
        its connections)."""
        leader = self._leaders[node_id]
        for handle in leader.locks.values():
            handle.cancel()
        for parked in leader.parked:
            if parked.timer is not None:
                parked.timer.cancel()
        self._leaders[node_id] = _Leader()

    def _forget(self, node_id: int, partitions: set[int]) -> None:
        leader = self._leaders[node_id]
        for p in partitions:
            leader.acquired.pop(p, None)
        self._wake(node_id)

    # -- requests ---------------------------------------------------------------------------------

    @staticmethod
    def answers(request: object) -> bool:
        return isinstance(
            request,
            sg.ShareGroupHeartbeatRequest
            | sg.ShareFetchRequest
            | sg.ShareAcknowledgeRequest
            | sg.DescribeShareGroupOffsetsRequest,
        )

    def handle(
        self, node_id: int, request: object, respond: Respond, unavailable: E | None
    ) -> None:
        """Answer ``request`` that reached broker ``node_id`` (``unavailable``: why that broker
        cannot answer as the group coordinator, if it cannot)."""
        if isinstance(request, sg.ShareGroupHeartbeatRequest):
            if unavailable is not None:
                respond(sg.ShareGroupHeartbeatResponse(error_code=unavailable))
            else:
                respond(self._heartbeat(request))
        elif isinstance(request, sg.ShareFetchRequest):
            self._fetch(node_id, request, respond)
        elif isinstance(request, sg.ShareAcknowledgeRequest):
            respond(self._acknowledge(node_id, request))
        elif isinstance(request, sg.DescribeShareGroupOffsetsRequest):
            respond(self._describe_offsets(request, unavailable))
        else:
            raise TypeError(f"the share model does not answer {type(request).__name__}")

    # -- DescribeShareGroupOffsets ----------------------------------------------------------------

    def _describe_offsets(
        self, req: sg.DescribeShareGroupOffsetsRequest, unavailable: E | None
    ) -> sg.DescribeShareGroupOffsetsResponse:
        """Each share-partition's start offset and lag (v1): the records from the start to
        the partition's end not yet accepted, rejected or archived, acquired ones included."""
        now = self._clock.now()
        groups = []
        for asked in req.groups:
            if unavailable is not None or asked.group_id not in self.groups:
                code = unavailable if unavailable is not None else E.GROUP_ID_NOT_FOUND
                groups.append(sg.DescribedShareGroupOffsets(asked.group_id, error_code=code))
                continue
            topics = []
            for name, partitions in asked.topics or ():
                described = []
                for p in partitions:
                    if self.topic_name not in (None, name) or not 0 <= p < self.partitions:
                        code = E.UNKNOWN_TOPIC_OR_PARTITION
                        described.append(sg.SharePartitionOffset(p, -1, -1, -1, code))
                        continue
                    state = self.share_partitions[p]
                    end = self._end(p, now)
                    done = sum(
                        1
                        for offset, (kind, _) in state.states.items()
                        if state.start <= offset < end and kind is not RecordState.AVAILABLE
                    )
                    lag = max(0, end - state.start - done)
                    described.append(sg.SharePartitionOffset(p, state.start, 0, lag))
                topics.append(sg.ShareGroupOffsetsTopic(name, self.topic_id, tuple(described)))
            groups.append(sg.DescribedShareGroupOffsets(asked.group_id, tuple(topics)))
        return sg.DescribeShareGroupOffsetsResponse(tuple(groups))

    # -- ShareGroupHeartbeat ----------------------------------------------------------------------

    def _heartbeat(self, req: sg.ShareGroupHeartbeatRequest) -> sg.ShareGroupHeartbeatResponse:
        def fail(code: E) -> sg.ShareGroupHeartbeatResponse:
            return sg.ShareGroupHeartbeatResponse(error_code=code)

        # Kafka 4.3.1 refuses a member id longer than a UUID's text (36), an epoch below -1
        # and a join without the subscription.
        if not req.member_id or len(req.member_id) > 36 or req.member_epoch < sg.LEAVE_EPOCH:
            return fail(E.INVALID_REQUEST)
        if req.member_epoch == sg.JOIN_EPOCH and req.subscribed_topic_names is None:
            return fail(E.INVALID_REQUEST)
        if req.member_epoch == sg.JOIN_EPOCH:
            group = self.groups.setdefault(req.group_id, ShareGroupState(req.group_id))
        elif req.group_id in self.groups:
            group = self.groups[req.group_id]
        else:
            return fail(E.GROUP_ID_NOT_FOUND)
        member = group.members.get(req.member_id)
        if req.member_epoch == sg.LEAVE_EPOCH:
            if member is None:
                return fail(E.UNKNOWN_MEMBER_ID)
            self._remove(group, member)
            return sg.ShareGroupHeartbeatResponse(
                error_code=E.NONE, member_id=req.member_id, member_epoch=sg.LEAVE_EPOCH
            )
        joining = req.member_epoch == sg.JOIN_EPOCH
        if member is None:
            if not joining:
                return fail(E.UNKNOWN_MEMBER_ID)
            member = group.members[req.member_id] = ShareMember(req.member_id, 0, 0)
            self._bump(group)
            if not group.initialized and not group.initializing:
                self._initialize(group)
        elif not joining and req.member_epoch not in (member.epoch, member.previous_epoch):
            return fail(E.FENCED_MEMBER_EPOCH)
        self._restart_session(group, member)
        self._maybe_compute_target(group)
        before = member.assignment
        if member.epoch != group.target_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.target_epoch
            member.assignment = group.target.get(member.member_id, frozenset())
        full = self.settings.assignment_to_full_heartbeat and req.subscribed_topic_names is not None
        changed = joining or full or member.assignment != before
        return sg.ShareGroupHeartbeatResponse(
            error_code=E.NONE,
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            assignment=(
                (TopicIdPartitions(self.topic_id, tuple(sorted(member.assignment))),)
                if changed
                else None
            ),
        )

    def _bump(self, group: ShareGroupState) -> None:
        """The members or the assignable partitions changed: a new group epoch, whose target
        a heartbeat computes once the assignment interval has passed."""
        group.group_epoch += 1

    def _maybe_compute_target(self, group: ShareGroupState) -> None:
        if group.target_epoch >= group.group_epoch:
            return
        last, now = group.target_computed_at, self._clock.now()
        interval = self.settings.assignment_interval_ms / 1000
        if last is not None and now < last + interval:
            return
        assignable = self.partitions if group.initialized else 0
        group.target = simple_assignment(sorted(group.members), assignable)
        group.target_epoch = group.group_epoch
        group.target_computed_at = now

    def _initialize(self, group: ShareGroupState) -> None:
        """The group's first subscription: its share-partitions are initialized, then
        assigned (a bump for each step, as Kafka 4.3.1 bumps). Kafka keeps initializing across
        a coordinator move (it persists the pending initialization), so the timer runs on."""
        group.initializing = True
        self._bump(group)

        def done() -> None:
            group.initializing, group.initialized = False, True
            self._bump(group)

        self._clock.call_at(self._clock.now() + self.settings.initialization_ms / 1000, done)

    def _restart_session(self, group: ShareGroupState, member: ShareMember) -> None:
        key = (group.group_id, member.member_id)
        old = self._sessions.pop(key, None)
        if old is not None:
            old.cancel()
        if not self._coordinator_loaded:
            return
        when = self._clock.now() + self.settings.session_timeout_ms / 1000
        self._sessions[key] = self._clock.call_at(
            when, lambda: self._session_expired(group.group_id, member.member_id)
        )

    def _session_expired(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is not None and member is not None:
            self._remove(group, member)

    def _remove(self, group: ShareGroupState, member: ShareMember) -> None:
        handle = self._sessions.pop((group.group_id, member.member_id), None)
        if handle is not None:
            handle.cancel()
        del group.members[member.member_id]
        # Gone from the target too (Kafka writes its target's tombstone): a member that comes
        # back with its id before the next computation gets nothing until then.
        group.target.pop(member.member_id, None)
        self._bump(group)
        # The leaders hear of it (Kafka's share group listener) and release what it holds.
        for node_id in self._leaders:
            self._release_member(node_id, member.member_id, set(range(self.partitions)))

    # -- ShareFetch -------------------------------------------------------------------------------

    def _fetch(self, node_id: int, req: sg.ShareFetchRequest, respond: Respond) -> None:
        leader = self._leaders[node_id]
        member_id = req.member_id or ""
        named = {p.partition_index for t in req.topics for p in t.partitions}
        has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        if req.share_session_epoch == sg.OPEN_SESSION_EPOCH:
            if has_acks:
                respond(sg.ShareFetchResponse(error_code=E.INVALID_REQUEST))
                return
            leader.sessions[member_id] = _Session(1, set(named))
        elif req.share_session_epoch == sg.CLOSE_SESSION_EPOCH:
            respond(sg.ShareFetchResponse(error_code=E.INVALID_REQUEST))  # not used by clients
            return
        else:
            session = leader.sessions.get(member_id)
            if session is None:
                respond(sg.ShareFetchResponse(error_code=E.SHARE_SESSION_NOT_FOUND))
                return
            if session.epoch != req.share_session_epoch:
                respond(sg.ShareFetchResponse(error_code=E.INVALID_SHARE_SESSION_EPOCH))
                return
            session.epoch = _next_epoch(session.epoch)
            forgotten = {p for t in req.forgotten_topics_data for p in t.partitions}
            session.partitions = (session.partitions | named) - forgotten
        acknowledged = {
            p.partition_index: self._apply(
                node_id, member_id, p.partition_index, p.acknowledgement_batches
            )
            for t in req.topics
            for p in t.partitions
            if p.acknowledgement_batches
        }
        parked = _ParkedFetch(
            member_id, req, respond, acknowledged, self._clock.now() + req.max_wait_ms / 1000
        )
        if not self._try_answer(node_id, parked, final=req.max_wait_ms <= 0 or bool(acknowledged)):
            leader.parked.append(parked)
            self._schedule_parked(node_id, parked)

    def _schedule_parked(self, node_id: int, parked: _ParkedFetch) -> None:
        """Wake the parked fetch at its deadline, or when the next record of its partitions
        appears if sooner."""
        session = self._leaders[node_id].sessions.get(parked.member_id)
        now = self._clock.now()
        when = parked.deadline
        for p in session.partitions if session is not None else ():
            at = self._next_record_at(p, now)
            if at is not None:
                when = min(when, at)
        parked.timer = self._clock.call_at(when, lambda: self._retry(node_id, parked))

    def _retry(self, node_id: int, parked: _ParkedFetch) -> None:
        leader = self._leaders[node_id]
        if parked not in leader.parked:
            return
        final = self._clock.now() >= parked.deadline
        if self._try_answer(node_id, parked, final=final):
            leader.parked.remove(parked)
        else:
            self._schedule_parked(node_id, parked)

    def _wake(self, node_id: int) -> None:
        """Records may have become available at this leader: answer the fetches that waited."""
        leader = self._leaders[node_id]
        for parked in list(leader.parked):
            if self._try_answer(node_id, parked, final=False):
                leader.parked.remove(parked)
                if parked.timer is not None:
                    parked.timer.cancel()

    def _try_answer(self, node_id: int, parked: _ParkedFetch, *, final: bool) -> bool:
        """Acquire records for the parked fetch and answer it, if it got any or ``final``."""
        leader = self._leaders[node_id]
        session = leader.sessions.get(parked.member_id)
        partitions = sorted(session.partitions) if session is not None else []
        named = {p.partition_index for t in parked.request.topics for p in t.partitions}
        answers: list[sg.ShareFetchPartitionData] = []
        budget = parked.request.max_records
        got = moved = False
        for p in sorted(set(partitions) | named | set(parked.acknowledged)):
            ack_code = parked.acknowledged.get(p, E.NONE)
            if self.leader_of[p] != node_id:
                answers.append(
                    sg.ShareFetchPartitionData(
                        p, error_code=E.NOT_LEADER_OR_FOLLOWER, acknowledge_error_code=ack_code
                    )
                )
                moved = True
                continue
            offsets = self._acquire(node_id, parked.member_id, p, budget) if budget > 0 else []
            budget -= len(offsets)
            got = got or bool(offsets)
            if offsets or p in named or p in parked.acknowledged:
                answers.append(self._partition_data(node_id, p, offsets, ack_code))
        if not got and not final and not moved:
            return False
        parked.respond(
            sg.ShareFetchResponse(
                error_code=E.NONE,
                acquisition_lock_timeout_ms=self.settings.record_lock_duration_ms,
                responses=(sg.ShareFetchTopicResponse(self.topic_id, tuple(answers)),)
                if answers
                else (),
            )
        )
        return True

    def _acquire(self, node_id: int, member_id: str, p: int, budget: int) -> list[int]:
        state = self.share_partitions[p]
        acquired = self._leaders[node_id].acquired.setdefault(p, {})
        end = self._end(p, self._clock.now())
        offsets: list[int] = []
        offset = state.start
        while offset < end and len(offsets) < budget:
            if state.state(offset)[0] is RecordState.AVAILABLE and offset not in acquired:
                offsets.append(offset)
            offset += 1
        if not offsets:
            return offsets
        self._locks += 1
        lock = self._locks
        deadline = self._clock.now() + self.settings.record_lock_duration_ms / 1000
        for o in offsets:
            count = state.state(o)[1] + 1
            acquired[o] = Acquisition(member_id, count, deadline, lock)
            self.deliveries[member_id, p, o, count] += 1
        self._start_lock(node_id, lock, deadline)
        return offsets

    def _start_lock(self, node_id: int, lock: int, deadline: float) -> None:
        leader = self._leaders[node_id]
        leader.locks[lock] = self._clock.call_at(
            deadline, lambda: self._lock_expired(node_id, leader, lock)
        )

    def _lock_expired(self, node_id: int, leader: _Leader, lock: int) -> None:
        if self._leaders[node_id] is not leader:
            return  # the broker restarted since
        leader.locks.pop(lock, None)
        released = False
        for p, acquired in leader.acquired.items():
            for offset, held in list(acquired.items()):
                if held.lock == lock:
                    del acquired[offset]
                    self._make_available(p, offset, held.count)
                    released = True
        if released:
            self._wake(node_id)

    def _make_available(self, p: int, offset: int, count: int) -> None:
        """Released (RELEASE, lock expiry, a member gone): available, or archived once the
        record has been delivered as many times as the limit allows."""
        limit = self.settings.delivery_count_limit
        state = RecordState.ARCHIVED if count >= limit else RecordState.AVAILABLE
        self.share_partitions[p].write(offset, state, count)

    def _partition_data(
        self, node_id: int, p: int, offsets: list[int], ack_code: int
    ) -> sg.ShareFetchPartitionData:
        if not offsets:
            return sg.ShareFetchPartitionData(p, acknowledge_error_code=ack_code)
        acquired = self._leaders[node_id].acquired[p]
        runs: list[list[int]] = []
        for o in offsets:
            if runs and o == runs[-1][-1] + 1 and acquired[o].count == acquired[runs[-1][0]].count:
                runs[-1].append(o)
            else:
                runs.append([o])
        return sg.ShareFetchPartitionData(
            p,
            acknowledge_error_code=ack_code,
            records=_record_batches(p, offsets),
            acquired_records=tuple(
                sg.AcquiredRecords(run[0], run[-1], acquired[run[0]].count) for run in runs
            ),
        )

    # -- acknowledgements -------------------------------------------------------------------------

    def _acknowledge(
        self, node_id: int, req: sg.ShareAcknowledgeRequest
    ) -> sg.ShareAcknowledgeResponse:
        leader = self._leaders[node_id]
        member_id = req.member_id or ""
        session = leader.sessions.get(member_id)
        if req.share_session_epoch == sg.OPEN_SESSION_EPOCH:
            return sg.ShareAcknowledgeResponse(error_code=E.INVALID_SHARE_SESSION_EPOCH)
        if session is None:
            return sg.ShareAcknowledgeResponse(error_code=E.SHARE_SESSION_NOT_FOUND)
        closing = req.share_session_epoch == sg.CLOSE_SESSION_EPOCH
        if not closing:
            if session.epoch != req.share_session_epoch:
                return sg.ShareAcknowledgeResponse(error_code=E.INVALID_SHARE_SESSION_EPOCH)
            session.epoch = _next_epoch(session.epoch)
        answers = []
        for t in req.topics:
            for part in t.partitions:
                p = part.partition_index
                if self.leader_of.get(p) != node_id:
                    code: int = E.NOT_LEADER_OR_FOLLOWER
                else:
                    code = self._apply(node_id, member_id, p, part.acknowledgement_batches)
                answers.append(sg.ShareAcknowledgePartitionData(p, error_code=code))
        if closing:
            del leader.sessions[member_id]
            self._release_member(node_id, member_id, session.partitions)
        return sg.ShareAcknowledgeResponse(
            error_code=E.NONE,
            acquisition_lock_timeout_ms=self.settings.record_lock_duration_ms,
            responses=(sg.ShareAcknowledgeTopicResponse(self.topic_id, tuple(answers)),)
            if answers
            else (),
        )

    def _apply(
        self, node_id: int, member_id: str, p: int, batches: tuple[sg.AcknowledgementBatch, ...]
    ) -> int:
        """A partition's acknowledgements, all or none (as ``SharePartition.acknowledge``)."""
        if self.leader_of.get(p) != node_id:
            return E.NOT_LEADER_OR_FOLLOWER
        kinds: dict[int, A] = {}
        for batch in batches:
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                types = batch.acknowledge_types
                kinds[offset] = A(types[i] if len(types) > 1 else types[0])
        acquired = self._leaders[node_id].acquired.setdefault(p, {})
        now = self._clock.now()
        for offset, kind in kinds.items():
            if kind is A.GAP:
                continue
            held = acquired.get(offset)
            if held is None or held.member_id != member_id or held.deadline <= now:
                return E.INVALID_RECORD_STATE
        state = self.share_partitions[p]
        released = False
        renewed: list[int] = []
        for offset, kind in kinds.items():
            if kind is A.GAP:
                continue
            state.applied.setdefault(offset, []).append((member_id, kind, acquired[offset].count))
            state.applied_in_order.append((offset, member_id, kind))
            if kind is A.RENEW:
                renewed.append(offset)
                continue
            held = acquired.pop(offset)
            if kind is A.ACCEPT:
                state.write(offset, RecordState.ACKNOWLEDGED, held.count)
            elif kind is A.REJECT:
                state.write(offset, RecordState.ARCHIVED, held.count)
            else:
                self._make_available(p, offset, held.count)
                released = True
        if renewed:
            self._locks += 1
            deadline = now + self.settings.record_lock_duration_ms / 1000
            for offset in renewed:
                acquired[offset].deadline = deadline
                acquired[offset].lock = self._locks
            self._start_lock(node_id, self._locks, deadline)
        if released:
            self._wake(node_id)
        return E.NONE

    def _release_member(self, node_id: int, member_id: str, partitions: Iterable[int]) -> None:
        acquired_by_partition = self._leaders[node_id].acquired
        released = False
        for p in partitions:
            acquired = acquired_by_partition.get(p, {})
            for offset, held in list(acquired.items()):
                if held.member_id == member_id:
                    del acquired[offset]
                    self._make_available(p, offset, held.count)
                    released = True
        if released:
            self._wake(node_id)

    # -- views for the checkers -------------------------------------------------------------------

    @property
    def locks_taken(self) -> int:
        """How many locks were taken (acquisitions and renewals): the holders and delivery
        counts change only with it (a lock that runs out only removes a holder)."""
        return self._locks

    def holders(self) -> dict[tuple[int, int], list[tuple[int, str]]]:
        """Every record acquired under a lock that has not run out, by (partition, offset): the
        (leader, member) holding it."""
        now = self._clock.now()
        held: dict[tuple[int, int], list[tuple[int, str]]] = {}
        for node_id, leader in self._leaders.items():
            for p, acquired in leader.acquired.items():
                for offset, a in acquired.items():
                    if a.deadline > now:
                        held.setdefault((p, offset), []).append((node_id, a.member_id))
        return held

    def holding(self, p: int, offset: int) -> list[tuple[str, int]]:
        """Who holds record ``offset`` of partition ``p`` under a lock that has not run out,
        as (member id, delivery count)."""
        now = self._clock.now()
        return [
            (a.member_id, a.count)
            for leader in self._leaders.values()
            if (a := leader.acquired.get(p, {}).get(offset)) is not None and a.deadline > now
        ]

    def delivery_counts(self) -> Iterable[int]:
        for leader in self._leaders.values():
            for acquired in leader.acquired.values():
                for a in acquired.values():
                    yield a.count


def simple_assignment(members: list[str], partitions: int) -> dict[str, frozenset[int]]:
    """The ``simple`` assignor's contract: balanced over the members; each partition to one
    member while there are no more members than partitions. With more members than
    partitions, every partition goes to as many members, the fewest that gives each member
    one, and the members' counts differ by one at most: Kafka 4.3.1 gives 3 members on 2
    partitions {0, 1}, {0} and {1}, 4 members one each
    (tests/integration/test_share_model_vs_broker.py). Round robin, not sticky."""
    if not members:
        return {}
    if partitions == 0:
        return {m: frozenset() for m in members}
    if len(members) <= partitions:
        return {
            m: frozenset(p for p in range(partitions) if p % len(members) == i)
            for i, m in enumerate(members)
        }
    per_partition = -(-len(members) // partitions)
    given: dict[str, set[int]] = {m: set() for m in members}
    for slot in range(per_partition * partitions):
        given[members[slot % len(members)]].add(slot % partitions)
    return {m: frozenset(parts) for m, parts in given.items()}


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


def _record_batches(p: int, offsets: list[int]) -> bytes:
    """The acquired records as record batches on the wire: one batch per run of offsets."""
    out = b""
    start = 0
    for i in range(1, len(offsets) + 1):
        if i == len(offsets) or offsets[i] != offsets[i - 1] + 1:
            builder = MemoryRecordsBuilder(2, 0, 1 << 16, offset=offsets[start])
            for o in offsets[start:i]:
                builder.append(1_000 + o, None, b"%d:%d" % (p, o), [])
            builder.close()
            out += bytes(builder.buffer())
            start = i
    return out
