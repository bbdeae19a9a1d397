"""Kafka's ``range`` assignor: each topic's partitions split into contiguous ranges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..protocol import Assignment, Subscription, TopicPartition
from .base import (
    PartitionAssignor,
    PartitionRacks,
    gc_paused,
    member_order_key,
    subscribed_partition_counts,
)

__all__ = ["RangeAssignor"]


class RangeAssignor(PartitionAssignor):
    """Splits each topic on its own into contiguous ranges, one per subscribed member.

    Java's ``RangeAssignor``: per topic, the members subscribed
    to it are ordered (static members by ``group_instance_id``, then the others by member
    id); with ``n`` partitions and ``m`` members, the first ``n % m`` members get
    ``n // m + 1`` partitions, the rest ``n // m``. Partition ``i`` of topics with the same
    count and subscribers goes to the same member (co-partitioning), which is what joins
    across topics need; the price is imbalance when many topics have few partitions.

    Racks (KIP-881), as Java: when members have racks (``client_rack``) and the topic's
    partitions have replicas on some of those racks, but not every partition on the same
    racks, each member first takes, up to its range's size, partitions with a replica on
    its rack (in partition order; topics with the same subscribers and partition count
    together, partition ``i`` of all of them to one member, to keep co-partitioning), then
    the ranges are filled up as without racks. Members without a rack match any partition.
    The sizes stay those of the plain range assignment: balance before locality.

    Example:
        assignment = RangeAssignor().assign(
            {"orders": 3}, {"a": Subscription(("orders",)), "b": Subscription(("orders",))})
        # a: orders-0, orders-1; b: orders-2
    """

    name = "range"
    rack_aware = True

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        partition_racks: PartitionRacks | None = None,
    ) -> dict[str, Assignment]:
        """Assign contiguous ranges per topic; see the class docstring for the rules.

        Args:
            partitions_per_topic: partition count of each known topic.
            subscriptions: each member id's subscription.
            partition_racks: the racks of each partition's replicas, per topic; None (or a
                topic missing) means no rack is known.

        Returns:
            Each member id's assignment, partitions sorted by topic and partition.

        Raises:
            ConfigurationError: a partition count is negative.
        """
        with gc_paused():
            counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
            ordered = sorted(subscriptions, key=lambda m: member_order_key(m, subscriptions[m]))
            topic_sets = {m: frozenset(subscriptions[m].topics) for m in ordered}
            result: dict[str, list[TopicPartition]] = {m: [] for m in sorted(subscriptions)}
            racks: dict[str, str] = {m: rack for m in ordered if (rack := subscriptions[m].rack_id)}
            if racks and partition_racks:
                _assign_with_racks(counts, ordered, topic_sets, racks, partition_racks, result)
                return {m: Assignment(tuple(sorted(ps))) for m, ps in result.items()}
            for topic, count in counts.items():
                members = [m for m in ordered if topic in topic_sets[m]]
                if not members or count == 0:
                    continue
                quota, extra = divmod(count, len(members))
                start = 0
                for i, member in enumerate(members):
                    size = quota + (1 if i < extra else 0)
                    result[member].extend(
                        TopicPartition(topic, p) for p in range(start, start + size)
                    )
                    start += size
            return {m: Assignment(tuple(partitions)) for m, partitions in result.items()}


class _Topic:
    """One topic's state in a rack-aware range assignment (Java's TopicAssignmentState)."""

    def __init__(
        self,
        topic: str,
        count: int,
        members: list[str],
        member_racks: Mapping[str, str],
        partition_racks: Sequence[frozenset[str]],
    ) -> None:
        self.topic = topic
        self.count = count
        self.members = members
        self.member_racks = {m: member_racks.get(m) for m in members}
        self.unassigned = list(range(count))  # kept in partition order
        self.assigned = dict.fromkeys(members, 0)
        self.quota, self.extra = divmod(count, len(members))
        consumer_racks = {r for r in self.member_racks.values() if r}
        self.racks: Sequence[frozenset[str]] = (
            [partition_racks[p] if p < len(partition_racks) else frozenset() for p in range(count)]
            if consumer_racks
            else ()
        )
        all_racks = frozenset().union(*self.racks) if self.racks else frozenset()
        # Java's rule: racks matter when members' racks meet the partitions' and the
        # partitions are not all on the same racks (then any member is as close as any).
        self.needs_racks = bool(consumer_racks & all_racks) and any(
            r != all_racks for r in self.racks
        )

    def racks_match(self, member: str, partition: int) -> bool:
        rack = self.member_racks[member]
        return rack is None or (bool(self.racks) and rack in self.racks[partition])

    def max_assignable(self, member: str) -> int:
        return max(0, self.quota + (1 if self.extra > 0 else 0) - self.assigned[member])

    def take(
        self, member: str, partitions: list[int], result: dict[str, list[TopicPartition]]
    ) -> None:
        result[member].extend(TopicPartition(self.topic, p) for p in partitions)
        self.assigned[member] += len(partitions)
        if self.assigned[member] > self.quota:
            self.extra -= 1  # this member has its one extra partition now
        taken = set(partitions)
        self.unassigned = [p for p in self.unassigned if p not in taken]


def _ranges(state: _Topic, result: dict[str, list[TopicPartition]], rack_matched: bool) -> None:
    for member in state.members:
        if not state.unassigned:
            return
        limit = state.max_assignable(member)
        fitting = [p for p in state.unassigned if not rack_matched or state.racks_match(member, p)][
            :limit
        ]
        if fitting:
            state.take(member, fitting, result)


def _assign_with_racks(
    counts: Mapping[str, int],
    ordered: list[str],
    topic_sets: Mapping[str, frozenset[str]],
    member_racks: Mapping[str, str],
    partition_racks: PartitionRacks,
    result: dict[str, list[TopicPartition]],
) -> None:
    states = []
    for topic, count in counts.items():
        members = [m for m in ordered if topic in topic_sets[m]]
        if members and count:
            states.append(
                _Topic(topic, count, members, member_racks, partition_racks.get(topic, ()))
            )
    if any(s.needs_racks for s in states):
        # Topics with the same subscribers (and racks) and partition count go together.
        # (A topic whose members have no rack counts as having no partitions here, as in
        # Java: nothing of it is placed by rack.)
        groups: dict[tuple[tuple[str, ...], int], list[_Topic]] = {}
        for state in states:
            groups.setdefault((tuple(state.members), len(state.racks)), []).append(state)
        for (subscribers, count), together in groups.items():
            if len(together) > 1:
                _co_partitioned(list(subscribers), count, together, result)
            elif together[0].needs_racks:
                _ranges(together[0], result, rack_matched=True)
    for state in states:
        _ranges(state, result, rack_matched=False)


def _co_partitioned(
    members: list[str], count: int, states: list[_Topic], result: dict[str, list[TopicPartition]]
) -> None:
    """Partition ``p`` of every topic to the first member on a rack of all of them."""
    remaining = list(members)
    for p in range(count):
        chosen = next(
            (
                m
                for m in remaining
                if all(s.racks_match(m, p) and s.max_assignable(m) > 0 for s in states)
            ),
            None,
        )
        if chosen is None:
            continue
        for s in states:
            s.take(chosen, [p], result)
        if all(s.max_assignable(chosen) == 0 for s in states):
            remaining.remove(chosen)
            if not remaining:
                return
