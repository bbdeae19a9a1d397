"""The partition assignor interface: what the group leader runs to divide partitions."""

from __future__ import annotations

import abc
import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence

from coordination.errors import ConfigurationError

from ..protocol import Assignment, RebalanceProtocol, Subscription

__all__ = ["PartitionAssignor", "PartitionRacks"]

PartitionRacks = Mapping[str, Sequence[frozenset[str]]]
"""For each topic, the racks of each partition's replicas, by partition number (KIP-881)."""


class PartitionAssignor(abc.ABC):
    """Divides the partitions of the subscribed topics among the members of a group.

    Roughly Kafka's ``ConsumerPartitionAssignor``. Every member lists the assignors it
    supports in JoinGroup (by :attr:`name`, with the :class:`Subscription` bytes as
    metadata); the broker picks one all members support, and the leader runs its
    :meth:`assign` on everyone's subscriptions.

    Example:
        class EverythingToTheFirst(PartitionAssignor):
            name = "everything-to-the-first"

            def assign(self, partitions_per_topic, subscriptions):
                members = sorted(subscriptions)
                out = {m: Assignment(()) for m in members}
                if members:
                    out[members[0]] = Assignment(tuple(
                        TopicPartition(t, p)
                        for t in sorted(partitions_per_topic)
                        for p in range(partitions_per_topic[t])))
                return out

    Invariants an implementation must keep:
        * Every member id of ``subscriptions`` is a key of the result, with an empty
          assignment if it gets nothing.
        * A partition goes to at most one member, and only to a member subscribed to its
          topic. Topics missing from ``partitions_per_topic`` (unknown, not yet created)
          are skipped.
        * The result depends only on the contents of the arguments, not on the order of the
          mappings: sort member ids and topics. A deterministic output avoids needless
          movement when another member becomes leader.
        * With :attr:`RebalanceProtocol.COOPERATIVE`, a partition some member still owns
          (its ``owned_partitions``) must not be given to another member in the same
          round: leave it out, the owner revokes it and rejoins, and the next round
          assigns it. Kafka's leader checks this for assignors other than its own
          ``cooperative-sticky``; so should yours.

    Concurrency:
        :meth:`assign` runs on the leader only, on the engine's thread, within the
        rebalance timeout; :meth:`on_assignment` runs on every member after SyncGroup.
    """

    name: str
    """The protocol name in JoinGroup, e.g. ``"range"``; all members must agree on it."""

    rack_aware: bool = False
    """Whether :meth:`assign` takes ``partition_racks=`` (KIP-881). The group leader passes
    the racks of every partition's replicas only to assignors that say so, and only when
    some member has a rack: an assignor of your own keeps the two-argument ``assign``."""

    def supported_protocols(self) -> Sequence[RebalanceProtocol]:
        """The rebalance protocols this assignor can follow, most preferred first.

        Returns:
            ``[EAGER]`` unless overridden. The group uses COOPERATIVE only when every
            assignor a member configures supports it.
        """
        return [RebalanceProtocol.EAGER]

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """The user data this member sends with its subscription.

        Args:
            topics: the topics the member subscribes to.

        Returns:
            Bytes for :attr:`Subscription.user_data`, or ``None`` (the default) for none.
        """
        return None

    @abc.abstractmethod
    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Divide the partitions among the members (run on the group leader).

        Args:
            partitions_per_topic: partition count of each known topic.
            subscriptions: each member id's subscription, decoded from JoinGroup.

        Returns:
            Each member id's assignment; every member id present, partitions sorted.

        Raises:
            ConfigurationError: a partition count is negative.
        """

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Remember this member's new assignment (run on every member after SyncGroup).

        The default does nothing; sticky assignors keep what they need for their next
        :meth:`subscription_user_data`.

        Args:
            assignment: what the leader gave this member.
            generation_id: the generation it belongs to.
        """
        return None


def member_order_key(member_id: str, subscription: Subscription) -> tuple[int, str, str]:
    """Java's ``MemberInfo`` order: static members by instance id first, then by member id."""
    instance = subscription.group_instance_id
    if instance is not None:
        return (0, instance, member_id)
    return (1, member_id, "")


def subscribed_partition_counts(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, int]:
    """The known topics someone subscribes to, with their partition counts, sorted by name."""
    wanted: set[str] = set()
    for sub in subscriptions.values():
        wanted.update(sub.topics)
    counts: dict[str, int] = {}
    for topic in sorted(wanted):
        count = partitions_per_topic.get(topic)
        if count is None:
            continue
        if count < 0:
            raise ConfigurationError(f"topic {topic!r} has a negative partition count {count}")
        counts[topic] = count
    return counts


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while an assignment builds its result.

    An assignment of a million partitions creates a million small tuples; each batch of
    allocations triggers a collection that walks all of them again, which triples the
    time of the whole call. Nothing an assignor creates is cyclic, so collection can wait
    for the end of the call; reference counting still frees everything as usual.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
