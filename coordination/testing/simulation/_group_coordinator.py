"""A model of one Kafka broker's group coordinator: the broker side of the simulator.

Internal, no compatibility guarantee. :class:`GroupCoordinatorModel` is laid out as Kafka
4.3's group coordinator shard is: it loads and unloads the groups it coordinates, routes
JoinGroup, SyncGroup, Heartbeat and LeaveGroup to the classic groups
(:class:`~._classic_group_coordinator.ClassicGroupsModel`, ``GroupMetadataManager`` and
``ClassicGroup``) and ConsumerGroupHeartbeat to the KIP-848 groups
(:class:`~._consumer_group_coordinator.ConsumerGroupsModel`), and keeps what is common to
both: offsets (OffsetCommit, validated by the group's own model, and OffsetFetch: Kafka's
``OffsetMetadataManager``), DescribeGroups, group deletion, and the periodic expiry of
offsets and empty groups. What it persists is in :mod:`._group_log`. All runs on a
simulated clock, single-threaded and deterministic; where Kafka 3.9 answers differently, a
comment marked "3.9:" says how. ``tests/integration/test_model_vs_broker.py`` replays
scenarios against real 4.3 and 3.9 brokers to keep the model honest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ..._protocol import consumer_group as cg
from ..._protocol import messages as msg
from ..._protocol.error_codes import ErrorCode as E

# The names imported "as" themselves are re-exported: the package, the simulated network and
# the tests import them from here.
from ._classic_group_coordinator import BrokerSettings as BrokerSettings
from ._classic_group_coordinator import (
    ClassicGroup,
    ClassicGroupsModel,
    KeyedTimers,
    Respond,
    State,
)
from ._consumer_group_coordinator import ConsumerGroupsModel
from ._group_log import GroupLog as GroupLog
from ._group_log import GroupRecord as GroupRecord
from ._group_log import GroupTombstone as GroupTombstone
from ._group_log import OffsetRecord as OffsetRecord
from ._group_log import OffsetTombstone as OffsetTombstone
from ._timers import Timers

OFFSET_METADATA_MAX_BYTES: Final = 4096  # offset.metadata.max.bytes default


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
        settings: BrokerSettings | None = None,
    ) -> None:
        self.node_id = node_id
        self.log = log
        self.settings = settings if settings is not None else BrokerSettings()
        self._timers = KeyedTimers(timers, after_each=self._plan_cleanup)
        self._loaded = False
        self._loading = False
        self._loaded_at_ms = 0
        self._cleanup_at_ms: int | None = None
        self._classic = ClassicGroupsModel(log, self._timers, self.settings)
        self._consumer_groups = ConsumerGroupsModel(log.consumer_groups, log.topics, timers)
        # The cluster's share groups (KIP-932), when a driver runs them (ShareGroupsModel).
        self.share_groups: Any = None

    def group_config(self, group_id: str, key: str) -> str | None:
        """A group setting as DescribeConfigs of the group names it (only the KIP-848
        groups' session timeout and the share groups' delivery count limit are modelled; any
        broker answers them)."""
        if key == "consumer.session.timeout.ms":
            return str(self._consumer_groups.settings.session_timeout_ms)
        if key == "share.delivery.count.limit" and self.share_groups is not None:
            return str(self.share_groups.settings.delivery_count_limit)
        return None

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
            self._timers.schedule("load", load_time_s * 1000, self._finish_load)
        else:
            self._finish_load()

    def _finish_load(self) -> None:
        self._loading = False
        self._consumer_groups.load()
        # The KIP-848 groups are the consumer group model's; the rest (with offsets committed
        # without group management) are classic.
        self._classic.load([g for g in self.log.group_ids() if not self._consumer_groups.owns(g)])
        self._loaded_at_ms = self._timers.now_ms()
        if self.share_groups is not None:
            self.share_groups.coordinator_loaded()
        self._plan_cleanup()

    def unload(self) -> None:
        """Stop being the coordinator: parked requests get NOT_COORDINATOR, state is forgotten."""
        self._timers.cancel_all()
        self._cleanup_at_ms = None
        self._loaded = self._loading = False
        self._consumer_groups.unload()
        self._classic.unload()
        if self.share_groups is not None:
            self.share_groups.coordinator_unloaded()

    # -- admin and inspection -----------------------------------------------------------------

    def delete_group(self, group_id: str) -> int:
        """Like DeleteGroups: drop an Empty group's offsets and metadata (with tombstones)."""
        if not self._loaded:
            return E.NOT_COORDINATOR
        if self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        group = self._classic.groups.get(group_id)
        if group is None:
            return E.GROUP_ID_NOT_FOUND
        if group.state is not State.EMPTY:
            return E.NON_EMPTY_GROUP
        for topic, partition in self.log.offsets(group_id):
            self.log.append(OffsetTombstone(group_id, topic, partition))
        self._classic.delete(group.group_id)
        return E.NONE

    def describe(self, group_id: str) -> GroupView:
        group = self._classic.groups.get(group_id)
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
            self._classic.join(request, respond, self._unavailable())
        elif isinstance(request, msg.SyncGroupRequest):
            self._classic.sync(request, respond, self._unavailable())
        elif isinstance(request, msg.HeartbeatRequest):
            respond(msg.HeartbeatResponse(self._classic.heartbeat(request, self._unavailable())))
        elif isinstance(request, msg.LeaveGroupRequest):
            respond(self._classic.leave(request, self._unavailable()))
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
        elif self.share_groups is not None and self.share_groups.answers(request):
            self.share_groups.handle(self.node_id, request, respond, self._unavailable())
        else:
            raise TypeError(f"the group coordinator model does not answer {type(request).__name__}")
        self._plan_cleanup()

    def _unavailable(self) -> E | None:
        if not self._loaded:
            return E.NOT_COORDINATOR
        return E.COORDINATOR_LOAD_IN_PROGRESS if self._loading else None

    # Offsets --------------------------------------------------------------------------------

    def _commit(self, req: msg.OffsetCommitRequest) -> msg.OffsetCommitResponse:
        def answer(code: E) -> msg.OffsetCommitResponse:
            topics = _by_topic((t, p) for t, p, _, _ in req.offsets)
            return msg.OffsetCommitResponse(tuple((t, p, int(code)) for t, p in topics))

        unavailable = self._unavailable()
        if unavailable is not None:
            return answer(unavailable)
        if self._consumer_groups.owns(req.group_id):
            error = self._consumer_groups.validate_commit(req)
        else:
            error = self._classic.validate_commit(req)
        return answer(error) if error is not None else self._write_offsets(req)

    def _write_offsets(self, req: msg.OffsetCommitRequest) -> msg.OffsetCommitResponse:
        results = []
        for topic, partition, offset, metadata in _sorted_offsets(req.offsets):
            if metadata is not None and len(metadata) > OFFSET_METADATA_MAX_BYTES:
                results.append((topic, partition, int(E.OFFSET_METADATA_TOO_LARGE)))
                continue
            record = OffsetRecord(
                req.group_id, topic, partition, offset, metadata or "", self._timers.now_ms()
            )
            self.log.append(record)
            results.append((topic, partition, int(E.NONE)))
        return msg.OffsetCommitResponse(tuple(results))

    def _fetch(self, req: msg.OffsetFetchRequest) -> msg.OffsetFetchResponse:
        unavailable = self._unavailable()
        if unavailable is not None:
            return msg.OffsetFetchResponse(unavailable, ())
        if self._consumer_groups.owns(req.group_id):
            epoch_error = self._consumer_groups.validate_fetch(req)
            if epoch_error is not None:
                return msg.OffsetFetchResponse(epoch_error, ())
        # Offsets are answered whatever the group's state, even for an unknown group.
        known = self._classic.owns(req.group_id) or self._consumer_groups.owns(req.group_id)
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
        group = self._classic.groups.get(req.group_id)
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

    def _expiry_due_ms(self, group: ClassicGroup) -> int | None:
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
        due = [
            d for g in self._classic.groups.values() if (d := self._expiry_due_ms(g)) is not None
        ]
        if not due:
            self._cleanup_at_ms = None
            self._timers.cancel("cleanup")
            return
        interval = self.settings.offsets_retention_check_interval_ms
        first = max(min(due), self._timers.now_ms() + 1) - self._loaded_at_ms
        at = self._loaded_at_ms + max(1, -(-first // interval)) * interval
        if at != self._cleanup_at_ms:
            self._cleanup_at_ms = at
            self._timers.schedule("cleanup", at - self._timers.now_ms(), self._cleanup)

    def _cleanup(self) -> None:
        self._cleanup_at_ms = None
        now = self._timers.now_ms()
        for group in list(self._classic.groups.values()):
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
                self._classic.delete(group.group_id)


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
