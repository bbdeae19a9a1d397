"""The interface between the membership engine and the network."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .._protocol.messages import Request, Response
from ..errors import ConnectionFailedError

R = TypeVar("R", bound=Response)


@dataclass(frozen=True, slots=True)
class CoordinatorNode:
    """The broker that coordinates the group, as FindCoordinator named it."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (node {self.node_id})"


class TransportError(Exception):
    """A request got no response: disconnected, timed out, or the broker is unreachable.

    ``fatal`` is set for failures retrying cannot fix (TLS or SASL rejected);
    ``error_type`` is then the error the member stops with.
    """

    def __init__(
        self,
        message: str,
        *,
        fatal: bool = False,
        error_type: type[ConnectionFailedError] = ConnectionFailedError,
    ) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.error_type = error_type

    def stop_error(self, context: str) -> ConnectionFailedError:
        """The error a member stops with for this failure, ``context`` naming where."""
        return self.error_type(f"{context}: {self}")


class FollowUp(Protocol):
    """A request for one broker that may ride on the coordinator's connection right behind
    another request: the broker handles one connection's requests one at a time, in order,
    so the follow-up is handled only once the request before it has been answered, a round
    trip sooner than if it were sent after that answer came back."""

    broker_id: int
    """The broker it is for: it rides along only when that broker is the coordinator."""
    leads: bool
    """It goes ahead of the request rather than behind it (on the same connection, so the
    broker handles it first)."""

    def request(self) -> Any:
        """The request, in the transport's own form."""
        ...

    def answered(self, response: Any) -> None:
        """Its response, or the TransportError it got instead."""
        ...


class Transport(Protocol):
    """Sends group requests and returns their responses, blocking the calling thread.

    Implementations must be safe to call from two threads at once: the engine's
    membership thread and its heartbeat thread each send their own requests.
    """

    def send(
        self,
        request: Request,
        response_type: type[R],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: FollowUp | None = None,
    ) -> R:
        """Send ``request`` to ``coordinator`` (or any broker if None); return the response.

        ``then``: sent right behind ``request`` on the same connection if the coordinator
        is ``then.broker_id`` and the transport can; its answer goes to ``then.answered``.
        Otherwise it is not sent at all, and the caller's ``then`` learns nothing.

        Raises:
            TransportError: no response arrived within ``timeout_s``, or the connection failed.
        """
        ...

    def disconnect(self, coordinator: CoordinatorNode) -> None:
        """Drop the connection to a coordinator that this member no longer trusts."""
        ...

    def warm_up(self, coordinator: CoordinatorNode) -> None:
        """Prepare, ahead of their first use, whatever this member's later requests to
        ``coordinator`` need (the membership thread calls it once, when its first join is
        done, so that the cost lands outside any rebalance). Best effort: never raises."""
        ...

    def close(self) -> None:
        """Release every connection and thread; later sends fail with TransportError."""
        ...


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
