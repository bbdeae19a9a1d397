"""The transport: the interface between a member's engine and the network, and its messages.

A member sends its group requests (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups) through a :class:`Transport`. The
default one speaks Kafka's wire protocol through kafka-python; a test passes
``coordination.testing.ScriptedTransport``, a simulation its simulated network, and a user
may pass their own (``Coordinator(..., transport=...)``, or any recipe's ``transport=``).

Example:
    from coordination.transport import (
        CoordinatorNode, HeartbeatRequest, HeartbeatResponse, Transport, TransportError)

    class Unreachable:  # a Transport whose every request fails, as a partitioned member's
        def send(self, request, response_type, *, coordinator, timeout_s, then=None):
            raise TransportError(f"{type(request).__name__}: network unreachable")

        def disconnect(self, coordinator: CoordinatorNode) -> None: ...
        def warm_up(self, coordinator: CoordinatorNode) -> None: ...
        def close(self) -> None: ...

:func:`open_admin_client` opens kafka-python's ``KafkaAdminClient`` for a part that asks the
cluster something outside the group protocol (topic metadata, topic ids), and leaves no I/O
thread behind when the bootstrap fails.

The message classes are Kafka's request and response schemas (``JoinGroupRequest.json``
and friends) in snake_case, frozen dataclasses independent of any Kafka client; a
transport fills ``version`` in each response with the version the broker spoke.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ._kafka_python import open_admin_client as open_admin_client
from ._protocol.messages import DescribedMember as DescribedMember
from ._protocol.messages import DescribeGroupRequest as DescribeGroupRequest
from ._protocol.messages import DescribeGroupResponse as DescribeGroupResponse
from ._protocol.messages import FindCoordinatorRequest as FindCoordinatorRequest
from ._protocol.messages import FindCoordinatorResponse as FindCoordinatorResponse
from ._protocol.messages import HeartbeatRequest as HeartbeatRequest
from ._protocol.messages import HeartbeatResponse as HeartbeatResponse
from ._protocol.messages import JoinGroupRequest as JoinGroupRequest
from ._protocol.messages import JoinGroupResponse as JoinGroupResponse
from ._protocol.messages import JoinGroupResponseMember as JoinGroupResponseMember
from ._protocol.messages import LeaveGroupRequest as LeaveGroupRequest
from ._protocol.messages import LeaveGroupResponse as LeaveGroupResponse
from ._protocol.messages import OffsetCommitRequest as OffsetCommitRequest
from ._protocol.messages import OffsetCommitResponse as OffsetCommitResponse
from ._protocol.messages import OffsetFetchRequest as OffsetFetchRequest
from ._protocol.messages import OffsetFetchResponse as OffsetFetchResponse
from ._protocol.messages import Request as Request
from ._protocol.messages import Response as Response
from ._protocol.messages import SyncGroupRequest as SyncGroupRequest
from ._protocol.messages import SyncGroupResponse as SyncGroupResponse
from .errors import ConnectionFailedError

__all__ = [
    "CoordinatorNode",
    "DescribeGroupRequest",
    "DescribeGroupResponse",
    "DescribedMember",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "FollowUp",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "JoinGroupResponseMember",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "Request",
    "Response",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "Transport",
    "TransportError",
    "open_admin_client",
]

R = TypeVar("R", bound=Response)
"""The response type a :meth:`Transport.send` returns: the ``response_type`` it was given."""


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
