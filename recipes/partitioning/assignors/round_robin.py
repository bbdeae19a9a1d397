"""Kafka's ``roundrobin`` assignor: all partitions dealt in turn to the members."""

from __future__ import annotations

from collections.abc import Mapping

from ..protocol import Assignment, Subscription, TopicPartition
from .base import PartitionAssignor, gc_paused, member_order_key, subscribed_partition_counts

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(PartitionAssignor):
    """Deals every partition of every subscribed topic to the members in turn.

    Java's ``RoundRobinAssignor``: members are ordered (static members by
    ``group_instance_id``, then the others by member id) and form a circle; partitions
    are taken sorted by topic, then partition number, and each goes to the next member in
    the circle that subscribes to its topic, skipping those that do not. With identical
    subscriptions, counts differ by at most one; with different subscriptions the result
    can be unbalanced (use a sticky assignor).

    Example:
        assignment = RoundRobinAssignor().assign(
            {"a": 2, "b": 1}, {"m1": Subscription(("a", "b")), "m2": Subscription(("a", "b"))})
        # m1: a-0, b-0; m2: a-1
    """

    name = "roundrobin"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Deal the partitions in turn; see the class docstring for the rules.

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
            circle = sorted(subscriptions, key=lambda m: member_order_key(m, subscriptions[m]))
            topic_sets = [frozenset(subscriptions[m].topics) for m in circle]
            result: dict[str, list[TopicPartition]] = {m: [] for m in sorted(subscriptions)}
            lists = [result[m] for m in circle]
            size = len(circle)
            at = 0
            for topic, count in counts.items():
                # Someone subscribes to every topic in counts, so the search below ends.
                for p in range(count):
                    while topic not in topic_sets[at]:
                        at = (at + 1) % size
                    lists[at].append(TopicPartition(topic, p))
                    at = (at + 1) % size
            return {m: Assignment(tuple(partitions)) for m, partitions in result.items()}
