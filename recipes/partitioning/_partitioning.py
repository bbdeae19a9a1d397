"""Kafka's ``consumer`` protocol as a Coordinator: the group side of a Kafka consumer."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from coordination.clock import Clock
from coordination.errors import ConfigurationError
from coordination.lease import LeaseGuard
from coordination.parts import check_int, check_part
from coordination.transport import Transport
from recipes._recipe import RecipeContext, RecipeMember, guard_lease

from ._listener import RebalanceListener
from ._metadata import KafkaTopicMetadata, TopicMetadata
from ._ownership import PartitionOwnership
from .assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from .protocol import PROTOCOL_TYPE, RebalanceProtocol, TopicPartition

log = logging.getLogger("recipes.partitioning")


class ConsumerPartitioning(RecipeMember):
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

    It is a :class:`coordination.Coordinator` (``generation()``, ``is_leader``,
    ``metrics()``, ``commit_offsets()``, hooks, ...), on the shape every recipe shares
    (``recipes/_recipe.py``): the member hands each step of the protocol to a
    :class:`~recipes.partitioning._ownership.PartitionOwnership`, which keeps the
    partitions and tells the :class:`RebalanceListener`, under the recipes' one rule for
    what a user's callback raises (see :class:`RebalanceListener`).

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

    Membership lease:
        :attr:`lease` is the member's lease guard: while ``lease.holds()``, no other member
        of the group can own a partition this one owns (the broker cannot have removed it
        yet). A service that acts on its partitions outside Kafka (deleting files, say)
        checks it first.

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
        lease_margin_ms: int | None = None,
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
            lease_margin_ms: how long before its membership lease runs out :attr:`lease`
                stops holding; default ``heartbeat_interval_ms``. Given, it must leave room
                (as the election's: below ``min(session_timeout_ms, rebalance_timeout_ms)``
                by more than ``heartbeat_interval_ms``); the default is checked only when
                :attr:`lease` is read.
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
        chosen = (
            list(assignors)
            if assignors is not None
            else [CooperativeStickyAssignor(), RangeAssignor()]
        )
        # The protocol name is the preferred assignor's; the listener offers one per assignor.
        preferred = str(getattr(chosen[0], "name", "")) if chosen else ""
        options = {"transport": transport, "clock": clock, **settings}
        super().__init__(group_id, (PROTOCOL_TYPE, preferred), options)
        self._clock = self.clock
        self._assignors = chosen
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
        self._lease: LeaseGuard | None = None
        self._lease_margin_ms = lease_margin_ms
        if lease_margin_ms is not None:
            self._lease = self._guard_lease()
        # The metadata source this member made itself, to close with it; None if given.
        self._own_metadata: KafkaTopicMetadata | None = None
        check_part("topic_metadata", topic_metadata, TopicMetadata)
        if topic_metadata is None:
            topic_metadata = self._own_metadata = KafkaTopicMetadata(
                self.config.client_settings(), self._clock
            )
        self._metadata: TopicMetadata = topic_metadata
        self._ctx = RecipeContext.of(self, "partitioning", log)
        self._lock = self._ctx.lock  # guards the ownership's state (held across a metadata
        # request when a pattern's topics are read, so owned() never takes it)
        self._ownership = PartitionOwnership(
            self._ctx,
            assignors=self._assignors,
            rebalance_protocol=self.rebalance_protocol,
            listener=listener or RebalanceListener(),
            rack_id=rack_id,
            metadata=topic_metadata,
            metadata_max_age_s=metadata_max_age_ms / 1000,
        )
        self._ownership.subscribe(topics, pattern)
        self.listen(self._ownership)

    # ------------------------------------------------------------------ public

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions this member owns now. Never waits: the lock may be held across a
        metadata request (a pattern's topics), and an event loop asks this."""
        return self._ownership.owned()

    def subscription(self) -> frozenset[str]:
        """The topics this member subscribes to now (for a pattern: those that match)."""
        return self._ownership.subscription()

    def subscribe(
        self, topics: Iterable[str] | None = None, pattern: str | re.Pattern[str] | None = None
    ) -> None:
        """Change the subscription; the member rejoins so the group reassigns.

        Raises:
            ConfigurationError: neither or both given, no topics, or a bad pattern.
        """
        self._ownership.subscribe(topics, pattern)
        self.request_rejoin("subscription changed")

    @property
    def lease(self) -> LeaseGuard:
        """The membership-lease guard (see :class:`coordination.lease.LeaseGuard`): while
        ``lease.holds()``, the partitions this member owns are no other member's.

        Raises:
            ConfigurationError: the default ``lease_margin_ms`` leaves no room with these
                settings (pass a smaller one).
        """
        if self._lease is None:
            self._lease = self._guard_lease()
        return self._lease

    def start(self) -> None:
        self._ownership.start_watching()
        super().start()

    def close(self, timeout: float = 30.0, *, leave_group: bool = True) -> None:
        self._ctx.stopped.set()
        self._ownership.stop()
        super().close(timeout, leave_group=leave_group)
        if self._own_metadata is not None:
            self._own_metadata.close()

    # ------------------------------------------------------------------ for tests

    @property
    def _listener(self) -> RebalanceListener:
        """The listener told of ownership changes (a test may replace it)."""
        return self._ownership.listener

    @_listener.setter
    def _listener(self, listener: RebalanceListener) -> None:
        self._ownership.listener = listener

    def _owned_generation(self) -> int:
        return self._ownership.owned_generation()

    def _check_metadata(self) -> None:
        self._ownership.check_metadata()

    def _metadata_change(self) -> str | None:
        return self._ownership.metadata_change()

    def _guard_lease(self) -> LeaseGuard:
        return guard_lease(
            self,
            self._lease_margin_ms,
            why=", or the lease of a consumer's partitions would never hold",
        )


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
