"""A transport that answers from a script, for fast deterministic tests (Kafka's MockClient)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._protocol import messages as m
from ..clock import Event, ThreadingClock
from ..transport import CoordinatorNode, FollowUp, TransportError

R = TypeVar("R", bound=m.Response)

Answer = m.Response | TransportError | Callable[[m.Request], m.Response]


_RESPONSE_TYPES = (
    m.FindCoordinatorResponse,
    m.JoinGroupResponse,
    m.SyncGroupResponse,
    m.HeartbeatResponse,
    m.LeaveGroupResponse,
    m.OffsetCommitResponse,
    m.OffsetFetchResponse,
    m.DescribeGroupResponse,
    m.ConsumerGroupHeartbeatResponse,
    m.ConsumerGroupDescribeResponse,
    m.ShareGroupHeartbeatResponse,
    m.ShareGroupDescribeResponse,
    m.ShareFetchResponse,
    m.ShareAcknowledgeResponse,
    m.DescribeShareGroupOffsetsResponse,
    m.AlterShareGroupOffsetsResponse,
)


class UnscriptedRequestError(AssertionError):
    """A request arrived that the script has no answer for."""


@dataclass(frozen=True, slots=True)
class SentRequest:
    """A request the member sent, with where it went and how long it would wait."""

    request: m.Request
    coordinator: CoordinatorNode | None
    timeout_s: float
    then: FollowUp | None = None
    """The follow-up offered with the request (never sent: no partition leads here)."""


class ScriptedTransport:
    """Answers each request with the next prepared answer for its response type.

    Example:
        transport = ScriptedTransport()
        transport.prepare(FindCoordinatorResponse(error_code=0, node_id=1, host="h", port=1))
        transport.prepare(JoinGroupResponse(error_code=79, member_id="m-1"))

    An answer is a response, a ``TransportError`` to raise (a disconnect or timeout),
    or a function of the request returning a response. A request with no prepared
    answer raises :class:`UnscriptedRequestError`.
    """

    def __init__(self) -> None:
        self._answers: dict[type, deque[Answer]] = {}
        self._lock = threading.Lock()
        self.sent: list[SentRequest] = []
        self.disconnects: list[CoordinatorNode] = []
        self.closed = False

    def prepare(self, answer: Answer, *, response_type: type[m.Response] | None = None) -> None:
        """Queue ``answer``; for a TransportError or function, say which response it stands for."""
        kind = response_type or type(answer)
        if not isinstance(kind, type) or not issubclass(kind, _RESPONSE_TYPES):
            raise TypeError("give response_type= for an error or a function answer")
        with self._lock:
            self._answers.setdefault(kind, deque()).append(answer)

    def requests(self, kind: type[Any]) -> list[Any]:
        """The requests of one type sent so far, oldest first."""
        return [s.request for s in self.sent if isinstance(s.request, kind)]

    def pending(self) -> int:
        """How many prepared answers are still unused."""
        with self._lock:
            return sum(len(q) for q in self._answers.values())

    # -- Transport -----------------------------------------------------------------------

    def send(
        self,
        request: m.Request,
        response_type: type[R],
        *,
        coordinator: CoordinatorNode | None,
        timeout_s: float,
        then: FollowUp | None = None,
    ) -> R:
        with self._lock:
            if self.closed:
                raise TransportError("transport is closed")
            self.sent.append(SentRequest(request, coordinator, timeout_s, then))
            queue = self._answers.get(response_type)
            if not queue:
                raise UnscriptedRequestError(f"no answer prepared for {request!r}")
            answer = queue.popleft()
        if isinstance(answer, TransportError):
            raise answer
        response = answer(request) if callable(answer) else answer
        assert isinstance(response, response_type)
        return response

    def disconnect(self, coordinator: CoordinatorNode) -> None:
        self.disconnects.append(coordinator)

    def warm_up(self, coordinator: CoordinatorNode) -> None:
        pass  # nothing to prepare: scripted answers

    def close(self) -> None:
        self.closed = True


class ManualClock(ThreadingClock):
    """A clock that only moves when told to, or when the engine sleeps; its threads, events
    and locks are ``threading``'s."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, interrupt: Event) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds
