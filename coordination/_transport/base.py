"""The wake-up channel's interface (internal). The transport's interface is public:
:mod:`coordination.transport`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..transport import FollowUp


class Wake(Protocol):
    """How a wake-up reaches a member (``GroupMembership.wake`` documents the arguments)."""

    def __call__(
        self, reason: str, left_generation: int | None = None, *, probed: set[int] | None = None
    ) -> None: ...


class Wakeups(Protocol):
    """A side channel on which the members of a group tell one another that it is changing,
    so that they heartbeat at once instead of at their next interval (``coordination
    ._transport.wakeups`` is Kafka's). It only hastens what heartbeats find out anyway."""

    def start(self, wake: Wake, sibling_found: Callable[[int], None]) -> None:
        """Start listening; call ``wake(reason, left_generation, probed=...)`` for each
        other member's announcement (``left_generation``: the generation a departing member
        left, else None; ``probed``: one set shared by all the members that one read
        wakes), and ``sibling_found(generation)`` when a member sharing the listener calls
        ``rebalancing``."""
        ...

    def rebalancing(self, generation: int) -> None:
        """This member's heartbeat found the group rebalancing away from ``generation``:
        tell the members sharing its listener (their ``sibling_found``)."""
        ...

    def departure(self, member_id: str, generation: int) -> FollowUp | None:
        """A departure from ``generation``, ready to follow this member's LeaveGroup on the
        coordinator's connection (so that it is handled right after the broker accepted
        the LeaveGroup); None if it cannot. ``announce`` of that departure afterwards sends
        it only if it did not get through that way."""
        ...

    def announce(
        self,
        member_id: str,
        event: str,
        generation: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Tell the group's other members; ``generation``: the one a departing member left,
        announced only once the broker accepted its LeaveGroup. In the background, unless
        ``timeout_s`` is given: then from the calling thread, at once, for at most that long
        (a departure, which the others are waiting for)."""
        ...

    def flush(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the announcements made so far to be sent."""
        ...

    def record_rebalance(self, entry: Mapping[str, Any]) -> None:
        """Publish one of this member's completed rebalances (its timeline, which
        ``describe`` shows); in the background, and it wakes nobody."""
        ...

    def close(self, timeout_s: float) -> None:
        """Stop (called once the transport is closed)."""
        ...
