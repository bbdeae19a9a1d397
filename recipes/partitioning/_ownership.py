"""The consumer protocol's group side: what a member subscribes to, what the leader assigns,
and which partitions the member owns after each rebalance.

:class:`PartitionOwnership` is the :class:`~recipes._recipe.GroupListener` of a
:class:`~recipes.partitioning.ConsumerPartitioning`: the member hands it every step of
the protocol, and it tells the member's :class:`RebalanceListener` what changed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence

from coordination import Member, ProtocolMetadata
from coordination.clock import Thread
from coordination.errors import ConfigurationError, ProtocolCodecError
from recipes._recipe import ClockTimer, GroupListener, RecipeContext

from ._listener import RebalanceListener
from ._metadata import TopicMetadata
from .assignors import PartitionAssignor
from .protocol import (
    Assignment,
    RebalanceProtocol,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

_EMPTY: frozenset[TopicPartition] = frozenset()


class PartitionOwnership(GroupListener):
    """One member's partitions: its subscription, its owned partitions and its hand-overs.

    State (guarded by the recipe's lock, ``ctx.lock``):
        ``owned`` and ``owned_generation``: what the member owns, and since which
        generation (sent as its claim, KIP-792). ``unannounced``: owned partitions whose
        ``on_partitions_assigned`` has not returned yet. ``withheld``, ``planned`` and
        ``assigned_counts``: what this member's last plan as leader withheld for a
        cooperative hand-over, whether it planned at all this rebalance, and the partition
        counts it planned from.

    Callbacks:
        The :class:`RebalanceListener` runs through :meth:`RecipeContext.callback`, never
        under the recipe's lock (it may use a consumer that takes its own lock and asks
        :meth:`owned` from another thread): what ``on_partitions_revoked`` or
        ``on_partitions_lost`` raises is logged and the partitions are given up all the
        same; what ``on_partitions_assigned`` raises fails the join's completion, which the
        member calls again with the same assignment, announcing the same partitions.
    """

    def __init__(
        self,
        ctx: RecipeContext,
        *,
        assignors: Sequence[PartitionAssignor],
        rebalance_protocol: RebalanceProtocol,
        listener: RebalanceListener,
        rack_id: str | None,
        metadata: TopicMetadata,
        metadata_max_age_s: float,
    ) -> None:
        self.ctx = ctx
        self.assignors = assignors
        self.rebalance_protocol = rebalance_protocol
        self.listener = listener
        self.metadata_source = metadata
        self._rack_id = rack_id
        self._metadata_max_age_s = metadata_max_age_s
        self._pattern: re.Pattern[str] | None = None
        self._topics: frozenset[str] = frozenset()
        self._owned: frozenset[TopicPartition] = _EMPTY
        self._owned_generation = -1
        # Owned partitions whose on_partitions_assigned has not returned yet: a failed
        # on_join_complete is retried with the same assignment and must announce them again.
        self._unannounced: frozenset[TopicPartition] = _EMPTY
        # What the leader assigned from, to notice partition-count changes (as Java does).
        self._assigned_counts: dict[str, int] | None = None
        # Partitions the leader's last plan withheld from everyone because a member still
        # claimed them (a COOPERATIVE hand-over: the claimant revokes, then rejoins), and the
        # timer that makes sure that follow-up rebalance happens.
        self._withheld: frozenset[TopicPartition] = _EMPTY
        # Set by assign_with, cleared at each join: a leader that ends a join without
        # having planned was told to keep the assignment of its predecessor (KIP-814).
        self._planned = False
        self._handover_check: ClockTimer | None = None
        self._watcher: Thread | None = None

    # ------------------------------------------------------------------ queries

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions owned now; never waits (a frozenset, only ever replaced whole)."""
        return self._owned

    def owned_generation(self) -> int:
        """The generation whose assignment :meth:`owned` applied (-1 while nothing is owned
        and none was): the member turns STABLE before its assignment is applied."""
        with self.ctx.lock:
            return self._owned_generation

    def subscription(self) -> frozenset[str]:
        with self.ctx.lock:
            return self._topics

    def subscribe(
        self, topics: Iterable[str] | None, pattern: str | re.Pattern[str] | None
    ) -> None:
        """Replace the subscription (exactly one of ``topics`` and ``pattern``).

        Raises:
            ConfigurationError: neither or both given, no topics, or a bad pattern.
        """
        if (topics is None) == (pattern is None):
            raise ConfigurationError("give exactly one of topics=[...] or pattern='regex'")
        with self.ctx.lock:
            if pattern is not None:
                try:
                    self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
                except re.error as e:
                    raise ConfigurationError(
                        f"pattern {pattern!r} is not a valid regex: {e}"
                    ) from None
                self._topics = frozenset()
            else:
                assert topics is not None
                names = frozenset(topics)
                if (
                    isinstance(topics, str)
                    or not names
                    or not all(isinstance(t, str) and t for t in names)
                ):
                    raise ConfigurationError(
                        f"topics must be a non-empty list of topic names, got {topics!r}"
                    )
                self._pattern = None
                self._topics = names

    # ------------------------------------------------------------------ lifecycle

    def start_watching(self) -> None:
        """Start the metadata watcher (once)."""
        with self.ctx.lock:
            if self._watcher is None:
                self._watcher = self.ctx.clock.thread(
                    self._watch_metadata, f"partitioning-metadata|{self.ctx.group_id}"
                )
                self._watcher.start()

    def stop(self) -> None:
        """The recipe is closing: no more hand-over checks (the watcher ends with ``stopped``)."""
        with self.ctx.lock:
            if self._handover_check is not None:
                self._handover_check.cancel()

    # ------------------------------------------------------------------ GroupListener

    def protocols(self, name: str) -> Sequence[ProtocolMetadata]:
        """One subscription per assignor, most preferred first (they differ in user data)."""
        with self.ctx.lock:
            if self._pattern is not None:
                self._topics = self._matching(self.metadata_source.topic_names())
            topics = self._topics
            owned = self._owned
            generation = self._owned_generation if owned else -1
        return [
            ProtocolMetadata(
                a.name,
                encode_subscription(
                    Subscription(
                        topics=tuple(sorted(topics)),
                        user_data=a.subscription_user_data(topics),
                        owned_partitions=tuple(sorted(owned)),
                        generation_id=generation,
                        rack_id=self._rack_id,
                    )
                ),
            )
            for a in self.assignors
        ]

    def metadata(self) -> bytes:
        """The subscription for the most preferred assignor."""
        return self.protocols(self.assignors[0].name)[0].metadata

    def assign(
        self, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        """The plan of the most preferred assignor."""
        return self.assign_with(self.assignors[0].name, generation, leader_id, members)

    def assign_with(
        self, protocol: str, generation: int, leader_id: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        ctx = self.ctx
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is None:  # the broker only selects protocols every member listed
            raise ConfigurationError(f"the group selected assignor {protocol!r}, unknown here")
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                sub = decode_subscription(m.metadata)
            except ProtocolCodecError as e:
                # A bad member gets nothing; the others are assigned as if it were absent.
                ctx.log.error(
                    "group %s: member %s sent a subscription that cannot be decoded (%s); "
                    "it gets no partitions",
                    ctx.group_id,
                    m.member_id,
                    e,
                )
                continue
            subscriptions[m.member_id] = Subscription(
                topics=sub.topics,
                user_data=sub.user_data,
                owned_partitions=sub.owned_partitions,
                generation_id=sub.generation_id,
                rack_id=sub.rack_id,
                group_instance_id=m.group_instance_id,
            )
        all_topics = {t for s in subscriptions.values() for t in s.topics}
        counts = dict(self.metadata_source.partition_counts(all_topics))
        racks = getattr(self.metadata_source, "partition_racks", None)
        if (
            assignor.rack_aware
            and racks is not None
            and any(s.rack_id for s in subscriptions.values())
        ):
            # KIP-881: only when a member has a rack, and only for assignors that use racks.
            plan = assignor.assign(counts, subscriptions, partition_racks=racks(all_topics))  # type: ignore[call-arg]
        else:
            plan = assignor.assign(counts, subscriptions)
        claimed = {tp for sub in subscriptions.values() for tp in sub.owned_partitions}
        # Nothing claimed (eager members, a new group): nothing withheld, and no reason to
        # make the plan's TopicPartition objects (sticky plans hold ids until read).
        withheld = claimed.difference(*(a.partitions for a in plan.values())) if claimed else set()
        with ctx.lock:
            self._assigned_counts = counts
            self._withheld = frozenset(withheld)
            self._planned = True
        empty = encode_assignment(Assignment(()))
        result = {m.member_id: empty for m in members}
        for member_id, assignment in plan.items():
            result[member_id] = encode_assignment(assignment)
        ctx.log.info(
            "group %s: %s assigned %d partitions of %d topics to %d members",
            ctx.group_id,
            protocol,
            sum(len(a.partitions) for a in plan.values()),
            len(counts),
            len(members),
        )
        return result

    def preparing(self, generation: int, member_id: str) -> None:
        with self.ctx.lock:
            owned, topics = self._owned, self._topics
            self._withheld = _EMPTY  # of a plan that did not become a generation
            self._planned = False
            if self._handover_check is not None:
                self._handover_check.cancel()
        if not owned or generation < 0 or not member_id:
            return  # nothing owned; or the membership is gone, and lost() follows
        if self.rebalance_protocol is RebalanceProtocol.EAGER:
            self._give_up(owned, lost=False)
        else:
            # Cooperative: keep everything still subscribed; revoke what is not.
            gone = frozenset(tp for tp in owned if tp.topic not in topics)
            if gone:
                self._give_up(gone, lost=False)

    def lost(self) -> None:
        # The membership is gone: the partitions may be someone else's already.
        owned = self.owned()
        if owned:
            self._give_up(owned, lost=True)

    def joined(self, generation: int, member_id: str, assignment: bytes) -> None:
        """Completion with the most preferred assignor's protocol."""
        self.joined_with(self.assignors[0].name, generation, member_id, assignment)

    def joined_with(
        self, protocol: str, generation: int, member_id: str, assignment: bytes
    ) -> None:
        ctx = self.ctx
        try:
            decoded = decode_assignment(assignment)
        except ProtocolCodecError as e:
            ctx.log.error(
                "group %s: cannot decode this member's assignment (%s); rejoining",
                ctx.group_id,
                e,
            )
            ctx.member.request_rejoin(f"assignment could not be decoded: {e}")
            return
        assigned = frozenset(decoded.partitions)
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        revoked = self.owned() - assigned
        if revoked:
            # EAGER revoked everything in preparing(), so this is COOPERATIVE (or an
            # assignor that broke the rules): revoke, then rejoin to hand over. The rejoin is
            # asked for first: if anything below raises, the engine rejoins instead of
            # retrying this call, which would find nothing left to revoke.
            ctx.member.request_rejoin(f"need to hand over {len(revoked)} revoked partitions")
            self._give_up(revoked, lost=False)
        with ctx.lock:
            # Idempotent: a retry (the previous call raised) announces again what the
            # listener did not finish taking, although it is owned already.
            added = (self._unannounced & assigned) | (assigned - self._owned)
            self._unannounced = added
            self._owned = assigned
            self._owned_generation = generation
        if assignor is not None:
            assignor.on_assignment(decoded, generation)
        ctx.member.note_rebalance_change(
            f"+{len(added)} -{len(revoked)} partitions, {len(assigned)} owned"
        )
        self._watch_handover(generation)
        ctx.callback(
            "on_partitions_assigned", self.listener.on_partitions_assigned, added, again=True
        )
        with ctx.lock:
            self._unannounced -= added

    def leaving(self) -> None:
        owned = self.owned()
        if owned:
            self._give_up(owned, lost=self.ctx.member.generation().generation_id < 0)

    # ------------------------------------------------------------------ helpers

    def _give_up(self, partitions: frozenset[TopicPartition], *, lost: bool) -> None:
        """Tell the listener first (the partitions are still owned meanwhile), then drop them
        (also if the listener raised: see :meth:`RecipeContext.callback`)."""
        try:
            if lost:
                self.ctx.callback(
                    "on_partitions_lost", self.listener.on_partitions_lost, partitions
                )
            else:
                self.ctx.callback(
                    "on_partitions_revoked", self.listener.on_partitions_revoked, partitions
                )
        finally:  # a BaseException (KeyboardInterrupt) too: the partitions are not kept
            with self.ctx.lock:
                self._owned = self._owned - partitions
                self._unannounced = self._unannounced - partitions
                if not self._owned:
                    self._owned_generation = -1

    def _matching(self, names: Iterable[str]) -> frozenset[str]:
        assert self._pattern is not None
        return frozenset(n for n in names if self._pattern.fullmatch(n))

    # ------------------------------------------------------------------ hand-overs

    def _watch_handover(self, generation: int) -> None:
        """As leader of ``generation``, rejoin if the partitions its plan withheld for a
        hand-over are still withheld ``session_timeout_ms`` later.

        The member that must revoke them rejoins right after, and that rebalance assigns
        them. But if that member was a static member replaced by a restart, the new process
        took over an assignment made for its predecessor, owns none of them, and has
        nothing to revoke: nobody rejoins, and the partitions would stay unowned until the
        next rebalance for another reason. (A leader's rejoin makes the broker rebalance.)

        A static leader replaced by a restart takes over without planning (KIP-814: the
        broker keeps its predecessor's assignment). It cannot know what that plan withheld,
        so it asks the coordinator for the assignment then (:meth:`_unassigned`).
        """
        ctx = self.ctx
        inherited = ctx.member.is_leader
        with ctx.lock:
            withheld, self._withheld = self._withheld, _EMPTY
            inherited, self._planned = inherited and not self._planned, True
            if not withheld and not inherited:
                return
            self._handover_check = ClockTimer(
                ctx.clock,
                ctx.member.config.session_timeout_ms / 1000,
                lambda: self._check_handover(generation, None if inherited else withheld),
                f"partitioning-handover|{ctx.group_id}",
            )

    def _check_handover(self, generation: int, withheld: frozenset[TopicPartition] | None) -> None:
        """``withheld`` None: the plan was the predecessor's, so ask the coordinator."""
        ctx = self.ctx
        if ctx.closed or ctx.member.generation().generation_id != generation:
            return  # closed, or a rebalance came: it assigned them
        if withheld is not None:
            reason = (
                f"{len(withheld)} partitions withheld in generation {generation} for a "
                "cooperative hand-over were not handed over: their previous owner did not "
                "rejoin (replaced by a static restart?)"
            )
        else:
            try:
                unassigned = self._unassigned()
            except Exception as e:  # the coordinator, or the topic metadata (any source's)
                # A needless rebalance costs less than partitions left without an owner.
                reason = f"cannot read the assignment this leader took over ({e!r})"
            else:
                if not unassigned or ctx.member.generation().generation_id != generation:
                    return
                reason = (
                    f"{len(unassigned)} partitions are assigned to nobody in generation "
                    f"{generation}, whose assignment this leader took over from its "
                    "predecessor (a static restart): a hand-over it planned never happened"
                )
        ctx.log.warning("group %s: %s; rejoining", ctx.group_id, reason)
        ctx.member.request_rejoin(reason)

    def _unassigned(self) -> frozenset[TopicPartition]:
        """Partitions of the topics the group subscribes to that the coordinator's stored
        assignment gives nobody; none if a member's assignment cannot be read (it may own
        any of them).

        Raises:
            CoordinationError: the coordinator could not be asked.
            Exception: whatever the topic metadata source raises.
        """
        ctx = self.ctx
        group = ctx.member.describe_group(timeout=ctx.member.config.request_timeout_ms / 1000)
        if group.state != "Stable":
            return _EMPTY  # a rebalance is under way: it assigns them
        topics: set[str] = set()
        assigned: set[TopicPartition] = set()
        for member in group.members:
            with contextlib.suppress(ProtocolCodecError):  # unknown: the others' are checked
                topics.update(decode_subscription(member.metadata).topics)
            if not member.assignment:
                continue  # the broker stores nothing for a member the plan left out
            try:
                assigned.update(decode_assignment(member.assignment).partitions)
            except ProtocolCodecError as e:
                # It may own any partition (a newer client's format?): an unreadable
                # assignment is no evidence that a partition is unowned, and a rebalance
                # on no evidence would stop every member's consumption for nothing.
                ctx.log.warning(
                    "group %s: the assignment of member %s cannot be read (%s); which "
                    "partitions it owns is unknown, so the plan this leader took over is "
                    "not checked (no rejoin)",
                    ctx.group_id,
                    member.member_id,
                    e,
                )
                return _EMPTY
        return frozenset(
            tp
            for topic, count in self.metadata_source.partition_counts(topics).items()
            for tp in (TopicPartition(topic, p) for p in range(count))
            if tp not in assigned
        )

    # ------------------------------------------------------------------ metadata changes

    def _watch_metadata(self) -> None:
        """Every ``metadata_max_age_ms`` until closed: :meth:`check_metadata`."""
        # The stop event is the clock's, so a simulated clock times these waits too.
        while not self.ctx.stopped.wait(self._metadata_max_age_s):
            self.check_metadata()

    def check_metadata(self) -> None:
        """Rejoin if the pattern matches other topics or a partition count changed."""
        ctx = self.ctx
        try:
            reason = self.metadata_change()
        except Exception as e:  # the cluster is unreachable: the engine will notice too
            ctx.log.debug("group %s: metadata check failed: %s", ctx.group_id, e)
            return
        if reason:
            ctx.log.info("group %s: %s; rejoining", ctx.group_id, reason)
            ctx.member.request_rejoin(reason)

    def metadata_change(self) -> str | None:
        """Why the member must rejoin after what the metadata says now, or None.

        A pattern's subscription follows the topics at once (as Java's does on a metadata
        update), so a COOPERATIVE member revokes the partitions of a deleted topic before
        it rejoins, not after the next assignment.
        """
        ctx = self.ctx
        with ctx.lock:
            pattern, topics, counts = self._pattern, self._topics, self._assigned_counts
        if pattern is not None:
            names = self.metadata_source.topic_names()
            matching = frozenset(n for n in names if pattern.fullmatch(n))
            if matching != topics:
                with ctx.lock:
                    if self._pattern is pattern:  # not re-subscribed meanwhile
                        self._topics = matching
                added, removed = sorted(matching - topics), sorted(topics - matching)
                return f"subscribed topics changed (+{added} -{removed})"
        if counts is not None and ctx.member.is_leader:
            now = self.metadata_source.partition_counts(counts)
            changed = sorted(t for t in counts if now.get(t) != counts[t])
            if changed:
                return f"partition count changed for {changed}"
        return None
