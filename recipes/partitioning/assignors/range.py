"""Kafka's ``range`` assignor: each topic's partitions split into contiguous ranges."""

from __future__ import annotations

from collections.abc import Mapping

from ..protocol import Assignment, Subscription, TopicPartition
from .base import PartitionAssignor, gc_paused, member_order_key, subscribed_partition_counts

__all__ = ["RangeAssignor"]


class RangeAssignor(PartitionAssignor):
    """Splits each topic on its own into contiguous ranges, one per subscribed member.

    Java's ``RangeAssignor`` (without rack awareness): per topic, the members subscribed
    to it are ordered (static members by ``group_instance_id``, then the others by member
    id); with ``n`` partitions and ``m`` members, the first ``n % m`` members get
    ``n // m + 1`` partitions, the rest ``n // m``. Partition ``i`` of topics with the same
    count and subscribers goes to the same member (co-partitioning), which is what joins
    across topics need; the price is imbalance when many topics have few partitions.

    Example:
        assignment = RangeAssignor().assign(
            {"orders": 3}, {"a": Subscription(("orders",)), "b": Subscription(("orders",))})
        # a: orders-0, orders-1; b: orders-2
    """

    name = "range"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Assign contiguous ranges per topic; see the class docstring for the rules.

        Args:
            partitions_per_topic: partition count of each known topic.
            subscriptions: each member id's subscription.

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
