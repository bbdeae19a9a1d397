"""Kafka's ``cooperative-sticky`` assignor: sticky, and hands partitions over in two rounds."""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol import (
    Assignment,
    ConsumerProtocolError,
    RebalanceProtocol,
    Subscription,
    decode_cooperative_sticky_user_data,
    encode_cooperative_sticky_user_data,
)
from ._sticky_core import AbstractStickyAssignor, MemberClaim

__all__ = ["CooperativeStickyAssignor"]


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """The sticky algorithm for the cooperative protocol (KIP-429); Kafka's recommended one.

    Java's ``CooperativeStickyAssignor``. The assignment is computed as by
    :class:`StickyAssignor`, from the members' ``owned_partitions``, and then every
    partition that would go to a new owner while another member still owns it is
    *withheld*: left unassigned this round. Its owner sees it missing from its new
    assignment, revokes it and rejoins; the follow-up rebalance, where nobody owns it any
    more, gives it to its new owner. Members keep consuming everything else throughout.

    Which claims count (KIP-792): a member's generation is its subscription's
    ``generation_id`` (v2+), else the generation in its user data (what Java's assignor
    and older members send), else unknown (-1). A partition claimed by several members
    goes to the one with the highest generation; if two share the highest generation,
    neither claim counts and the partition is withheld until both have let it go.

    Example:
        assignor = CooperativeStickyAssignor()
        owned = (TopicPartition("orders", 0), TopicPartition("orders", 1))
        subs = {
            "a": Subscription(("orders",), owned_partitions=owned, generation_id=3),
            "b": Subscription(("orders",)),                 # a new member
        }
        plan = assignor.assign({"orders": 2}, subs)
        # a keeps orders-0, gives up orders-1; b gets nothing yet, orders-1 next round.
    """

    name = "cooperative-sticky"
    _cooperative = True

    def __init__(self) -> None:
        self._generation = -1

    def supported_protocols(self) -> Sequence[RebalanceProtocol]:
        """COOPERATIVE first, and EAGER for the two-step upgrade from eager assignors.

        Returns:
            ``[COOPERATIVE, EAGER]``.
        """
        return [RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER]

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """The generation of this member's last assignment, as Java's assignor writes it.

        Older leaders (before KIP-792's v2 subscription) read the generation only here.

        Args:
            topics: the topics the member subscribes to (unused).

        Returns:
            Four bytes: the int32 generation, -1 before the first assignment.
        """
        return encode_cooperative_sticky_user_data(self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        """Remember the generation for the next subscription's user data.

        Args:
            assignment: what the leader gave this member (unused).
            generation_id: the generation it belongs to.
        """
        self._generation = generation_id

    @staticmethod
    def _claim(subscription: Subscription) -> MemberClaim:
        if subscription.generation_id >= 0:
            return MemberClaim(subscription.owned_partitions, subscription.generation_id)
        if subscription.user_data is None:
            return MemberClaim(subscription.owned_partitions, -1)
        try:
            generation = decode_cooperative_sticky_user_data(subscription.user_data)
        except ConsumerProtocolError:
            # As Java: user data that is not a generation counts as "no generation".
            generation = -1
        return MemberClaim(subscription.owned_partitions, generation)
