"""Kafka's ``consumer`` protocol as a Coordinator: the group side of a Kafka consumer."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coordination import Coordinator, Member, ProtocolMetadata
from coordination.clock import Clock, Thread
from coordination.errors import ConfigurationError, ProtocolCodecError
from coordination.parts import check_int, check_part
from coordination.transport import Transport
from recipes._recipe import ClockTimer

from ._listener import RebalanceListener
from ._metadata import KafkaTopicMetadata, TopicMetadata
from .assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from .protocol import (
    PROTOCOL_TYPE,
    Assignment,
    RebalanceProtocol,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

log = logging.getLogger("recipes.partitioning")

_EMPTY: frozenset[TopicPartition] = frozenset()


class ConsumerPartitioning(Coordinator):
    """A member of a Kafka consumer group: it owns a share of the subscribed partitions.

    Speaks Kafka's standard ``consumer`` protocol (subscription and assignment formats v0-v3,
    the assignors ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``), so one group
    can mix these members with Kafka's Java consumer, librdkafka/confluent-kafka, kafka-python
    and others; any of them may be the leader. It only coordinates ownership; to also read
    records and commit offsets use :class:`~recipes.partitioning.Consumer`, built on it.

    Example:
        class Printer(RebalanceListener):
            def on_partitions_assigned(self, partitions):
                print("now mine:", sorted(partitions))

        member = ConsumerPartitioning("orders-workers", topics=["orders"], listener=Printer(),
                                      bootstrap_servers="localhost:9092")
        with member:
            member.ensure_active_group(timeout=30)
            print(member.owned())

    Rebalance protocol:
        COOPERATIVE if every configured assignor supports it, else EAGER (as Java decides).
        The default assignors are ``[cooperative-sticky, range]``: EAGER, compatible with
        groups of older members. To move a running group from ``range`` to
        ``cooperative-sticky`` without stopping it, roll out ``[cooperative-sticky, range]``,
        then ``[cooperative-sticky]``.

    Generations and ownership (KIP-792):
        Each subscription carries the partitions the member owns and the generation in
        which it got them; the leader discards stale claims. When the member loses its
        generation (ILLEGAL_GENERATION, session expired) it keeps its member id, forgets its
        partitions (``on_partitions_lost``) and rejoins.

    Time and I/O:
        Group requests go through ``transport``, topic metadata comes from
        ``topic_metadata``, and every read of the time, wait, lock and thread (the
        engine's, this member's lock and its metadata watcher) comes from ``clock``. With
        a ``coordination.testing.ScriptedTransport``, a ``ManualClock`` and an
        :class:`~recipes.partitioning.InMemoryTopicMetadata`, a test drives the member
        through rebalances without a broker (see ``tests/unit/partitioning``).
    """

    def __init__(
        self,
        group_id: str,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        assignors: Sequence[PartitionAssignor] | None = None,
        listener: RebalanceListener | None = None,
        rack_id: str | None = None,
        metadata_max_age_ms: int = 300_000,
        topic_metadata: TopicMetadata | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **settings: Any,
    ) -> None:
        """Validate the settings; nothing connects until :meth:`start`.

        Args:
            group_id: the consumer group (Kafka ``group.id``).
            topics: the topics to subscribe to; or
            pattern: a regular expression; every matching topic is subscribed, and topics
                created or deleted later make the member rejoin (checked every
                ``metadata_max_age_ms``).
            assignors: the assignors this member supports, most preferred first (Kafka
                ``partition.assignment.strategy``); default ``[CooperativeStickyAssignor(),
                RangeAssignor()]``. Also accepted as ``partition_assignment_strategy``,
                kafka-python's name, as assignors, their names (``"range"``,
                ``"roundrobin"``, ``"sticky"``, ``"cooperative-sticky"``) or kafka-python's
                assignor classes.
            listener: told of revoked, assigned and lost partitions.
            rack_id: this member's rack (Kafka ``client.rack``), sent in the subscription;
                also accepted as ``client_rack``, kafka-python's name.
            metadata_max_age_ms: how often topics and partition counts are checked for
                changes (Kafka ``metadata.max.age.ms``, default 300000).
            topic_metadata: where topic names and partition counts come from; default: the
                cluster, through a kafka-python admin client made from this member's
                connection settings (and closed with it). Tests and simulations pass an
                :class:`~recipes.partitioning.InMemoryTopicMetadata`; a source given here
                is not closed by the member.
            transport: where group requests go (see :class:`coordination.Coordinator`).
            clock: where the member's time and waits come from: the engine's and this
                recipe's (its lock, its metadata watcher's thread and waits); see
                :class:`coordination.Coordinator`.
            **settings: as for :class:`coordination.Coordinator`.

        Raises:
            ConfigurationError: a setting is invalid; the message names it.
        """
        if (topics is None) == (pattern is None):
            raise ConfigurationError("give exactly one of topics=[...] or pattern='regex'")
        # Kafka's and kafka-python's names, accepted as they spell them.
        strategy = settings.pop("partition_assignment_strategy", None)
        if strategy is not None:
            if assignors is not None:
                raise ConfigurationError(
                    "give assignors= or partition_assignment_strategy=, not both (the same "
                    "setting under two names)"
                )
            assignors = assignors_named(strategy)
        client_rack = settings.pop("client_rack", None)
        if client_rack is not None:
            if rack_id is not None and rack_id != client_rack:
                raise ConfigurationError(
                    f"rack_id={rack_id!r} and client_rack={client_rack!r} disagree; give one"
                )
            rack_id = client_rack
        super().__init__(group_id, transport=transport, clock=clock, **settings)
        self._clock = self.clock
        self._assignors = (
            list(assignors)
            if assignors is not None
            else [
                CooperativeStickyAssignor(),
                RangeAssignor(),
            ]
        )
        if not self._assignors:
            raise ConfigurationError("assignors must name at least one PartitionAssignor")
        names = [a.name for a in self._assignors]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"assignors have duplicate names: {names}")
        common = set(RebalanceProtocol)
        for a in self._assignors:
            common &= set(a.supported_protocols())
        if not common:
            raise ConfigurationError(
                f"assignors {names} share no rebalance protocol; every one supports EAGER "
                "unless it says otherwise"
            )
        self.rebalance_protocol = max(common, key=lambda p: p.value)
        check_int("metadata_max_age_ms", metadata_max_age_ms, minimum=1, rule="a positive int")
        self._listener = listener or RebalanceListener()
        self._rack_id = rack_id
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        # The metadata source this member made itself, to close with it; None if given.
        self._own_metadata: KafkaTopicMetadata | None = None
        check_part("topic_metadata", topic_metadata, TopicMetadata)
        if topic_metadata is None:
            topic_metadata = self._own_metadata = KafkaTopicMetadata(
                self.config.client_settings(), self._clock
            )
        self._metadata: TopicMetadata = topic_metadata
        self._lock = self._clock.rlock()
        self._pattern: re.Pattern[str] | None = None
        self._topics: frozenset[str] = frozenset()
        self._set_subscription(topics, pattern)
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
        # Set by perform_assignment, cleared at each join: a leader that ends a join without
        # having planned was told to keep the assignment of its predecessor (KIP-814).
        self._planned = False
        self._handover_check: ClockTimer | None = None
        self._stop = self._clock.event()
        self._watcher: Thread | None = None

    # ------------------------------------------------------------------ public

    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions this member owns now. Never waits: the lock may be held across a
        metadata request (a pattern's topics), and an event loop asks this."""
        return self._owned  # a frozenset, only ever replaced whole

    def subscription(self) -> frozenset[str]:
        """The topics this member subscribes to now (for a pattern: those that match)."""
        with self._lock:
            return self._topics

    def subscribe(
        self, topics: Iterable[str] | None = None, pattern: str | re.Pattern[str] | None = None
    ) -> None:
        """Change the subscription; the member rejoins so the group reassigns."""
        if (topics is None) == (pattern is None):
            raise ConfigurationError("give exactly one of topics=[...] or pattern='regex'")
        self._set_subscription(topics, pattern)
        self.request_rejoin("subscription changed")

    def start(self) -> None:
        with self._lock:
            if self._watcher is None:
                self._watcher = self._clock.thread(
                    self._watch_metadata, f"partitioning-metadata|{self.group_id}"
                )
                self._watcher.start()
        super().start()

    def close(self, timeout: float = 30.0, *, leave_group: bool = True) -> None:
        self._stop.set()
        with self._lock:
            if self._handover_check is not None:
                self._handover_check.cancel()
        super().close(timeout, leave_group=leave_group)
        if self._own_metadata is not None:
            self._own_metadata.close()

    # ------------------------------------------------------------------ the protocol

    def metadata(self) -> Sequence[ProtocolMetadata]:
        with self._lock:
            if self._pattern is not None:
                self._topics = self._matching(self._metadata.topic_names())
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
            for a in self._assignors
        ]

    def perform_assignment(
        self, leader_id: str, protocol: str, members: Sequence[Member]
    ) -> Mapping[str, bytes]:
        assignor = next((a for a in self._assignors if a.name == protocol), None)
        if assignor is None:  # the broker only selects protocols every member listed
            raise ConfigurationError(f"the group selected assignor {protocol!r}, unknown here")
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                sub = decode_subscription(m.metadata)
            except ProtocolCodecError as e:
                # A bad member gets nothing; the others are assigned as if it were absent.
                log.error(
                    "group %s: member %s sent a subscription that cannot be decoded (%s); "
                    "it gets no partitions",
                    self.group_id,
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
        counts = dict(self._metadata.partition_counts(all_topics))
        racks = getattr(self._metadata, "partition_racks", None)
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
        with self._lock:
            self._assigned_counts = counts
            self._withheld = frozenset(withheld)
            self._planned = True
        empty = encode_assignment(Assignment(()))
        result = {m.member_id: empty for m in members}
        for member_id, assignment in plan.items():
            result[member_id] = encode_assignment(assignment)
        log.info(
            "group %s: %s assigned %d partitions of %d topics to %d members",
            self.group_id,
            protocol,
            sum(len(a.partitions) for a in plan.values()),
            len(counts),
            len(members),
        )
        return result

    # The callbacks below run one at a time (the engine serializes them). The listener is
    # called without holding self._lock, so that it may use a consumer that takes its own
    # lock and then asks this object (owned()) from another thread.

    def on_join_prepare(self, generation: int, member_id: str) -> None:
        with self._lock:
            owned, topics = self._owned, self._topics
            self._withheld = _EMPTY  # of a plan that did not become a generation
            self._planned = False
            if self._handover_check is not None:
                self._handover_check.cancel()
        if not owned:
            return
        if generation < 0 or not member_id:
            # The membership is gone: the partitions may be someone else's already.
            self._give_up(owned, lost=True)
        elif self.rebalance_protocol is RebalanceProtocol.EAGER:
            self._give_up(owned, lost=False)
        else:
            # Cooperative: keep everything still subscribed; revoke what is not.
            gone = frozenset(tp for tp in owned if tp.topic not in topics)
            if gone:
                self._give_up(gone, lost=False)

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes
    ) -> None:
        try:
            decoded = decode_assignment(assignment)
        except ProtocolCodecError as e:
            log.error(
                "group %s: cannot decode this member's assignment (%s); rejoining",
                self.group_id,
                e,
            )
            self.request_rejoin(f"assignment could not be decoded: {e}")
            return
        assigned = frozenset(decoded.partitions)
        assignor = next((a for a in self._assignors if a.name == protocol), None)
        revoked = self.owned() - assigned
        if revoked:
            # EAGER revoked everything in on_join_prepare, so this is COOPERATIVE (or an
            # assignor that broke the rules): revoke, then rejoin to hand over. The rejoin is
            # asked for first: if anything below raises, the engine rejoins instead of
            # retrying this call, which would find nothing left to revoke.
            self.request_rejoin(f"need to hand over {len(revoked)} revoked partitions")
            self._give_up(revoked, lost=False)
        with self._lock:
            # Idempotent: a retry (the previous call raised) announces again what the
            # listener did not finish taking, although it is owned already.
            added = (self._unannounced & assigned) | (assigned - self._owned)
            self._unannounced = added
            self._owned = assigned
            self._owned_generation = generation
        if assignor is not None:
            assignor.on_assignment(decoded, generation)
        self.note_rebalance_change(
            f"+{len(added)} -{len(revoked)} partitions, {len(assigned)} owned"
        )
        self._watch_handover(generation)
        self._listener.on_partitions_assigned(added)
        with self._lock:
            self._unannounced -= added

    def on_leave_prepare(self) -> None:
        owned = self.owned()
        if owned:
            self._give_up(owned, lost=self.generation().generation_id < 0)

    # ------------------------------------------------------------------ helpers

    def _give_up(self, partitions: frozenset[TopicPartition], *, lost: bool) -> None:
        """Tell the listener first (the partitions are still owned meanwhile), then drop them."""
        try:
            if lost:
                self._listener.on_partitions_lost(partitions)
            else:
                self._listener.on_partitions_revoked(partitions)
        finally:
            with self._lock:
                self._owned = self._owned - partitions
                self._unannounced = self._unannounced - partitions
                if not self._owned:
                    self._owned_generation = -1

    def _set_subscription(
        self, topics: Iterable[str] | None, pattern: str | re.Pattern[str] | None
    ) -> None:
        with self._lock:
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

    def _matching(self, names: Iterable[str]) -> frozenset[str]:
        assert self._pattern is not None
        return frozenset(n for n in names if self._pattern.fullmatch(n))

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
        inherited = self.is_leader
        with self._lock:
            withheld, self._withheld = self._withheld, _EMPTY
            inherited, self._planned = inherited and not self._planned, True
            if not withheld and not inherited:
                return
            self._handover_check = ClockTimer(
                self._clock,
                self.config.session_timeout_ms / 1000,
                lambda: self._check_handover(generation, None if inherited else withheld),
                f"partitioning-handover|{self.group_id}",
            )

    def _check_handover(self, generation: int, withheld: frozenset[TopicPartition] | None) -> None:
        """``withheld`` None: the plan was the predecessor's, so ask the coordinator."""
        if self._stop.is_set() or self.generation().generation_id != generation:
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
                if not unassigned or self.generation().generation_id != generation:
                    return
                reason = (
                    f"{len(unassigned)} partitions are assigned to nobody in generation "
                    f"{generation}, whose assignment this leader took over from its "
                    "predecessor (a static restart): a hand-over it planned never happened"
                )
        log.warning("group %s: %s; rejoining", self.group_id, reason)
        self.request_rejoin(reason)

    def _unassigned(self) -> frozenset[TopicPartition]:
        """Partitions of the topics the group subscribes to that the coordinator's stored
        assignment gives nobody; none if a member's assignment cannot be read (it may own
        any of them).

        Raises:
            CoordinationError: the coordinator could not be asked.
            Exception: whatever the topic metadata source raises.
        """
        group = self.describe_group(timeout=self.config.request_timeout_ms / 1000)
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
                log.warning(
                    "group %s: the assignment of member %s cannot be read (%s); which "
                    "partitions it owns is unknown, so the plan this leader took over is "
                    "not checked (no rejoin)",
                    self.group_id,
                    member.member_id,
                    e,
                )
                return _EMPTY
        return frozenset(
            tp
            for topic, count in self._metadata.partition_counts(topics).items()
            for tp in (TopicPartition(topic, p) for p in range(count))
            if tp not in assigned
        )

    def _watch_metadata(self) -> None:
        """Every ``metadata_max_age_ms`` until closed: :meth:`_check_metadata`."""
        # The stop event is the clock's, so a simulated clock times these waits too.
        while not self._stop.wait(self._metadata_max_age_s):
            self._check_metadata()

    def _check_metadata(self) -> None:
        """Rejoin if the pattern matches other topics or a partition count changed."""
        try:
            reason = self._metadata_change()
        except Exception as e:  # the cluster is unreachable: the engine will notice too
            log.debug("group %s: metadata check failed: %s", self.group_id, e)
            return
        if reason:
            log.info("group %s: %s; rejoining", self.group_id, reason)
            self.request_rejoin(reason)

    def _metadata_change(self) -> str | None:
        """Why the member must rejoin after what the metadata says now, or None.

        A pattern's subscription follows the topics at once (as Java's does on a metadata
        update), so a COOPERATIVE member revokes the partitions of a deleted topic before
        it rejoins, not after the next assignment.
        """
        with self._lock:
            pattern, topics, counts = self._pattern, self._topics, self._assigned_counts
        if pattern is not None:
            matching = frozenset(n for n in self._metadata.topic_names() if pattern.fullmatch(n))
            if matching != topics:
                with self._lock:
                    if self._pattern is pattern:  # not re-subscribed meanwhile
                        self._topics = matching
                added, removed = sorted(matching - topics), sorted(topics - matching)
                return f"subscribed topics changed (+{added} -{removed})"
        if counts is not None and self.is_leader:
            now = self._metadata.partition_counts(counts)
            changed = sorted(t for t in counts if now.get(t) != counts[t])
            if changed:
                return f"partition count changed for {changed}"
        return None


_BY_NAME: dict[str, type[PartitionAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def assignors_named(strategy: Any) -> list[PartitionAssignor]:
    """``partition_assignment_strategy`` as kafka-python users write it: assignors, assignor
    names, or kafka-python's assignor classes (matched by their protocol name).

    Raises:
        ConfigurationError: an entry is none of these, or the list is empty.
    """
    entries = [strategy] if isinstance(strategy, str | PartitionAssignor | type) else strategy
    try:
        entries = list(entries)
    except TypeError:
        entries = [strategy]
    out: list[PartitionAssignor] = []
    for entry in entries:
        if isinstance(entry, PartitionAssignor):
            out.append(entry)
            continue
        name = entry if isinstance(entry, str) else getattr(entry, "name", None)
        if not isinstance(name, str) or name not in _BY_NAME:
            raise ConfigurationError(
                f"partition_assignment_strategy: {entry!r} is not an assignor this consumer "
                f"knows; give assignors or their names: {', '.join(_BY_NAME)}"
            )
        out.append(_BY_NAME[name]())
    if not out:
        raise ConfigurationError("partition_assignment_strategy is empty: name an assignor")
    return out
