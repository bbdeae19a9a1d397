"""The wake-up plan: when a woken member heartbeats, and whether its join wakes others.

Members of a group tell each other of changes (a join, a departure) on the wake-up
channel, so that the others find a rebalance at once instead of at their next
heartbeat. :class:`WakePlan` keeps what one member was told: the extra heartbeats a
wake-up asked for, and whether the group told it a rebalance is under way (its JoinGroup
then follows the others and wakes nobody). It answers the engine's questions and never
sends anything itself. Not thread-safe: the engine calls it under its lock.
"""

from __future__ import annotations

# When a woken member heartbeats, after the wake-up: at once, then in case the announced
# change had not reached the coordinator yet.
WAKE_HEARTBEATS_S = (0.0, 0.01, 0.05, 0.25)
# The same, for a member whose sibling in this process asks for both (see
# GroupMembership.wake): only in case the sibling's answer never comes (it closed, or its
# heartbeat failed).
SIBLING_ASKS_WAKE_HEARTBEATS_S = (0.1, 0.3)


class WakePlan:
    """The heartbeats wake-ups asked for, and whether a rebalance was announced to us."""

    def __init__(self) -> None:
        # Heartbeats another member's wake-up asked for (engine clock), soonest first.
        self.at: list[float] = []
        # Whether the group told this member that a rebalance is under way since it was
        # last stable: its JoinGroup then follows the others, and wakes nobody.
        self.rebalance_told = False

    def woken(self, now: float, generation_id: int, probed: set[int] | None) -> None:
        """A wake-up arrived for a stable member of ``generation_id``: plan heartbeats (later
        ones if a sibling sharing the wake-up asks the broker for both)."""
        delays: tuple[float, ...] = WAKE_HEARTBEATS_S
        if probed is not None:
            if generation_id in probed:
                delays = SIBLING_ASKS_WAKE_HEARTBEATS_S
            probed.add(generation_id)
        self.at = [now + delay for delay in delays]

    def told_of_rebalance(self) -> None:
        """A rebalance is known to be under way: nothing is left to ask by heartbeat."""
        self.at.clear()
        self.rebalance_told = True

    def due(self, now: float) -> bool:
        return bool(self.at) and self.at[0] <= now

    def heartbeat_sent(self, now: float) -> None:
        """A heartbeat left: the planned ones due by now are answered by it."""
        self.at = [t for t in self.at if t > now]

    def next_in(self, now: float, interval_next_s: float) -> float:
        """Seconds until the next heartbeat: the interval's, or sooner if a wake-up asked."""
        if self.at:
            return min(interval_next_s, max(0.0, self.at[0] - now))
        return interval_next_s

    def join_announces(self, has_member_id: bool, is_static: bool) -> bool:
        """Whether a JoinGroup wakes the others: one that may start a rebalance does, one
        that answers a rebalance under way does not (every member would wake every
        other)."""
        return not self.rebalance_told and (has_member_id or is_static)

    def stable(self, now: float, rejoined_same_generation: bool) -> None:
        """The member is stable. Told of a rebalance the broker had not begun when it
        answered (``rejoined_same_generation``): a departure announced ahead of its
        LeaveGroup overtook it, so ask by heartbeat until the rebalance shows."""
        if self.rebalance_told and rejoined_same_generation:
            self.at = [now + d for d in WAKE_HEARTBEATS_S]
        self.rebalance_told = False

    def member_reset(self) -> None:
        """A new member's join starts a rebalance of its own, whatever this member was told
        before: the others must hear of it."""
        self.rebalance_told = False
