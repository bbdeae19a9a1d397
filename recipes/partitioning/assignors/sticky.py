"""Kafka's ``sticky`` assignor: balanced, and keeps partitions where they were (eager)."""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    TopicPartition,
    decode_sticky_user_data,
    encode_sticky_user_data,
)
from ._sticky_core import AbstractStickyAssignor, MemberClaim

__all__ = ["StickyAssignor"]


class StickyAssignor(AbstractStickyAssignor):
    """Balanced assignment that moves as few partitions as possible (eager protocol).

    Java's ``StickyAssignor`` (KIP-54), the eager sibling of
    :class:`CooperativeStickyAssignor`; both run Kafka's ``AbstractStickyAssignor``
    algorithm. The result is balanced (with identical subscriptions, member counts differ
    by at most one) and, within that, keeps each partition with its previous owner.

    Because eager members revoke everything before they rejoin, their subscriptions carry
    no owned partitions; each member instead sends its last assignment and generation in
    its user data, in Java's layout (see ``protocol.encode_sticky_user_data``), so Java
    and Python members can share a group. Claims follow KIP-792: a partition claimed by
    several members goes to the highest generation; two claims from the same generation
    are both ignored.

    Example:
        assignor = StickyAssignor()
        subs = {"a": Subscription(("orders",)), "b": Subscription(("orders",))}
        plan = assignor.assign({"orders": 4}, subs)      # 2 partitions each
        # on each member, after SyncGroup:
        assignor.on_assignment(plan["a"], generation_id=1)
        assignor.subscription_user_data(frozenset({"orders"}))  # a's claim for next time
    """

    name = "sticky"
    _cooperative = False

    def __init__(self) -> None:
        self._partitions: Sequence[TopicPartition] | None = None
        self._generation = -1

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """This member's last assignment and generation, or ``None`` before the first one.

        Args:
            topics: the topics the member subscribes to (unused, as in Java).

        Returns:
            Java ``StickyAssignor`` user data (version 1, with the generation).
        """
        if self._partitions is None:
            return None
        return encode_sticky_user_data(self._partitions, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Remember the assignment and generation for the next subscription.

        Args:
            assignment: what the leader gave this member.
            generation_id: the generation it belongs to.
        """
        self._partitions = assignment.partitions
        self._generation = generation_id

    @staticmethod
    def _claim(subscription: Subscription) -> MemberClaim:
        # Java reads an eager member's previous assignment only from its user data; user data
        # it cannot parse counts as owning nothing.
        if not subscription.user_data:
            return MemberClaim((), -1)
        try:
            data = decode_sticky_user_data(subscription.user_data)
        except ConsumerProtocolError:
            return MemberClaim((), -1)
        return MemberClaim(data.partitions, -1 if data.generation is None else data.generation)
